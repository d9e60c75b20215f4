"""The checker watches the learner's own program run (issue 59): sizes, calls, masks and causality taken from
their code in use, the verdict policy (a bug needs a positive identification), notebooks.

Every test runs the CLI's path (`check_file`: a child process, the watched run), as a learner meets it."""
from __future__ import annotations

import json
import textwrap

import pytest

from scratchformer.check import check_file

pytestmark = pytest.mark.filterwarnings("ignore")

HEAD = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"

SDPA_WITH_SCALE = HEAD + textwrap.dedent('''
    HID_DIM = 32
    N_HEADS = 4


    class ScaledDotProductAttention(nn.Module):
        def forward(self, q, k, v, scale=None, attn_mask=None):
            scores = q @ k.transpose(-2, -1)
            if scale is not None:          # the caller always passes it
                scores = scores * scale
            if attn_mask is not None:
                scores = scores.masked_fill(attn_mask, float("-inf"))   # True = padding
            return torch.softmax(scores, dim=-1) @ v


    class MultiHeadAttention(nn.Module):
        def __init__(self, hid, heads):
            super().__init__()
            self.h, self.dk = heads, hid // heads
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(hid, hid) for _ in range(4))
            self.attn = ScaledDotProductAttention()

        def forward(self, x, pad):
            B, T, C = x.shape
            q = self.wq(x).view(B, T, self.h, self.dk).transpose(1, 2)
            k = self.wk(x).view(B, T, self.h, self.dk).transpose(1, 2)
            v = self.wv(x).view(B, T, self.h, self.dk).transpose(1, 2)
            o = self.attn(q, k, v, scale=1.0 / math.sqrt(self.dk), attn_mask=pad)
            return self.wo(o.transpose(1, 2).reshape(B, T, C))


    class Classifier(nn.Module):
        def __init__(self, vocab, hid, heads, n_classes, pad_id):
            super().__init__()
            self.pad_id = pad_id
            self.emb = nn.Embedding(vocab, hid)
            self.mha = MultiHeadAttention(hid, heads)
            self.out = nn.Linear(hid, n_classes)

        def forward(self, ids):
            pad = (ids == self.pad_id)[:, None, None, :]     # (B, 1, 1, T), True = padding
            h = self.mha(self.emb(ids), pad)
            return self.out(h[:, 0])


    if __name__ == "__main__":
        model = Classifier(50, HID_DIM, N_HEADS, 3, pad_id=0)
        ids = torch.tensor([[5, 6, 7, 8], [9, 4, 0, 0]])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(100000):               # a training loop: the check watches the first step only
            loss = F.cross_entropy(model(ids), torch.tensor([0, 1]))
            opt.zero_grad()
            loss.backward()
            opt.step()
''')


def _check(tmp_path, source, name="learner.py", **kw):
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return check_file(path, lang="en", timeout_s=60, **kw)


def test_a_component_is_checked_as_its_caller_calls_it_with_the_masks_their_model_builds(tmp_path):
    r = _check(tmp_path, SDPA_WITH_SCALE)
    comps = {c.kind: c for c in r.components}
    assert r.exit_code == 0, r.text("en")
    assert comps["scaled_dot_product"].status == "ok" and comps["attention"].status == "ok"
    assert "the mask your model passed to" in r.mask_convention and "1/True = padding (bool)" in r.mask_convention
    assert "d_model=32 (" in r.sizes and "in your run: " in r.sizes  # from the construction site, not a guess
    assert "stopped at the second call of Classifier" in r.watched


def test_a_missing_scale_in_the_caller_is_still_named(tmp_path):
    r = _check(tmp_path, SDPA_WITH_SCALE.replace("scale=1.0 / math.sqrt(self.dk), ", ""))
    assert r.exit_code == 1 and "missing-scale" in r.bug_ids(), r.text("en")


def test_an_inverted_mask_built_by_their_model_is_named(tmp_path):
    r = _check(tmp_path, SDPA_WITH_SCALE.replace("pad = (ids == self.pad_id)", "pad = (ids != self.pad_id)"))
    assert r.exit_code == 1 and "mask-inverted" in r.bug_ids(), r.text("en")


SHARED = HEAD + textwrap.dedent('''
    class Attention(nn.Module):
        """One class for the encoder (causal=False) and the decoder's self-attention (causal=True)."""
        def __init__(self, d_model, n_heads, causal):
            super().__init__()
            self.h, self.causal = n_heads, causal
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=-1)
            q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.h)
            if self.causal:
                tril = torch.tril(torch.ones(T, T, dtype=torch.bool))
                att = att.masked_fill(~tril, float("-inf"))
            y = torch.softmax(att, dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(B, T, C))


    class TwoStacks(nn.Module):
        def __init__(self, vocab, d_model, n_heads):
            super().__init__()
            self.emb = nn.Embedding(vocab, d_model)
            self.enc = Attention(d_model, n_heads, causal=False)
            self.dec = Attention(d_model, n_heads, causal=True)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, src, tgt):
            memory = self.enc(self.emb(src))
            return self.head(self.dec(self.emb(tgt)) + memory.mean(1, keepdim=True))


    def demo():
        model = TwoStacks(40, 32, 4)
        print(model(torch.randint(1, 40, (2, 7)), torch.randint(1, 40, (2, 5))).shape)
''')


def test_an_attention_shared_by_encoder_and_decoder_is_not_called_non_causal(tmp_path):
    r = _check(tmp_path, SHARED)
    assert "no-causal-mask" not in r.bug_ids() and r.exit_code in (0, 2), r.text("en")
    assert "demo()" in r.watched


def test_their_own_run_raising_inside_a_component_is_an_error_ours_is_not(tmp_path):
    broken = SDPA_WITH_SCALE.replace("return self.wo(o.transpose(1, 2).reshape(B, T, C))",
                                     "return self.wo(o.reshape(B, T, C, 1))")
    r = _check(tmp_path, broken)
    att = {c.kind: c for c in r.components}["attention"]
    assert att.status == "error" and r.exit_code == 1 and "your own program raised it" in att.detail, r.text("en")
    # the same code with no program of its own: our probe raised, so it could not be checked
    r = _check(tmp_path, broken.split('if __name__ == "__main__":')[0], name="no_demo.py")
    assert all(c.status != "error" for c in r.components) and r.exit_code == 2, r.text("en")


def test_module_level_training_is_stopped_after_one_step_and_the_classes_are_checked(tmp_path):
    src = SDPA_WITH_SCALE.replace('if __name__ == "__main__":\n', "if True:\n")
    r = _check(tmp_path, src)
    assert r.exit_code == 0 and r.seconds < 30, r.text("en")


def test_a_layer_norm_that_computes_an_rms_norm_is_checked_as_one(tmp_path):
    src = HEAD + textwrap.dedent('''
        class LayerNorm(nn.Module):
            """T5's: no mean removed, no bias (an RMS norm under another name)."""
            def __init__(self, d, eps=1e-6):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(d))
                self.eps = eps

            def forward(self, x):
                return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    ''')
    r = _check(tmp_path, src)
    ln = {c.kind: c for c in r.components}["layer_norm"]
    assert ln.status == "ok" and "an RMS norm by what it does" in ln.detail and r.exit_code == 0, r.text("en")
    r = _check(tmp_path, src.replace("x.pow(2).mean(-1, keepdim=True)", "x.mean(-1, keepdim=True).pow(2)"), name="b.py")
    assert "rmsnorm-mean-not-square" in r.bug_ids(), r.text("en")


def _notebook(path, cells):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    count = 0
    for kind, text in cells:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(text))
            continue
        count += 1
        c = nbformat.v4.new_code_cell(text, execution_count=count)
        c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="torch.Size([2, 4, 3])\n")]
        nb.cells.append(c)
    nbformat.write(nb, str(path))
    return path


def _lesson(source):
    parts = source.split("\n\n\nclass ")
    cells = [("code", "%matplotlib inline\n!pip install torch\n" + parts[0]), ("md", "## 多头注意力")]
    for p in parts[1:]:
        body, _, rest = ("class " + p).partition('\n\nif __name__ == "__main__":\n')
        cells.append(("code", body))
        if rest:
            cells.append(("md", "训练"))
            cells.append(("code", textwrap.dedent(rest)))
    return cells


def test_a_notebook_is_read_as_its_cells_and_a_bug_is_placed_by_cell_and_line(tmp_path):
    ok = _notebook(tmp_path / "lesson.ipynb", _lesson(SDPA_WITH_SCALE))
    r = check_file(ok, lang="en", timeout_s=60)
    assert r.exit_code == 0, r.text("en")
    assert "lesson.ipynb: 5 code cells read" in r.notebook
    bug = _notebook(tmp_path / "lesson_bug.ipynb", _lesson(SDPA_WITH_SCALE.replace(
        "torch.softmax(scores, dim=-1) @ v", "torch.softmax(scores, dim=-2) @ v")))
    r = check_file(bug, lang="en", timeout_s=60)
    f = next(f for f in r.findings if f.id == "softmax-dim")
    assert r.exit_code == 1 and f.where == "ScaledDotProductAttention.forward (cell 2, line 2)", r.text("en")
    d = json.loads(r.to_json())
    assert d["notebook"].startswith("lesson_bug.ipynb") and r.path.endswith("lesson_bug.ipynb")


def test_check_inside_a_notebook_replays_the_cells_in_a_child(tmp_path, monkeypatch, capsys):
    import builtins

    from scratchformer.check import check
    cells = [src for kind, src in _lesson(SDPA_WITH_SCALE) if kind == "code"]
    history = [""] + cells + ["from scratchformer.check import check\ncheck(MultiHeadAttention)"]

    class Shell:
        user_ns = {"In": history}
    monkeypatch.setattr(builtins, "get_ipython", lambda: Shell(), raising=False)
    report = check(type("MultiHeadAttention", (), {}), lang="en", quiet=True)
    assert [c.name for c in report.components] == ["MultiHeadAttention"] and report.exit_code == 0, report.text("en")
    assert report.path == "this notebook"


FUNCTIONAL = HEAD + textwrap.dedent('''
    cfg = dict(d_model=16, d_ff=32, n_heads=2)


    def init(g):
        def dense(i, o):
            return {"w": torch.randn(i, o, generator=g) / i ** 0.5, "b": torch.zeros(o)}
        return {"attn": {k: dense(16, 16) for k in "qkvo"}, "ln1": {"scale": torch.ones(16), "bias": torch.zeros(16)},
                "ffn": {"fc1": dense(16, 32), "fc2": dense(32, 16)}, "ln2": {"scale": torch.ones(16), "bias": torch.zeros(16)}}


    def dense(p, x):
        return x @ p["w"] + p["b"]


    def layer_norm(params, x, eps=1e-5):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return params["scale"] * (x - mean) / torch.sqrt(var + eps) + params["bias"]


    def mha(params, x, n_heads, mask):
        B, T, D = x.shape
        split = lambda t: t.reshape(B, T, n_heads, D // n_heads).transpose(1, 2)
        q, k, v = (split(dense(params[n], x)) for n in "qkv")
        s = q @ k.transpose(-1, -2) / math.sqrt(D // n_heads)
        s = torch.where(mask, s, torch.full_like(s, -1e9))
        return dense(params["o"], (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, T, D))


    def ffn(params, x):
        return dense(params["fc2"], torch.relu(dense(params["fc1"], x)))


    def encoder_layer(params, x, mask):
        x = layer_norm(params["ln1"], x + mha(params["attn"], x, cfg["n_heads"], mask))
        return layer_norm(params["ln2"], x + ffn(params["ffn"], x))


    params = init(torch.Generator().manual_seed(0))
    tokens = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    mask = (tokens != 0)[:, None, None, :]
    out = encoder_layer(params, torch.randn(2, 4, 16), mask)
''')


def test_functional_code_is_checked_from_its_own_calls(tmp_path):
    r = _check(tmp_path, FUNCTIONAL)
    assert r.exit_code == 0 and {c.name for c in r.components} >= {"layer_norm", "mha", "ffn", "encoder_layer"}, r.text("en")
    bad = FUNCTIONAL.replace("var = ((x - mean) ** 2).mean(-1, keepdim=True)",
                             "var = x.var(-1, keepdim=True)")
    r = _check(tmp_path, bad, name="b.py")
    assert "unbiased-std" in r.bug_ids(), r.text("en")
    r = _check(tmp_path, FUNCTIONAL.replace("return layer_norm(params[\"ln2\"], x + ffn(", "return layer_norm(params[\"ln2\"], 0 * x + ffn("),
               name="c.py")
    assert r.bug_ids() == ["no-residual"], r.text("en")


def test_the_loss_their_training_step_computes_is_checked(tmp_path):
    src = SDPA_WITH_SCALE.split('if __name__ == "__main__":')[0] + textwrap.dedent('''
        class LM(nn.Module):
            def __init__(self, vocab, hid, heads):
                super().__init__()
                self.emb = nn.Embedding(vocab, hid)
                self.mha = MultiHeadAttention(hid, heads)
                self.out = nn.Linear(hid, vocab)

            def forward(self, ids):
                T = ids.shape[1]
                future = torch.ones(T, T, dtype=torch.bool).triu(1)[None, None]  # True = hidden
                return self.out(self.mha(self.emb(ids), future))


        vocab = {"<pad>": 0, "a": 1, "b": 2, "c": 3, "d": 4}
        model = LM(5, 16, 2)
        batch = torch.tensor([[1, 2, 3, 4, 1], [2, 3, 1, 0, 0]])
        for step in range(3):
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, 5), batch[:, 1:].reshape(-1), ignore_index=0)
            loss.backward()
    ''')
    r = _check(tmp_path, src)
    assert r.exit_code != 1 and r.bug_ids() == [], r.text("en")  # (an LM without blocks: its model line is skipped)
    r = _check(tmp_path, src.replace(", ignore_index=0)", ")"), name="pad.py")
    assert "loss-on-padding" in r.bug_ids(), r.text("en")
    r = _check(tmp_path, src.replace("batch[:, 1:].reshape(-1)", "batch[:, :-1].reshape(-1)"), name="shift.py")
    assert "target-not-shifted" in r.bug_ids(), r.text("en")


def test_no_correct_file_of_any_first_contact_round_is_told_it_has_a_bug():
    """The worst outcome a checker has: every correct file of the frozen rounds (written apart from the engine)
    exits 0 or 2, never 1."""
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    root = Path(__file__).parent / "first_contact"
    files = [d / name for d in sorted(root.iterdir()) if (d / "manifest.json").exists()
             for name, meta in json.loads((d / "manifest.json").read_text(encoding="utf-8"))["files"].items()
             if not meta["expected"]]
    assert len(files) >= 16
    with ThreadPoolExecutor(2) as ex:
        reports = list(ex.map(lambda p: check_file(p, lang="en", timeout_s=90), files))
    accused = [(p.name, r.bug_ids()) for p, r in zip(files, reports) if r.exit_code == 1]
    assert accused == [], accused


BERTISH = HEAD + textwrap.dedent('''
    class SelfAttention(nn.Module):
        def __init__(self, hidden, heads):
            super().__init__()
            self.h = heads
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

        def forward(self, hidden_states, attention_mask):
            B, T, C = hidden_states.shape
            split = lambda t: t.view(B, T, self.h, C // self.h).transpose(1, 2)
            q, k, v = split(self.query(hidden_states)), split(self.key(hidden_states)), split(self.value(hidden_states))
            scores = q @ k.transpose(-1, -2) / math.sqrt(C // self.h) + attention_mask
            return (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)


    class SelfOutput(nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.dense = nn.Linear(hidden, hidden)
            self.LayerNorm = nn.LayerNorm(hidden)

        def forward(self, hidden_states, input_tensor):
            return self.LayerNorm(self.dense(hidden_states) + input_tensor)


    class Layer(nn.Module):
        def __init__(self, hidden, heads):
            super().__init__()
            self.attention = SelfAttention(hidden, heads)
            self.output = SelfOutput(hidden)

        def forward(self, x, attention_mask):
            return self.output(self.attention(x, attention_mask), x)


    class Encoder(nn.Module):
        def __init__(self, vocab, hidden, heads):
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.layer = Layer(hidden, heads)

        def forward(self, input_ids, attention_mask):
            ext = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
            return self.layer(self.emb(input_ids), ext)


    if __name__ == "__main__":
        ids = torch.tensor([[5, 6, 7, 8], [9, 4, 0, 0]])
        print(Encoder(30, 16, 2)(ids, (ids != 0).long()).shape)
''')


def test_an_add_and_norm_module_and_an_extended_mask_are_read_from_the_run(tmp_path):
    r = _check(tmp_path, BERTISH)
    comps = {c.kind: c.status for c in r.components}
    assert r.bug_ids() == [] and comps["add_norm"] == "ok" and comps["attention"] == "ok", r.text("en")
    assert "additive" in r.mask_convention and "SelfAttention" in r.mask_convention
    r = _check(tmp_path, BERTISH.replace("self.dense(hidden_states) + input_tensor", "self.dense(hidden_states)"),
               name="nores.py")
    assert "no-residual" in r.bug_ids(), r.text("en")
    r = _check(tmp_path, BERTISH.replace("(1.0 - attention_mask[:, None, None, :].float())",
                                         "attention_mask[:, None, None, :].float()"), name="inv.py")
    assert "mask-inverted" in r.bug_ids(), r.text("en")
