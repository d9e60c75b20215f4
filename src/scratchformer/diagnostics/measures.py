"""Per-head statistics of attention maps, accumulated over batches of samples.

Every statistic is a mean over the real query tokens of all samples, per (layer, head):
  pad_mass      sum of weights on padding keys (must be 0: the mask hides padding)
  special_mass  sum of weights on each kind of special key (<cls>, <bos>, <eos>, [SEP])
  entropy       -sum p log p of the query's row, divided by log(number of keys it may see),
                so 0 = all mass on one key and 1 = uniform over the allowed keys
  distance      sum_k p_k |q - k| in tokens, and the same for a uniform row (`uniform_distance`)
  diagonal      the weight of the query on itself
  future_mass   (causal views) sum of weights on keys after the query (must be 0: the causal
                mask hides the future)
  top_column    per sample, the largest column mass (mean weight that all queries give one
                key position): near 1 = every query looks at the same position
  similarity    for each pair of heads of a layer: 1 - mean total-variation distance between
                their rows (1 = identical maps)
"""
from __future__ import annotations

from collections import Counter

import torch

from ..tasks.inspection import AttentionBatch


class ViewStats:
    def __init__(self, name: str, n_layers: int, n_heads: int, self_attention: bool, causal: bool):
        self.name, self.self_attention, self.causal = name, self_attention, causal
        z = lambda: torch.zeros(n_layers, n_heads, dtype=torch.float64)  # noqa: E731
        self.pad_mass, self.entropy, self.distance, self.uniform_distance = z(), z(), z(), z()
        self.diagonal, self.top_column, self.future_mass = z(), z(), z()
        self.special_mass: dict[str, torch.Tensor] = {}
        self.top_column_token: list[list[Counter]] = [[Counter() for _ in range(n_heads)] for _ in range(n_layers)]
        self.similarity = torch.zeros(n_layers, n_heads, n_heads, dtype=torch.float64)
        self.queries = 0.0  # real queries seen
        self.samples = 0
        self.padded_keys = 0  # padding keys seen (0: the padding check measured nothing)
        self.finite = True

    @property
    def n_layers(self) -> int:
        return self.pad_mass.shape[0]

    def add(self, ab: AttentionBatch) -> None:
        q_real = ab.query_real.to(torch.float64)  # (B, Tq)
        k_real = ab.key_real
        n_q = float(q_real.sum())
        self.queries += n_q
        self.samples += q_real.shape[0]
        self.padded_keys += int((~k_real).sum())
        kind_at = self._kind_names(ab)
        for li, w in enumerate(ab.layers):
            w = w.detach().to(torch.float64)  # (B, H, Tq, Tk)
            if not bool(torch.isfinite(w).all()):
                self.finite = False
                w = torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)
            qm = q_real[:, None, :]  # (B, 1, Tq)
            per_q = lambda x: (x * qm).sum(dim=(0, 2))  # (B, H, Tq) -> (H,)  # noqa: E731
            self.pad_mass[li] += per_q((w * (~k_real)[:, None, None, :]).sum(-1))
            for kind, pos in ab.key_kinds.items():
                acc = self.special_mass.setdefault(kind, torch.zeros_like(self.pad_mass))
                acc[li] += per_q((w * pos[:, None, None, :]).sum(-1))
            allowed = self._allowed(ab)  # (B, Tq, Tk)
            n_allowed = allowed.sum(-1).clamp(min=1).to(torch.float64)  # (B, Tq)
            ent = -(w * torch.log(w.clamp(min=1e-12))).sum(-1)  # (B, H, Tq)
            norm = torch.log(n_allowed).clamp(min=1e-12)[:, None, :]
            self.entropy[li] += per_q(torch.where(n_allowed[:, None, :] > 1, ent / norm, torch.zeros_like(ent)))
            if ab.self_attention:
                T = w.shape[-1]
                dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs().to(torch.float64)  # (Tq, Tk)
                self.distance[li] += per_q((w * dist).sum(-1))
                uniform = (allowed * dist).sum(-1) / n_allowed  # (B, Tq)
                self.uniform_distance[li] += (uniform * q_real).sum()
                self.diagonal[li] += per_q(torch.diagonal(w, dim1=-2, dim2=-1))
            if ab.causal:
                Tq, Tk = w.shape[-2:]
                future = torch.ones(Tq, Tk, dtype=torch.bool).triu(Tk - Tq + 1)  # key after the query
                self.future_mass[li] += per_q((w * future).sum(-1))
            col = (w * qm[..., None]).sum(2) / q_real.sum(1).clamp(min=1)[:, None, None]  # (B, H, Tk)
            top, where = col.max(-1)  # (B, H)
            self.top_column[li] += top.sum(0)
            for b in range(w.shape[0]):
                for h in range(w.shape[1]):
                    k = int(where[b, h])
                    self.top_column_token[li][h][kind_at.get((b, k), f"position {k}")] += 1
            self.similarity[li] += self._similarity(w, q_real)

    @staticmethod
    def _kind_names(ab: AttentionBatch) -> dict[tuple[int, int], str]:
        """(sample, key position) -> special token name, for the positions holding one."""
        names = {}
        for kind, pos in ab.key_kinds.items():
            for b, k in pos.nonzero().tolist():
                names[(b, k)] = kind
        return names

    def _allowed(self, ab: AttentionBatch) -> torch.Tensor:
        allowed = ab.key_real[:, None, :].expand(-1, ab.query_real.shape[1], -1)  # (B, Tq, Tk)
        if ab.causal:
            Tq, Tk = allowed.shape[1:]
            allowed = allowed & torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
        return allowed

    @staticmethod
    def _similarity(w: torch.Tensor, q_real: torch.Tensor) -> torch.Tensor:
        """(H, H) summed over real queries: 1 - total-variation distance of the two heads' rows."""
        tv = 0.5 * (w[:, :, None] - w[:, None, :]).abs().sum(-1)  # (B, H, H, Tq)
        return ((1.0 - tv) * q_real[:, None, None, :]).sum(dim=(0, 3))

    def result(self) -> dict[str, torch.Tensor]:
        """Means per real query (per sample for `top_column`)."""
        nq, ns = max(self.queries, 1.0), max(self.samples, 1)
        out = {"pad_mass": self.pad_mass / nq, "entropy": self.entropy / nq, "top_column": self.top_column / ns,
               "similarity": self.similarity / nq}
        out.update({f"special_mass[{k}]": v / nq for k, v in self.special_mass.items()})
        if self.causal:
            out["future_mass"] = self.future_mass / nq
        if self.self_attention:
            out.update(distance=self.distance / nq, uniform_distance=self.uniform_distance / nq,
                       diagonal=self.diagonal / nq)
        return out

    def top_column_name(self, layer: int, head: int) -> str:
        """The key most often holding a head's largest column mass (a token or 'position k')."""
        c = self.top_column_token[layer][head]
        return c.most_common(1)[0][0] if c else "?"
