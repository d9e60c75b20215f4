"""Greedy and beam-search decoding for encoder-decoder models, batched over sentences.

The model needs two methods (see `scratchformer.models.seq2seq.Seq2Seq`):
    encode(src (B, S)) -> (memory (B, S, C), src_mask (B, S))
    decode(tgt (B, T), memory, src_mask, cache=None) -> logits (B, T, V)
and `new_cache()` for incremental decoding; or it is an ensemble with `members` that each have
them (their next-token probabilities are averaged). With the cache (the default) each step feeds
only the newest token: self-attention keys/values are appended to a `DecoderCache`, the
cross-attention keys/values of the memory are projected once per source. Without it, each
step re-runs the decoder over the whole prefix (the reference the cache is tested against).

Lengths: a sentence with `n` source tokens may get at most
`min(ceil(max_len_ratio * n) + max_len_offset, max_output_len)` target tokens (not counting
<eos>). A hypothesis that reaches the limit without <eos> is returned with `finished=False`.

Beam search keeps `beam` hypotheses per sentence. At each step it takes the best `2 * beam`
extensions of all live hypotheses: an <eos> among the best `beam` of them ends a hypothesis,
the best `beam` non-<eos> ones live on. Finished hypotheses are ranked by
`score / length ** length_penalty` (length counts the <eos>; `length_penalty=0` ranks by raw
log-probability, larger values favour longer outputs). `early_stop=True` ends a sentence once it
has `beam` finished hypotheses (fairseq); `early_stop=False` continues until no live hypothesis
can still beat the best finished one (an exact bound, since log-probabilities only fall).
Sentences that are done leave the batch, so long sentences do not keep short ones busy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...data.tokenizers import BOS_ID, CLS_ID, EOS_ID, PAD_ID
from ...errors import UserError
from ...config import JsonConfig


@dataclass
class DecodeConfig(JsonConfig):
    beam: int = 5  # 1 = greedy
    length_penalty: float = 1.0  # beam ranking: score / length**length_penalty
    max_len_ratio: float = 1.5  # output limit: ratio * source length + offset tokens
    max_len_offset: int = 10
    max_output_len: int = 256  # hard cap on output tokens
    max_input_len: int = 256  # longer sources are refused with a UserError
    early_stop: bool = True
    use_cache: bool = True
    batch_tokens: int = 4000  # source tokens (times beam) decoded together
    precision: str = "fp32"  # "bf16": run the model under bfloat16 autocast (log-probs stay fp32)

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise UserError(f"beam must be >= 1, got {self.beam}")
        if self.max_len_ratio < 0 or self.max_len_offset < 0 or self.max_output_len < 1:
            raise UserError("max_len_ratio and max_len_offset must be >= 0 and max_output_len >= 1")
        if self.max_input_len < 1 or self.batch_tokens < 1:
            raise UserError("max_input_len and batch_tokens must be >= 1")
        if self.precision not in ("fp32", "bf16"):
            raise UserError(f"decode precision must be 'fp32' or 'bf16', got {self.precision!r}")


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without <bos> and <eos>
    score: float  # sum of the log-probabilities of the tokens (and of <eos> when finished)
    finished: bool = True  # False: stopped at the length limit without <eos>
    normalized: float = field(default=0.0)  # the score beam search ranked it by


# Ids a decoder must never emit: padding, <bos> and <cls> are not outputs.
_BANNED = (PAD_ID, BOS_ID, CLS_ID)


def length_limits(src: torch.Tensor, cfg: DecodeConfig) -> torch.Tensor:
    """`(B,)` maximum number of output tokens (without <eos>) for each source row."""
    n = (src != PAD_ID).sum(-1).double()
    limit = torch.ceil(n * cfg.max_len_ratio).long() + cfg.max_len_offset
    return limit.clamp(min=1, max=cfg.max_output_len)


class _Stepper:
    """One decoding state: memory, its mask, the cache; `step` gives next-token log-probs.

    An ensemble (a model with `members`, e.g. `Seq2SeqEnsemble`) keeps one state per member
    and mixes their probabilities: log(mean_i p_i(y | prefix))."""

    def __init__(self, model, src: torch.Tensor, use_cache: bool, expand: int = 1):
        self.models = list(getattr(model, "members", [model]))
        self.memory, self.mask, self.caches = [], [], []
        for m in self.models:
            memory, mask = m.encode(src)  # (B, S, C), (B, S)
            if expand > 1:  # beam search: K copies of each source, rows b*K .. b*K+K-1
                memory, mask = memory.repeat_interleave(expand, 0), mask.repeat_interleave(expand, 0)
            self.memory.append(memory)
            self.mask.append(mask)
            self.caches.append(m.new_cache() if use_cache else None)
        self.use_cache = use_cache

    def step(self, prefix: torch.Tensor) -> torch.Tensor:
        """prefix `(N, t)` = <bos> and the tokens so far -> log-probs `(N, V)` of the next one."""
        tokens = prefix[:, -1:] if self.use_cache else prefix
        logps = []
        for m, memory, mask, cache in zip(self.models, self.memory, self.mask, self.caches):
            logits = m.decode(tokens, memory, mask, cache=cache)[:, -1]
            logps.append(F.log_softmax(logits.float(), dim=-1))  # (N, V)
        if len(logps) == 1:
            logp = logps[0]
        else:  # log of the mean probability
            logp = torch.logsumexp(torch.stack(logps), 0) - math.log(len(logps))
        logp[:, list(_BANNED)] = float("-inf")
        return logp

    def select(self, index: torch.Tensor) -> None:
        """Keep rows `index` (in that order): finished sentences leave, beams are reordered."""
        for i, cache in enumerate(self.caches):
            if cache is not None:
                cache.reorder(index)  # cross-attention K/V follow their rows; nothing recomputed
            self.memory[i] = self.memory[i].index_select(0, index)
            self.mask[i] = self.mask[i].index_select(0, index)


def check_sources(lengths: list[int], cfg: DecodeConfig) -> None:
    """UserError for an empty or an over-long source (lengths without <eos>), 1-based in the message."""
    for i, n in enumerate(lengths, 1):
        if n == 0:
            raise UserError(f"sentence {i} is empty: there is nothing to translate")
        if n > cfg.max_input_len:
            raise UserError(f"sentence {i} has {n} tokens, more than max_input_len={cfg.max_input_len}; "
                            "split it into shorter sentences (or raise decode.max_input_len)")


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, cfg: DecodeConfig | None = None) -> list[Hypothesis]:
    """src `(B, S)` ids (right-padded) -> one `Hypothesis` per row: the argmax at every step."""
    cfg = cfg or DecodeConfig(beam=1)
    B = src.shape[0]
    limits = length_limits(src, cfg)
    state = _Stepper(model, src, cfg.use_cache)
    prefix = torch.full((B, 1), BOS_ID, dtype=torch.long, device=src.device)
    alive = torch.arange(B, device=src.device)  # sentence of each live row
    scores = torch.zeros(B, dtype=torch.float64, device=src.device)
    out: list[Hypothesis | None] = [None] * B
    for t in range(1, int(limits.max()) + 1):  # t = output tokens after this step
        logp = state.step(prefix)  # (n, V)
        best, tok = logp.max(-1)  # (n,)
        scores = scores + best.double()
        prefix = torch.cat([prefix, tok[:, None]], 1)  # (n, t + 1)
        is_eos = tok == EOS_ID
        ended = is_eos | (limits[alive] <= t)
        if bool(ended.any()):
            for r in ended.nonzero()[:, 0].tolist():
                toks = prefix[r, 1:].tolist()
                fin = bool(is_eos[r])
                out[int(alive[r])] = Hypothesis(toks[:-1] if fin else toks, float(scores[r]), fin, float(scores[r]))
            keep = (~ended).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            state.select(keep)
            prefix, alive, scores = prefix[keep], alive[keep], scores[keep]
    return out  # type: ignore[return-value]


def _norm(score: float, length: int, penalty: float) -> float:
    return score / (length ** penalty) if penalty else score


@torch.no_grad()
def beam_search(model, src: torch.Tensor, cfg: DecodeConfig | None = None) -> list[Hypothesis]:
    """src `(B, S)` ids -> the best `Hypothesis` of each row (see the module docstring)."""
    cfg = cfg or DecodeConfig()
    K = cfg.beam
    B, dev = src.shape[0], src.device
    limits = length_limits(src, cfg)
    state = _Stepper(model, src, cfg.use_cache, expand=K)
    prefix = torch.full((B * K, 1), BOS_ID, dtype=torch.long, device=dev)
    scores = torch.zeros(B, K, dtype=torch.float64, device=dev)
    scores[:, 1:] = float("-inf")  # all beams start equal: keep only the first at step 1
    alive = torch.arange(B, device=dev)  # sentence of each live group of K rows
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    out: list[Hypothesis | None] = [None] * B
    lp = cfg.length_penalty
    for t in range(1, int(limits.max()) + 1):
        n = alive.numel()
        logp = state.step(prefix)  # (n K, V)
        V = logp.shape[-1]
        cand = scores[:, :, None] + logp.view(n, K, V).double()  # (n, K, V)
        top, idx = cand.view(n, K * V).topk(min(2 * K, K * V), dim=-1)  # (n, 2K)
        beam_of, tok = idx // V, idx % V
        is_eos = tok == EOS_ID
        # <eos> among the best K candidates ends a hypothesis (at most one <eos> per beam,
        # so at least K of the 2K candidates are not <eos>)
        ends = is_eos & (torch.arange(top.shape[1], device=dev) < K) & torch.isfinite(top)
        for i, j in ends.nonzero().tolist():
            row = i * K + int(beam_of[i, j])
            s = float(top[i, j])
            finished[int(alive[i])].append(Hypothesis(prefix[row, 1:].tolist(), s, True, _norm(s, t, lp)))
        # the best K non-<eos> candidates live on
        order = (is_eos.long() * top.shape[1] + torch.arange(top.shape[1], device=dev)).argsort(-1)[:, :K]
        new_scores = top.gather(1, order)  # (n, K)
        new_beam = beam_of.gather(1, order)
        new_tok = tok.gather(1, order)
        rows = (torch.arange(n, device=dev)[:, None] * K + new_beam).view(-1)  # (n K,) rows to keep
        prefix = torch.cat([prefix[rows], new_tok.view(-1, 1)], 1)  # (n K, t + 1)
        done = torch.zeros(n, dtype=torch.bool)
        for i in range(n):
            b = int(alive[i])
            fin = finished[b]
            if int(limits[b]) <= t:  # the length limit: the best finished, else the best cut-off
                if not fin:
                    s = float(new_scores[i, 0])
                    fin.append(Hypothesis(prefix[i * K, 1:].tolist(), s, False, _norm(s, t, lp)))
                done[i] = True
            elif fin:
                if cfg.early_stop:
                    done[i] = len(fin) >= K
                else:  # can any live hypothesis still end above the best finished one?
                    best_live = float(new_scores[i, 0])
                    length = int(limits[b]) + 1 if lp >= 0 else t + 1
                    done[i] = _norm(best_live, length, lp) <= max(h.normalized for h in fin)
            if done[i]:
                out[b] = max(fin, key=lambda h: (h.finished, h.normalized))
        keep = (~done).nonzero()[:, 0].to(dev)
        if keep.numel() == 0:
            break
        scores = new_scores[keep]
        sel = (keep[:, None] * K + torch.arange(K, device=dev)).view(-1)
        state.select(rows[sel])  # reorder the beams and drop the sentences that are done
        prefix, alive = prefix[sel], alive[keep]
    return out  # type: ignore[return-value]


def decode(model, src: torch.Tensor, cfg: DecodeConfig) -> list[Hypothesis]:
    """Greedy when `cfg.beam == 1`, beam search otherwise."""
    return greedy_decode(model, src, cfg) if cfg.beam == 1 else beam_search(model, src, cfg)


__all__ = ["DecodeConfig", "Hypothesis", "greedy_decode", "beam_search", "decode", "length_limits",
           "check_sources"]
