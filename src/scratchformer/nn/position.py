"""Position information: absolute (sinusoidal, learned) added to embeddings, relative (RoPE,
ALiBi) applied inside attention."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import UserError


def sinusoidal_table(length: int, dim: int, offset: int = 0, device=None) -> torch.Tensor:
    """`(length, dim)` table of the paper: PE[p, 2i] = sin(p / 10000^(2i/dim)),
    PE[p, 2i+1] = cos(p / 10000^(2i/dim)). Computed in float32 for any length."""
    pos = torch.arange(offset, offset + length, device=device, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(
        torch.arange(0, dim, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / dim)
    )  # (ceil(dim/2),)
    angles = pos * inv_freq  # (length, ceil(dim/2))
    table = torch.empty(length, dim, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return table


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table; works for any length (no max_len)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self._cache: torch.Tensor | None = None

    def table(self, length: int, device) -> torch.Tensor:
        if self._cache is None or self._cache.shape[0] < length or self._cache.device != device:
            self._cache = sinusoidal_table(max(length, 64), self.dim, device=device)
        return self._cache[:length]

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: `(B, T, C)` -> `x + PE[offset : offset + T]`."""
        pe = self.table(offset + x.shape[1], x.device)[offset:]  # (T, C)
        return x + pe.to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """A trained vector per position, up to `max_len` (BERT, GPT-2)."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.max_len = max_len
        self.embedding = nn.Embedding(max_len, dim)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        T = x.shape[1]
        if offset + T > self.max_len:
            raise UserError(
                f"input of {offset + T} positions is longer than max_len={self.max_len} of the "
                "learned position table; truncate the input or use rope/sinusoidal positions"
            )
        pos = torch.arange(offset, offset + T, device=x.device)
        return x + self.embedding(pos)  # (B, T, C) + (T, C)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al.): rotate each pair of query/key channels by an angle proportional to
    the position, so q·k depends only on the relative offset. Half-split pairing
    (channel i with i + D/2, as GPT-NeoX / LLaMA in HF). Angles in float32: in bf16 the
    positions above ~256 lose their low bits and the rotation goes wrong.

    angle(p, i) = (p / scale) · base^(-2i/D)      旋转角 = 位置 / 缩放 × 频率

    `scale` > 1 is position interpolation (Chen et al. 2023, "Extending context window of
    large language models via positional interpolation"): a model trained on L positions
    reads L·scale positions with every angle inside the range it was trained on. The other
    way to stretch RoPE, NTK-aware scaling, keeps the positions and raises `base` instead
    (`ntk_base`); `scaled_rope` builds either.
    """

    def __init__(self, head_dim: int, base: float = 10000.0, scale: float = 1.0):
        super().__init__()
        if head_dim % 2:
            raise UserError(f"RoPE needs an even head dimension, got {head_dim}")
        if not scale > 0:
            raise UserError(f"RoPE position scale must be > 0, got {scale}")
        self.head_dim, self.base, self.scale = head_dim, float(base), float(scale)
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._cos: torch.Tensor | None = None
        self._sin: torch.Tensor | None = None

    def _tables(self, length: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cos is None or self._cos.shape[0] < length or self._cos.device != device:
            n = max(length, 2 * (0 if self._cos is None else self._cos.shape[0]), 64)
            pos = torch.arange(n, device=device, dtype=torch.float32)
            if self.scale != 1.0:
                pos = pos / self.scale  # interpolation: a division, so p / s is exact where it is whole
            angles = torch.outer(pos, self.inv_freq.to(device))  # (n, D/2)
            angles = torch.cat([angles, angles], dim=-1)  # (n, D)
            self._cos, self._sin = angles.cos(), angles.sin()
        return self._cos, self._sin

    def rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x: `(B, H, T, D)` at positions offset..offset+T-1 -> rotated, same shape/dtype."""
        T = x.shape[-2]
        cos, sin = self._tables(offset + T, x.device)
        cos, sin = cos[offset : offset + T], sin[offset : offset + T]  # (T, D)
        xf = x.float()
        x1, x2 = xf.chunk(2, dim=-1)  # (B, H, T, D/2) each
        rotated_half = torch.cat([-x2, x1], dim=-1)  # (B, H, T, D)
        return (xf * cos + rotated_half * sin).to(x.dtype)


ROPE_SCALINGS = ("linear", "ntk")


def ntk_base(base: float, factor: float, head_dim: int) -> float:
    """NTK-aware scaling ("NTK-aware scaled RoPE", bloc97, 2023): base' = base · s^(D/(D-2)).
    The lowest frequency (i = D/2 - 1) then turns s times slower, as under interpolation,
    while the highest (i = 0) is unchanged, so nearby tokens keep their full resolution."""
    return float(base) * float(factor) ** (head_dim / (head_dim - 2))


def scaled_rope(rope: RotaryEmbedding, kind: str, factor: float) -> RotaryEmbedding:
    """A copy of `rope` stretched `factor` times for contexts longer than training: `linear`
    (position interpolation, positions / factor) or `ntk` (base raised by `ntk_base`).
    factor 1 gives the same angles as `rope`."""
    if kind not in ROPE_SCALINGS:
        raise UserError(f"RoPE scaling {kind!r} unknown; choose one of {ROPE_SCALINGS}")
    if not factor >= 1.0:
        raise UserError(f"RoPE scaling factor must be >= 1 (a longer context than training), got {factor}")
    if kind == "linear":
        return RotaryEmbedding(rope.head_dim, rope.base, rope.scale * factor)
    if rope.head_dim <= 2:
        raise UserError("NTK-aware RoPE scaling needs a head dimension > 2")
    return RotaryEmbedding(rope.head_dim, ntk_base(rope.base, factor, rope.head_dim), rope.scale)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Per-head slopes of ALiBi: a geometric sequence 2^(-8/n), 2^(-16/n), ...; for a head
    count that is not a power of two, the paper's interleaving of the next power's slopes."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


class ALiBi(nn.Module):
    """Attention with Linear Biases: add `-slope_h * distance` to the scores of head h.
    Causal models see only the past (distance >= 0); for an encoder the distance is |i - j|.
    """

    def __init__(self, n_heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, q_len: int, k_len: int, device=None, k_pos: torch.Tensor | None = None) -> torch.Tensor:
        """`(H, Tq, Tk)` float32 additive bias, lower-right aligned like `causal_mask`. `k_pos`:
        the keys' absolute positions `(Tk,)` when they are not 0..Tk-1 (a rolling KV cache);
        the queries are then the last `q_len` of them."""
        if k_pos is None:
            k_pos = torch.arange(k_len, device=device)
        q_pos = k_pos[k_len - q_len:, None]  # (Tq, 1)
        dist = (q_pos - k_pos[None, :]).abs().float()  # (Tq, Tk)
        return -self.slopes.to(device)[:, None, None] * dist  # (H, Tq, Tk)
