"""Our reference for each component kind, with every catalogued bug as a switch.

The correct formula comes first in each function; a switch (`bugs`: {id: sub-variant}) turns on one
classic mistake exactly as a learner writes it. The checker runs the learner's module and these
functions on the same weights and inputs: the variant whose output equals the learner's names the bug.
Plain torch, written for float64 (the comparisons run there, so equal means equal to ~1e-12).

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + mask) V        注意力：缩放点积，再按 key 做 softmax
    FFN(x) = W₂ act(W₁ x + b₁) + b₂                             前馈：两层线性，中间一个激活
    LayerNorm(x) = γ (x − mean) / √(var + eps) + β, var biased  层归一化：有偏方差，eps 在根号里
    PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)    位置编码：交错的 sin / cos
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Bugs = dict  # {catalogue id: sub-variant name}

# the sub-variants each attention bug comes in (what a learner actually writes)
ATTENTION_VARIANTS = {
    "missing-scale": ["none"],
    "wrong-scale": ["sqrt-d_model", "d_k", "times √d_k", "√(keys' length)", "d_k^(1/4)"],
    "mask-fill-zero": ["zero"],
    "mask-inverted": ["inverted"],
    "softmax-dim": ["dim=-2", "dim=1"],
    "heads-not-transposed": ["view(B,h,T,d_k)", "view(B,h,T,d_k) on Q only", "fused reshape(3,B,h,T,d_k)"],
    "heads-merge-order": ["view without transpose", "permute(0,2,3,1)"],
}
SDPA_BUGS = ("missing-scale", "wrong-scale", "mask-fill-zero", "mask-inverted", "softmax-dim")


def scaled_dot_product(q, k, v, keep=None, bugs: Bugs | None = None, d_model: int | None = None,
                       fill: float = -1e9):
    """softmax(q kᵀ / √d_k, masked) v; `keep` is a bool tensor broadcastable to the scores (True = may attend).

    Shape: q (..., Tq, d_k), k and v (..., Tk, d_k); returns (out (..., Tq, d_k), weights (..., Tq, Tk)).
    """
    bugs = bugs or {}
    d_k = q.size(-1)
    scale = math.sqrt(d_k)
    if "missing-scale" in bugs:
        scale = 1.0
    elif bugs.get("wrong-scale") == "sqrt-d_model":
        scale = math.sqrt(d_model or d_k)
    elif bugs.get("wrong-scale") == "d_k":
        scale = float(d_k)
    elif bugs.get("wrong-scale") == "times √d_k":  # `head_dim ** 0.5` where `** -0.5` was meant
        scale = 1.0 / math.sqrt(d_k)
    elif bugs.get("wrong-scale") == "√(keys' length)":  # `math.sqrt(keys.shape[1])`: the length, not d_k
        scale = math.sqrt(k.size(-2))
    elif bugs.get("wrong-scale") == "d_k^(1/4)":  # q and k each meant to take d_k^(1/4): one of them did
        scale = d_k ** 0.25
    scores = q @ k.transpose(-2, -1) / scale  # (..., Tq, Tk)
    if keep is not None:
        hide = keep if "mask-inverted" in bugs else ~keep
        if "mask-fill-zero" in bugs:
            scores = scores.masked_fill(hide, 0.0)
        elif fill == "add":  # the Keras tutorial's `logits += mask * -1e9`
            scores = scores + hide.to(scores.dtype) * -1e9
        else:
            scores = scores.masked_fill(hide, fill)
    dim = -1
    if bugs.get("softmax-dim") == "dim=-2":
        dim = -2
    elif bugs.get("softmax-dim") == "dim=1" and scores.dim() == 4:
        dim = 1
    weights = torch.softmax(scores, dim=dim)
    return weights @ v, weights


def linear(x, w, b):
    return x @ w.T + (b if b is not None else 0.0)


def split_heads(x, h: int, bugs: Bugs):
    B, T, d = x.shape
    if bugs.get("heads-not-transposed") == SEQ_FIRST_SPLIT:  # (T, B, d) viewed as (B·h, T, d_k)
        return x.transpose(0, 1).reshape(B, h, T, d // h)
    if "heads-not-transposed" in bugs:
        return x.reshape(B, h, T, d // h)  # the bug: positions and features mixed
    return x.reshape(B, T, h, d // h).transpose(1, 2)  # (B, h, T, d_k)


# the sequence-first layout's own head mistakes (torch's API, (T, B, d)): the output (T, B, d) read back
# batch first by the probe, so each is written as "what their (T, B, d) holds", transposed
SEQ_FIRST_SPLIT = "seq-first view(N·h, L, d_k) on Q only"
SEQ_FIRST_MERGE = ["seq-first reshape(L, N, E) without permute", "seq-first transpose(1, 2).reshape(L, N, E)"]


def merge_heads(x, bugs: Bugs):
    B, h, T, d_k = x.shape
    sub = bugs.get("heads-merge-order")
    if sub == SEQ_FIRST_MERGE[0]:
        return x.reshape(T, B, h * d_k).transpose(0, 1)
    if sub == SEQ_FIRST_MERGE[1]:
        return x.transpose(1, 2).reshape(T, B, h * d_k).transpose(0, 1)
    if sub == "view without transpose":
        return x.reshape(B, T, h * d_k)
    if sub == "permute(0,2,3,1)":
        return x.permute(0, 2, 3, 1).reshape(B, T, h * d_k)
    return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, d_model)


ROPE_VARIANTS = {"rope-pairing": ["half table, interleaved pairs", "interleaved table, half pairs"]}
GQA_VARIANTS = {"gqa-repeat-wrong": ["repeat (tiled) instead of repeat_interleave"]}


def rope(x, pairing: str = "interleaved", offset: int = 0, theta: float = 10000.0, bugs: Bugs | None = None):
    """Rotary positions: each pair (x_a, x_b) of a head is turned by the angle p·θ^(−2i/d_k).

    x' = (x_a cos − x_b sin, x_a sin + x_b cos)          旋转位置编码：每一对维度按位置转一个角度
    `pairing` "interleaved": the pairs are (2i, 2i+1) (the complex `freqs_cis` form); "half": (i, i + d_k/2)
    (`rotate_half` with cat(freqs, freqs)). Both are right when used throughout; `rope-pairing` mixes them.
    Shape: x (B, h, T, d_k); positions offset .. offset+T−1.
    """
    bugs = bugs or {}
    T, dk = x.shape[-2], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, dk, 2, dtype=x.dtype) / dk)        # (d_k/2,)
    ang = torch.arange(offset, offset + T, dtype=x.dtype)[:, None] * inv      # (T, d_k/2)
    sub = bugs.get("rope-pairing")
    table = "half" if sub == "half table, interleaved pairs" else "interleaved" if sub else pairing
    pairs = "interleaved" if sub == "half table, interleaved pairs" else "half" if sub else pairing
    if table == "half":
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)  # (T, d_k)
    else:
        cos, sin = ang.cos().repeat_interleave(2, -1), ang.sin().repeat_interleave(2, -1)
    if pairs == "half":
        x1, x2 = x[..., : dk // 2], x[..., dk // 2:]
        rot = torch.cat([-x2, x1], -1)                                         # rotate_half
    else:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        rot = torch.stack([-x2, x1], -1).flatten(-2)                           # (-x_{2i+1}, x_{2i})
    return x * cos + rot * sin


def repeat_kv(x, n_rep: int, bugs: Bugs | None = None):
    """Grouped-query attention: K/V head j serves query heads j·n_rep .. (j+1)·n_rep − 1 (repeat_interleave).
    Shape: (B, h_kv, T, d_k) -> (B, h_kv·n_rep, T, d_k)."""
    if n_rep == 1:
        return x
    if "gqa-repeat-wrong" in (bugs or {}):
        return x.repeat(1, n_rep, 1, 1)  # the bug: query head i reads K/V head i mod h_kv
    return x.repeat_interleave(n_rep, dim=1)


def multi_head(xq, xk, xv, w: dict, h: int, keep=None, bugs: Bugs | None = None, fill: float = -1e9,
               rope_pairing: str | None = None, h_kv: int | None = None, rope_theta: float = 10000.0):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O, head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).

    `w` maps "q", "k", "v", "o" to (weight, bias or None): W_Q (d, d), W_K and W_V (h_kv·d_k, d) (h_kv = h
    unless grouped-query), W_O (d, d); `keep` (B|1, 1|Tq, Tk) or (B|1, 1, 1|Tq, Tk), True = may attend;
    `rope_pairing` turns q and k by their positions first (LLaMA style).
    """
    bugs = bugs or {}
    d_model = xq.size(-1)
    h_kv = h_kv or h
    sub = bugs.get("heads-not-transposed")
    kv_bugs = {b: s for b, s in bugs.items() if b != "heads-not-transposed"} if sub else bugs
    if sub == "fused reshape(3,B,h,T,d_k)":  # ViT's qkv(x).reshape(3, B, h, T, d_k): rows and heads mixed
        B, T, _ = xq.shape
        fused = torch.cat([linear(xq, *w["q"]), linear(xk, *w["k"]), linear(xv, *w["v"])], -1)  # (B, T, 3d)
        q, k, v = fused.reshape(3, B, h, T, d_model // h)
    else:
        q = split_heads(linear(xq, *w["q"]), h, bugs if sub != "fused reshape(3,B,h,T,d_k)" else kv_bugs)  # (B, h, Tq, d_k)
        q_only = sub in ("view(B,h,T,d_k) on Q only", SEQ_FIRST_SPLIT)
        k = split_heads(linear(xk, *w["k"]), h_kv, kv_bugs if q_only else bugs)
        v = split_heads(linear(xv, *w["v"]), h_kv, kv_bugs if q_only else bugs)
    if rope_pairing is not None:
        q, k = rope(q, rope_pairing, theta=rope_theta, bugs=bugs), rope(k, rope_pairing, theta=rope_theta, bugs=bugs)
    k, v = repeat_kv(k, h // h_kv, bugs), repeat_kv(v, h // h_kv, bugs)  # (B, h, Tk, d_k)
    if keep is not None and keep.dim() == 3:
        keep = keep.unsqueeze(1)  # (B, 1, Tq|1, Tk): the same mask for every head
    out, _ = scaled_dot_product(q, k, v, keep, {b: s for b, s in bugs.items() if b in SDPA_BUGS},
                                d_model=d_model, fill=fill)
    return linear(merge_heads(out, bugs), *w["o"])  # (B, Tq, d_model)


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
               "identity": lambda x: x}


def feed_forward(x, w1, b1, w2, b2, act: str = "relu", bugs: Bugs | None = None):
    """FFN(x) = W₂ act(W₁ x + b₁) + b₂; `ffn-no-activation` drops act."""
    bugs = bugs or {}
    f = ACTIVATIONS["identity" if "ffn-no-activation" in bugs else act]
    return linear(f(linear(x, w1, b1)), w2, b2)


LAYER_NORM_VARIANTS = {"unbiased-std": ["x.std() + eps", "sqrt(unbiased var + eps)"],
                       "eps-outside-sqrt": ["biased std + eps"],
                       "layernorm-wrong-axis": ["over the positions (dim=-2)", "over positions and features (-2, -1)",
                                                "over the batch (dim=0)"]}
_AXES = {"over the positions (dim=-2)": (-2,), "over positions and features (-2, -1)": (-2, -1),
         "over the batch (dim=0)": (0,)}


def layer_norm(x, gamma, beta, eps: float, bugs: Bugs | None = None):
    """γ (x − mean) / √(var + eps) + β with the biased variance over the features (the last axis), as
    the paper and nn.LayerNorm compute it.                       层归一化：对最后一维，有偏方差，eps 在根号里

    The textbook `(x − mean) / (x.std() + eps)` differs twice: x.std() divides by d−1 (`unbiased-std`),
    and eps sits outside the root (`eps-outside-sqrt`, which matters where the variance is small).
    """
    bugs = bugs or {}
    axes = _AXES.get(bugs.get("layernorm-wrong-axis"), (-1,))
    mean = x.mean(axes, keepdim=True)
    sub = bugs.get("unbiased-std") or bugs.get("eps-outside-sqrt")
    if sub == "x.std() + eps":
        y = (x - mean) / (x.std(axes, keepdim=True) + eps)
    elif sub == "biased std + eps":
        y = (x - mean) / (x.std(axes, keepdim=True, unbiased=False) + eps)
    elif sub == "sqrt(unbiased var + eps)":
        y = (x - mean) / torch.sqrt(x.var(axes, keepdim=True) + eps)
    else:
        y = (x - mean) / torch.sqrt(x.var(axes, keepdim=True, unbiased=False) + eps)
    g = gamma if gamma is not None else 1.0
    b = beta if beta is not None else 0.0
    return g * y + b


RMS_NORM_VARIANTS = {"rmsnorm-eps-outside": ["sqrt(mean x²) + eps"],
                     "rmsnorm-mean-not-square": ["(mean x)² for mean x²", "sum x² (no mean)", "mean |x| for √mean x²",
                                                 "mean x for mean x²"]}


def rms_norm(x, weight, eps: float, bugs: Bugs | None = None):
    """RMSNorm(x) = x / √(mean(x²) + eps) · w, over the features; no centring, no bias.   均方根归一化"""
    bugs = bugs or {}
    sub = bugs.get("rmsnorm-mean-not-square")
    if sub == "(mean x)² for mean x²":
        ms = x.mean(-1, keepdim=True) ** 2
    elif sub == "sum x² (no mean)":
        ms = (x * x).sum(-1, keepdim=True)
    elif sub == "mean x for mean x²":
        ms = x.mean(-1, keepdim=True)
    else:
        ms = (x * x).mean(-1, keepdim=True)
    if sub == "mean |x| for √mean x²":
        y = x / (x.abs().mean(-1, keepdim=True) + eps) if "rmsnorm-eps-outside" in bugs else \
            x / torch.sqrt(x.abs().mean(-1, keepdim=True) ** 2 + eps)
    elif "rmsnorm-eps-outside" in bugs:
        y = x / (torch.sqrt(ms) + eps)
    else:
        y = x / torch.sqrt(ms + eps)
    return y * (weight if weight is not None else 1.0)


SWIGLU_VARIANTS = {"ffn-no-activation": ["no silu (w1 x · w3 x)"],
                   "swiglu-wrong-gate": ["silu of the product", "sigmoid gate (not silu)", "sum instead of product",
                                         "silu on both", "silu on the up projection"]}


def swiglu(x, w1, w3, w2, bugs: Bugs | None = None, b1=None, b3=None, b2=None):
    """SwiGLU FFN(x) = W₂ (silu(W₁ x) ⊙ W₃ x): W₁ the gate, W₃ the up projection.   门控前馈：silu 只作用在门上"""
    sub = (bugs or {}).get("swiglu-wrong-gate") or (bugs or {}).get("ffn-no-activation")
    a, b = linear(x, w1, b1), linear(x, w3, b3)
    if sub == "silu on the up projection":  # the gate's names kept, silu moved to the other one
        a, b = b, a
        sub = None
    if sub == "no silu (w1 x · w3 x)":
        h = a * b
    elif sub == "silu of the product":
        h = F.silu(a * b)
    elif sub == "sigmoid gate (not silu)":
        h = torch.sigmoid(a) * b
    elif sub == "sum instead of product":
        h = F.silu(a) + b
    elif sub == "silu on both":
        h = F.silu(a) * F.silu(b)
    else:
        h = F.silu(a) * b
    return linear(h, w2, b2)


PE_VARIANTS = ["sin-cos-halves", "sin/cos swapped", "exponent j/d (not 2i/d)", "exponent 2i (no /d)",
               "10000^(i/d) on both halves"]


def positional_table(max_len: int, d: int, variant: str | None = None, dtype=torch.float64):
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)); (max_len, d).

    `variant` is one of PE_VARIANTS: "sin-cos-halves" is a layout choice (a note), the others are wrong.
    """
    p = torch.arange(max_len, dtype=dtype)[:, None]              # (L, 1)
    two_i = torch.arange(0, d, 2, dtype=dtype)[None, :]           # (1, d/2): the even dimensions 2i
    if variant == "exponent j/d (not 2i/d)":
        angle = p / torch.pow(10000.0, (two_i / 2) / d)
    elif variant == "exponent 2i (no /d)":
        angle = p / torch.pow(10000.0, two_i)
    else:
        angle = p / torch.pow(10000.0, two_i / d)                 # (L, d/2)
    pe = torch.zeros(max_len, d, dtype=dtype)
    if variant == "sin-cos-halves":
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)
    if variant == "10000^(i/d) on both halves":
        j = torch.arange(d, dtype=dtype)[None, :]
        a = p / torch.pow(10000.0, j / d)
        pe = a.clone()
        pe[:, 0::2] = torch.sin(a[:, 0::2])
        pe[:, 1::2] = torch.cos(a[:, 1::2])
        return pe
    s, c = torch.sin(angle), torch.cos(angle)
    if variant == "sin/cos swapped":
        s, c = c, s
    pe[:, 0::2] = s
    pe[:, 1::2] = c
    return pe


def causal_keep(T: int):
    """(T, T) bool, True = may attend: position t sees 0..t (the lower triangle with its diagonal)."""
    return torch.ones(T, T, dtype=torch.bool).tril()
