"""The learner's mask convention: what their masks look like, and where the checker read it from.

The tutorials use three: **keep** (1 / True = may attend, `masked_fill(mask == 0, -1e9)`: the PyTorch
tutorials, The Annotated Transformer, ours), **pad** (1 = padding, `logits += mask * -1e9`: the Keras
tutorial and its ports) and **lens** (valid lengths per row: d2l). Read in this order: `--mask-convention`,
the learner's own mask-making function (called on tokens with padding), a mask line in their file
(`(x != pad_idx)`, `(seq == 0)`), the style of their attention code, and last the tutorials' default (keep).
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, replace

import torch

KINDS = ("keep", "pad", "lens", "add")
_WORDS = {"keep": ("1/True = 可以关注", "1/True = may attend"), "pad": ("1/True = padding", "1/True = padding"),
          "add": ("加性掩码（0 = 可以关注，−∞/−1e9 = 屏蔽）", "additive (0 = may attend, −∞/−1e9 = hidden)"),
          "lens": ("有效长度 valid_lens", "valid lengths")}


@dataclass(frozen=True)
class MaskForm:
    kind: str = "keep"
    dtype: torch.dtype = torch.long
    ndim: int | None = None     # 4: (B, 1, 1, S); 3: (B, 1, S); None: whichever the learner's code accepts
    source: str = "the tutorials' default"
    source_zh: str = "教程的默认约定"

    def keys(self, keep: torch.Tensor, ndim: int | None = None) -> torch.Tensor:
        """The learner's padding mask for `keep` (B, S) bool, True = a real token."""
        if self.kind == "lens":
            return keep.sum(-1)  # (B,): d2l's valid_lens (the padding is at the end)
        m = self._cast(keep)
        nd = ndim or self.ndim or 4
        return m[:, None, None, :] if nd == 4 else m[:, None, :] if nd == 3 else m  # (B,1,1,S) | (B,1,S)

    def square(self, keep: torch.Tensor, ndim: int | None = None) -> torch.Tensor:
        """The learner's (causal) mask for `keep` (B|1, T, T) bool."""
        if self.kind == "lens":
            return keep.sum(-1)  # (B, T): d2l's dec_valid_lens, one length per query
        m = self._cast(keep)
        nd = ndim or self.ndim or 4
        return m[:, None] if nd == 4 else m  # (B, 1, T, T) | (B, T, T)

    def _cast(self, keep):
        if self.kind == "add":  # added to the scores: 0 where it may attend, −1e9 where hidden
            return torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, -1e9)
        m = ~keep if self.kind == "pad" else keep
        return m if self.dtype == torch.bool else m.to(self.dtype)

    def with_ndim(self, ndim):
        return replace(self, ndim=ndim)

    def describe(self, lang: str) -> str:
        zh, en = _WORDS[self.kind]
        dt = {torch.bool: "bool", torch.long: "int", torch.float64: "float"}.get(self.dtype, str(self.dtype))
        if lang == "zh":
            return f"{zh}（{dt}），来自{self.source_zh} / {en}, from {self.source}"
        return f"{en} ({dt}), from {self.source} / {zh}，来自{self.source_zh}"


def _dtype_of(t: torch.Tensor):
    if t.dtype == torch.bool:
        return torch.bool
    return torch.float64 if t.is_floating_point() else torch.long


def from_function(fn) -> MaskForm | None:
    """Call the learner's mask function on tokens whose second row ends in padding (id 0)."""
    tokens = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])
    try:
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    args = [tokens]
    for p in params[1:]:
        if p.default is not p.empty:
            break
        if "pad" in p.name.lower():
            args.append(0)
        elif re.search(r"seq|tok|ids|inp|^[qk]$|_[qk]$", p.name.lower()):
            args.append(tokens)  # get_attn_pad_mask(seq_q, seq_k): the same tokens as queries and keys
        else:
            return None
    try:
        out = fn(*args)
    except Exception:
        return None
    if not isinstance(out, torch.Tensor) or out.dim() < 2 or out.shape[0] != 2 or out.shape[-1] != 5:
        return None
    flat = out.reshape(2, -1)
    at_pad, at_token = bool(flat[1, -1]), bool(flat[0, 0])
    if at_pad == at_token:
        return None
    kind = "pad" if at_pad else "keep"
    name = getattr(fn, "__name__", "?")
    return MaskForm(kind, _dtype_of(out), out.dim() if out.dim() in (3, 4) else None,
                    f"your function {name}()", f"你的函数 {name}()")


_LINE = re.compile(r"\(\s*([\w.\[\]]+)\s*(!=|==)\s*(self\.)?(\w*pad\w*|0)\s*\)")


def from_text(source: str) -> MaskForm | None:
    """A mask-making line in the file: `(x != pad_idx)` keeps tokens; `(seq == 0)` marks padding."""
    for m in _LINE.finditer(source):
        lhs = m.group(1).lower()
        if any(w in lhs for w in ("mask", "score", "attn", "logit", "weight")):
            continue
        line = source[source.rfind("\n", 0, m.start()) + 1: source.find("\n", m.end())]
        kind = "keep" if m.group(2) == "!=" else "pad"
        dtype = torch.long if (".long()" in line or ".int()" in line) else \
            torch.float64 if ".float()" in line or "float32" in line else torch.bool
        return MaskForm(kind, dtype, None, f"your line `{line.strip()}`", f"你的代码 `{line.strip()}`")
    return None


def from_style(source: str) -> MaskForm | None:
    """How the attention code applies the mask: `mask == 0` (keep) or `mask * -1e9` (pad)."""
    s = re.sub(r"[ \t]+", "", source).replace("\n", ";")  # lines kept apart: `mask\nnext` is not `masknext`
    if "valid_lens" in s:
        return MaskForm("lens", torch.long, None, "your attention's valid_lens (d2l)", "你的注意力的 valid_lens（d2l）")
    m = re.search(r"\+=?\(?(?:self\.)?(?:attn_|attention_)?mask\b(?!\*)", s)
    if m and not re.search(r"mask==0|mask\.eq\(0\)|~mask|logical_not\(mask|masked_fill\(mask", s):
        return MaskForm("add", torch.float64, None, "your attention's `scores + mask`", "你的注意力里的 `scores + mask`")
    if re.search(r"mask==0|mask\.eq\(0\)|~mask|logical_not\(mask|mask==False", s):
        return MaskForm("keep", torch.long, None, "your attention's `mask == 0`", "你的注意力里的 `mask == 0`")
    if re.search(r"masked_fill_?\((self\.)?\w*mask,", s):  # masked_fill(attn_mask, -1e9): True = hidden
        return MaskForm("pad", torch.bool, None, "your attention's `masked_fill(mask, ...)`",
                        "你的注意力里的 `masked_fill(mask, ...)`")
    if re.search(r"mask\*\(?-1e|mask==1|\*mask", s):
        return MaskForm("pad", torch.float64, None, "your attention's `mask * -1e9`", "你的注意力里的 `mask * -1e9`")
    return None


def flag(kind: str) -> MaskForm:
    if kind not in KINDS:
        raise ValueError(f"--mask-convention {kind!r}: use one of {', '.join(KINDS)}")
    dtype = {"keep": torch.long, "pad": torch.float64, "lens": torch.long, "add": torch.float64}[kind]
    return MaskForm(kind, dtype, None, "--mask-convention", "--mask-convention")
