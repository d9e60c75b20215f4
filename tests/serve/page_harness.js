// The page's script (serve/page/index.html) under a minimal fake DOM and fetch, for machines
// without Chromium (tests/serve/test_page_script.py runs it with node): prints one JSON line.
const fs = require("fs");
const els = {};
function mk(tag) {
  const e = {tag, textContent: "", value: "", style: {}, dataset: {}, children: [], attrs: {}, listeners: {},
    setAttribute(k, v) { this.attrs[k] = v; }, appendChild(c) { this.children.push(c); return c; },
    replaceChildren(...c) { this.children = c; }, addEventListener(t, f) { this.listeners[t] = f; },
    get innerText() { return this.textContent; }};
  return e;
}
for (const id of ["model", "text", "key", "go", "task", "error", "label", "detail", "attention-box", "attention"]) els[id] = mk("div");
global.document = {getElementById: (id) => els[id], createElement: mk, body: {get innerText() { return "x"; }, dataset: {}},
  fonts: {add() {}, delete() {}}};
global.FontFace = class { constructor(n, src) { this.src = src; } async load() {} };
let calls = [];
global.fetch = async (path, opts) => {
  opts = opts || {}; const h = opts.headers || {};
  calls.push([path, h.Authorization || null, h["Content-Type"] || null]);
  const ok = h.Authorization === "Bearer k";
  if (!ok) return {ok: false, status: 401, json: async () => ({error: {message: "missing or wrong API key: ..."}})};
  if (path === "/v1/models") return {ok: true, status: 200, json: async () => ({data: [{id: "<img src=x onerror=1>", task: "classify", routes: ["/v1/classify"]}]})};
  if (path.startsWith("/font")) return {ok: true, status: 200, arrayBuffer: async () => new ArrayBuffer(8)};
  if (path === "/v1/classify") return {ok: true, status: 200, json: async () => ({data: [{label: "<b>pos</b>", probs: {"<b>pos</b>": 0.7, "neg&": 0.3}}]})};
  if (path === "/v1/attention") return {ok: true, status: 200, text: async () => "<html></html>"};
};
eval(fs.readFileSync(process.argv[2], "utf8"));
(async () => {
  await new Promise((r) => setTimeout(r, 50));
  const out = {initError: els.error.textContent, optionsBeforeKey: els.model.children.length};
  els.text.value = "股市";
  els.key.value = "k";
  els.model.value = "<img src=x onerror=1>";
  await els.go.listeners.click();
  await new Promise((r) => setTimeout(r, 50));
  out.options = els.model.children.map((o) => [o.tag, o.textContent, o.attrs.value]);
  out.label = els.label.textContent;
  out.error = els.error.textContent;
  out.rows = els.detail.children[0].children.map((tr) => tr.children.map((td) => td.textContent || td.children[0].style.width));
  out.attention = els["attention-box"].style.display;
  out.font = document.body.dataset.font;
  out.calls = calls;
  console.log(JSON.stringify(out));
})();
