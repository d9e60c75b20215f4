"""What a check found: one `Component` line per component, then the `Finding`s; text (zh/en) and JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from .catalogue import CATALOGUE


@dataclass
class Finding:
    id: str
    severity: str          # "bug" | "note" | "warning"
    component: str         # the component kind
    where: str             # the learner's class.method (or function)
    zh: str
    en: str
    link: str
    detail: str = ""       # what exactly was seen (a variant, a position, a value)
    line: int | None = None  # the line of `where` in the learner's file (a notebook: see Report.place_cells)


@dataclass
class Component:
    kind: str
    name: str              # the learner's class or function name
    status: str            # "ok" | "differs" | "skipped" (cannot be checked) | "todo" (raises
                           # NotImplementedError) | "error" (the learner's code raised)
    ids: list[str] = field(default_factory=list)
    detail: str = ""       # the weight mapping, or why it was skipped


# the checker's own words in the detail lines, for --lang zh (the learner's names and numbers stay as they are)
ZH_WORDS = [
    ("matches the reference with this mistake:", "与带这个错误的参考实现一致："),
    ("(your own sublayers)", "（你自己的子层）"), ("(per-head modules, concatenated)", "（每个头一个模块，按头拼接）"),
    ("(by shape; SwiGLU)", "（按形状；SwiGLU）"), ("(by names; SwiGLU)", "（按名字；SwiGLU）"),
    ("(by shape)", "（按形状）"), ("(by names)", "（按名字）"), ("(by registration order)", "（按注册顺序）"),
    ("(by order)", "（按顺序）"), ("3 rows blocks", "按行分成 3 块"), (" K/V heads", " 个 K/V 头"),
    ("rotary positions from your", "旋转位置编码来自你的"), ("rotary positions from", "旋转位置编码来自"),
    ("; causal", "；因果"), ("heads' ", "个头的 "), ("in your file", "在你的文件里"), ("from --size", "（--size）"),
    ("from # check:", "（# check: 注释）"), (" in ", " 来自 "), ("no final norm", "没有最后的归一化"),
    ("the loss was not judged", "损失没有评判"), ("position i attends to positions after i", "位置 i 看到了 i 之后的位置"),
    ("padding invariance: a padded row equals the same row unpadded", "padding 不变性：加了 padding 的行等于不加的同一行"),
    ("could not be checked", "无法检查"), ("the probe failed:", "探测失败："),
    ("give the sizes", "请给出尺寸"), ("or --map", "或 --map"), ("write it with a default", "请给它写一个默认值"),
    ("no value known for the parameter", "不知道这个参数该取什么值"),
    ("is not one the checker knows; name it like the tutorials", "检查器不认识；请按教程的写法命名"),
    ("expected one attention, one feed-forward and two norms inside, found", "应有一个注意力、一个前馈和两个归一化，找到"),
    ("no mask shape worked", "没有一种掩码形状能用"), ("is never applied", "从未被调用"),
    ("the final norm runs twice", "最后的归一化执行了两次"),
    ("Post-LN layers already end in a norm; the stack adds another", "Post-LN 的层已经以归一化结尾，堆叠又加了一次"),
    ("the residual adds norm(x), not x", "残差加的是 norm(x) 而不是 x"), ("no x + ... around", "缺少 x + ...："),
    ("the first difference at", "第一个不同的位置："), ("first difference at", "第一个不同的位置："),
    ("yours", "你的"), ("reference", "参考"), ("largest difference", "最大差"),
]


def zh_detail(text: str) -> str:
    for en, zh in ZH_WORDS:
        text = text.replace(en, zh)
    return text


def finding(id: str, component: str, where: str, detail: str = "") -> Finding:
    e = CATALOGUE[id]
    return Finding(id, e.severity, component, where, e.zh, e.en, e.link, detail)


_WORDS = {
    "zh": {"ok": "一致", "differs": "不同", "skipped": "跳过", "todo": "未完成", "error": "出错", "bug": "错误", "note": "说明", "warning": "警告",
           "where": "位置", "see": "参见", "mask": "掩码约定", "sizes": "尺寸", "none": "没有找到可以检查的组件",
           "summary_ok": "检查过的组件都与参考实现一致。", "summary_bug": "发现错误。",
           "summary_todo": "还没有完成：文件里还有 TODO。",
           "summary_skipped": "{n} 个组件无法检查（见上面的原因）：没有发现错误，但不能说全部正确。",
           "summary_counts": "{n} 个已检查，{m} 个无法检查。", "map": "检查", "watched": "运行", "notebook": "笔记本"},
    "en": {"ok": "ok", "differs": "differs", "skipped": "skipped", "todo": "todo", "error": "error", "bug": "bug", "note": "note", "warning": "warning",
           "where": "where", "see": "see", "mask": "mask convention", "sizes": "sizes", "none": "no component found to check",
           "summary_ok": "every component checked matches the reference.", "summary_bug": "bugs found.",
           "summary_todo": "not finished: a TODO is still there.",
           "summary_skipped": "{n} component(s) could not be checked (see why above): no bug found, "
                              "but the file is not known to be right.",
           "summary_counts": "{n} checked, {m} could not be checked.", "map": "checked", "watched": "your run",
           "notebook": "notebook"},
}


@dataclass
class Report:
    path: str
    components: list[Component] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    mask_convention: str = ""
    sizes: str = ""        # the learner's sizes used and where each came from
    error: str | None = None
    lang: str = "zh"
    seconds: float = 0.0
    train: dict | None = None  # --train: {"line": ..., "verdict", "step", "learner", "reference", "png"}
    watched: str = ""      # what of the learner's own program ran under the watch, and where it was stopped
    notebook: str = ""     # a notebook: the code cells read, and those left out

    @property
    def exit_code(self) -> int:
        """0 only when every component found was checked and matches; 1 a bug (or a TODO, or their
        code raised); 2 when nothing could be checked, or nothing was wrong but something was skipped:
        a skipped component never adds up to "all match"."""
        if self.error is not None or not self.components or all(c.status == "skipped" for c in self.components):
            return 2
        if any(c.status in ("todo", "error") for c in self.components):
            return 1  # a skeleton's TODO is still there, or the learner's code raised: not passing
        if any(f.severity == "bug" for f in self.findings):
            return 1
        return 2 if any(c.status == "skipped" for c in self.components) else 0

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]

    def bug_ids(self) -> list[str]:
        return [f.id for f in self.findings if f.severity == "bug"]

    def text(self, lang: str | None = None) -> str:
        lang = lang or self.lang
        langs = ["zh", "en"]  # the explanations: Chinese first in both (our readers followed Chinese tutorials)
        w = _WORDS[lang]
        if self.error is not None:
            return f"{self.path}: {self.error}"
        if not self.components:
            return f"{self.path}: {w['none']} / {_WORDS[langs[1]]['none']}"
        lines = []
        width = max(len(c.kind) for c in self.components)
        nw = max(len(c.name) for c in self.components)
        for c in self.components:
            ids = f"  {' '.join(c.ids)}" if c.ids else ""
            detail = zh_detail(c.detail) if lang == "zh" else c.detail
            extra = f"  ({detail})" if c.status in ("skipped", "todo", "error") and c.detail else ""
            lines.append(f"{c.kind:<{width}}  {c.name:<{nw}}  {w[c.status]}{ids}{extra}")
        if self.mask_convention:
            lines.append(f"{w['mask']}: {self.mask_convention}")
        if self.sizes:
            lines.append(f"{w['sizes']}: {zh_detail(self.sizes) if lang == 'zh' else self.sizes}")
        if self.notebook:
            lines.append(f"{w['notebook']}: {self.notebook}")
        if self.watched:
            lines.append(f"{w['watched']}: {self.watched}")
        for c in self.components:
            if c.status not in ("skipped", "todo", "error") and c.detail:
                lines.append(f"{w['map']} {c.name}: {zh_detail(c.detail) if lang == 'zh' else c.detail}")
        for f in self.findings:
            lines.append("")
            lines.append(f"[{w[f.severity]}] {f.id}  {w['where']}: {f.where}")
            for lg in langs:
                lines.append(f"  {getattr(f, lg)}")
            if f.detail:
                lines.append(f"  {zh_detail(f.detail) if lang == 'zh' else f.detail}")
            lines.append(f"  {w['see']}: {f.link}")
        if self.train:
            lines.append("")
            lines.append(self.train["line"])
        lines.append("")
        skipped = sum(c.status == "skipped" for c in self.components)
        lines.append(w["summary_counts"].format(n=len(self.components) - skipped, m=skipped))
        if any(c.status == "todo" for c in self.components):
            lines.append(w["summary_todo"])
        elif self.exit_code == 1:
            lines.append(w["summary_bug"])
        elif skipped:
            lines.append(w["summary_skipped"].format(n=skipped))
        else:
            lines.append(w["summary_ok"])
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"path": self.path, "exit_code": self.exit_code, "error": self.error,
                "mask_convention": self.mask_convention, "sizes": self.sizes, "seconds": round(self.seconds, 2), "train": self.train,
                "watched": self.watched, "notebook": self.notebook,
                "components": [asdict(c) for c in self.components],
                "findings": [asdict(f) for f in self.findings]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)

    @classmethod
    def from_dict(cls, d: dict, lang: str = "zh") -> "Report":
        r = cls(path=d["path"], mask_convention=d.get("mask_convention", ""), error=d.get("error"), lang=lang,
                sizes=d.get("sizes", ""),
                seconds=d.get("seconds", 0.0), train=d.get("train"), watched=d.get("watched", ""),
                notebook=d.get("notebook", ""))
        r.components = [Component(**c) for c in d.get("components", [])]
        r.findings = [Finding(**f) for f in d.get("findings", [])]
        return r

    def place_cells(self, cells, converted) -> None:
        """A notebook's report: each finding's place as "cell 7, line 3", the same in the error's lines."""
        import re as _re
        self.notebook = cells.describe()
        for f in self.findings:
            at = cells.where(f.line)
            if at and at not in f.where:
                f.where = f"{f.where} ({at})"
        if self.error:
            name = _re.escape(getattr(converted, "name", str(converted)))

            def cell(m):
                at = cells.where(int(m.group(1)))
                return at if at else m.group(0)
            self.error = _re.sub(rf'(?:File "{name}", )?line (\d+)', cell, self.error)
            self.error = _re.sub(rf'{name}:(\d+)', cell, self.error)
        for c in self.components:
            if c.detail:
                c.detail = _re.sub(r"\(at line (\d+):", lambda m: f"({cells.where(int(m.group(1))) or m.group(0)}:", c.detail)
