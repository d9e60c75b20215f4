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

Each search is written once, over a stepper (the interface: `step(prefix (N, t)) -> log-probs
(N, V)` and `select(rows, sentences)`), as tensor bookkeeping over the whole beam x batch (per
sentence only the best finished hypothesis, its score and its count are kept, which is all the
ranking needs), the tokens written into a preallocated `(N, limit + 1)` buffer. Two steppers
implement the interface, tested to give identical tokens (tests/tasks/test_lean_decoding.py):
  - the lean step (`lean=True`, the default): the model's `lean_step` (nn/lean.py:
    preallocated KV cache, masks built and kernels chosen once per decode). A model without
    `lean_step`, or one whose `lean_blocker()` names a reason, steps through its `decode`;
  - the readable step (`lean=False`, and `use_cache=False`): the model's `decode` with a
    `DecoderCache` (or the whole prefix again without the cache), the reference.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ...data.tokenizers import BOS_ID, EOS_ID, PAD_ID
from ...errors import UserError
from ...nn.compute import BF16_MIN_GAIN, choose_compute  # noqa: F401  (BF16_MIN_GAIN: its old address)
from .decode_config import _BANNED, DecodeConfig, length_limits
from .static_step import static_stepper


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without <bos> and <eos>
    score: float  # sum of the log-probabilities of the tokens (and of <eos> when finished)
    finished: bool = True  # False: stopped at the length limit without <eos>
    normalized: float = field(default=0.0)  # the score beam search ranked it by
    # what its batch was decoded in ("fp32" / "bf16") and why: a value of this call, set by
    # `Translator.hypotheses` (never stored on the shared translator); not part of equality
    precision: str | None = field(default=None, compare=False)
    precision_reason: str | None = field(default=None, compare=False)


def choose_precision(rows: int, d_model: int, device: str = "cpu") -> tuple[str, str]:
    """`(precision, why)` for decoding `rows` hypotheses at once with a model of width `d_model`:
    "bf16" where `nn.compute.choose_compute` (bf16 matrix units, then a micro-probe of one block,
    once per size bucket) says the bf16 copy is `BF16_MIN_GAIN` times faster, else "fp32"."""
    kind, why = choose_compute(rows, d_model, device)
    return ("bf16" if kind == "bfloat16" else "fp32"), why


class _Stepper:
    """The readable decoding state: memory, its mask, the cache; `step(prefix)` gives next-token
    log-probs through the model's `decode` (with the cache: the last token; without: the whole
    prefix again). The stepper interface the one search runs over (`_LeanStepper` is the other):
        step(prefix (N, t)) -> log-probs (N, V)      prefix = <bos> and the tokens so far
        select(rows (N',), sentences=None)           keep these rows, in this order

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

    def select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep rows `index` (in that order): finished sentences leave, beams are reordered
        (one memory row per hypothesis here: `sentences` is not needed)."""
        for i, cache in enumerate(self.caches):
            if cache is not None:
                cache.reorder(index)  # cross-attention K/V follow their rows; nothing recomputed
            self.memory[i] = self.memory[i].index_select(0, index)
            self.mask[i] = self.mask[i].index_select(0, index)


def check_sources(lengths: list[int], cfg: DecodeConfig, first: int = 1) -> None:
    """UserError for an empty or an over-long source (lengths without <eos>), numbered from `first`
    in the message (a block of a longer input says the sentence's number in the whole input)."""
    for i, n in enumerate(lengths, first):
        if n == 0:
            raise UserError(f"sentence {i} is empty: there is nothing to translate")
        if n > cfg.max_input_len:
            raise UserError(f"sentence {i} has {n} tokens, more than max_input_len={cfg.max_input_len}; "
                            "split it into shorter sentences (or raise decode.max_input_len)")


def _stepper(model, src: torch.Tensor, cfg: DecodeConfig, capacity: int, expand: int = 1):
    """The state the search steps: the lean step (`cfg.lean` with the cache) or the readable
    one (`_Stepper`: the model's own `decode`, the reference the lean step is tested against).
    Both implement the stepper interface, so the search below is written once for both."""
    state = static_stepper(model, src, cfg, capacity, expand)
    if state is not None:
        return state
    if cfg.lean and cfg.use_cache:
        return _LeanStepper(model, src, capacity, expand=expand, compiled=cfg.compile)
    return _Stepper(model, src, cfg.use_cache, expand=expand)


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, cfg: DecodeConfig | None = None) -> list[Hypothesis]:
    """src `(B, S)` ids (right-padded) -> one `Hypothesis` per row: the argmax at every step."""
    cfg = cfg or DecodeConfig(beam=1)
    limits = length_limits(src, cfg, getattr(model, "src_pad_id", PAD_ID))
    return _greedy(_stepper(model, src, cfg, int(limits.max()) + 1), limits)


@torch.no_grad()
def beam_search(model, src: torch.Tensor, cfg: DecodeConfig | None = None) -> list[Hypothesis]:
    """src `(B, S)` ids -> the best `Hypothesis` of each row (see the module docstring)."""
    cfg = cfg or DecodeConfig()
    limits = length_limits(src, cfg, getattr(model, "src_pad_id", PAD_ID))
    return _beam(_stepper(model, src, cfg, int(limits.max()) + 1, expand=cfg.beam), limits, cfg)


class _LeanStepper:
    """The lean decoding state: per model (each ensemble member) its `lean_step` when it has
    one and `lean_blocker()` finds nothing against it, else its readable `decode` with a
    `DecoderCache`; `step(prefix (N, t))` gives next-token log-probs `(N, V)` from the last token
    (the stepper interface of `_Stepper`). With `expand` = K (beam search) the rows are the K
    hypotheses of each sentence side by side; a lean step keeps one memory per sentence."""

    def __init__(self, model, src: torch.Tensor, capacity: int, expand: int = 1, compiled: bool = False):
        self.models = list(getattr(model, "members", [model]))
        self.steps, self.reasons = [], []
        self.compiled = compiled  # each step through `_compiled_call`
        self.banned = torch.tensor(_BANNED, device=src.device)
        for m in self.models:
            memory, mask = m.encode(src)  # (B, S, C), (B, S)
            reason = m.lean_blocker() if hasattr(m, "lean_blocker") else "the model has no lean_step"
            self.reasons.append(reason)
            if reason is None:
                self.steps.append(m.lean_step(memory, mask, capacity, beams=expand))
                continue
            if expand > 1:  # the readable decode: K copies of each source, rows b*K .. b*K+K-1
                memory, mask = memory.repeat_interleave(expand, 0), mask.repeat_interleave(expand, 0)
            self.steps.append(_ReadableStep(m, memory, mask, capacity))

    def step(self, prefix: torch.Tensor) -> torch.Tensor:
        """prefix `(N, t)` -> log-probs `(N, V)`: each step object reads only the last token."""
        tokens = prefix[:, -1]  # (N,)
        if self.compiled:
            logps = [F.log_softmax(_compiled_call(s, tokens).float(), dim=-1) for s in self.steps]
        else:
            logps = [F.log_softmax(s(tokens).float(), dim=-1) for s in self.steps]  # (N, V) each
        logp = logps[0] if len(logps) == 1 else torch.logsumexp(torch.stack(logps), 0) - math.log(len(logps))
        logp.index_fill_(1, self.banned, float("-inf"))
        return logp

    def select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep rows `index`; `sentences`: the sentences kept when some left (beam search)."""
        for s in self.steps:
            s.select(index, sentences)


@functools.cache
def _compiler():
    # one compiled function for every step object: Dynamo caches its graphs by the function's
    # code and guards on the step's tensors (shapes, cache length), so later decodes reuse them
    return torch.compile(lambda step, tokens: step(tokens), dynamic=None, options={"cpp_wrapper": True})


def _compiled_call(step, tokens: torch.Tensor) -> torch.Tensor:
    return _compiler()(step, tokens)


class _ReadableStep:
    """A model's `decode` with a `DecoderCache`, behind the lean step's interface."""

    def __init__(self, model, memory, mask, capacity: int):
        self.model, self.memory, self.mask = model, memory, mask
        self.cache = model.new_cache(capacity) if "capacity" in model.new_cache.__code__.co_varnames \
            else model.new_cache()

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model.decode(tokens[:, None], self.memory, self.mask, cache=self.cache)[:, -1]

    def select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        self.cache.reorder(index)  # one memory row per hypothesis here: `sentences` is not needed
        self.memory, self.mask = self.memory.index_select(0, index), self.mask.index_select(0, index)


def _hypotheses(tokens: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor, norms: torch.Tensor,
                finished: torch.Tensor) -> list[Hypothesis]:
    """Per-sentence tensors -> `Hypothesis` objects (once, at the end of a decode)."""
    return [Hypothesis(t[:n], s, f, z) for t, n, s, z, f in
            zip(tokens.tolist(), lengths.tolist(), scores.tolist(), norms.tolist(), finished.tolist())]


def _greedy(state, limits: torch.Tensor) -> list[Hypothesis]:
    """The greedy search over a stepper (`_stepper`), as tensor bookkeeping over the batch."""
    B, dev = limits.shape[0], limits.device
    L = int(limits.max())
    buf = torch.full((B, L + 1), BOS_ID, dtype=torch.long, device=dev)  # <bos>, then the outputs
    alive = torch.arange(B, device=dev)  # sentence of each live row
    lim = limits.clone()
    scores = torch.zeros(B, dtype=torch.float64, device=dev)
    out_tok = torch.full((B, L + 1), PAD_ID, dtype=torch.long, device=dev)
    out_len = torch.zeros(B, dtype=torch.long, device=dev)
    out_score = torch.zeros(B, dtype=torch.float64, device=dev)
    out_fin = torch.zeros(B, dtype=torch.bool, device=dev)
    for t in range(1, L + 1):  # t = output tokens after this step
        # the (N, V) log_softmax stays: argmax of the logits and `logit - logsumexp` would
        # skip it, but torch's logsumexp costs more than log_softmax (1.7-3.6x, measured)
        if hasattr(state, "best"):  # the static step: the argmax and its log-prob, no softmax
            best, tok = state.best(buf[:, :t])
        else:
            best, tok = state.step(buf[:, :t]).max(-1)  # (n,)
        scores += best.double()
        buf[:, t] = tok
        is_eos = tok == EOS_ID
        ended = is_eos | (lim <= t)
        if bool(ended.any()):  # one host sync per step
            rows, sent = ended.nonzero()[:, 0], alive[ended]
            out_tok[sent] = buf[rows]
            out_fin[sent] = is_eos[rows]
            out_len[sent] = t - is_eos[rows].long()  # without <eos>
            out_score[sent] = scores[rows]
            keep = (~ended).nonzero()[:, 0]
            if keep.numel() == 0:
                break
            state.select(keep)
            buf, alive, scores, lim = buf[keep], alive[keep], scores[keep], lim[keep]
    return _hypotheses(out_tok[:, 1:], out_len, out_score, out_score, out_fin)


def _beam(state, limits: torch.Tensor, cfg: DecodeConfig) -> list[Hypothesis]:
    """The beam search over a stepper (`_stepper`), as tensor bookkeeping over the whole beam x
    batch. Per sentence it keeps the best finished hypothesis (tokens, score, normalised score),
    the first best by (finished, normalised score), and the number finished so far (early_stop
    stops on the count). Written once: the lean and the readable step both run through it."""
    K, lp = cfg.beam, cfg.length_penalty
    B, dev = limits.shape[0], limits.device
    L = int(limits.max())
    buf = torch.full((B * K, L + 1), BOS_ID, dtype=torch.long, device=dev)
    scores = torch.zeros(B, K, dtype=torch.float64, device=dev)
    scores[:, 1:] = float("-inf")  # all beams start equal: keep only the first at step 1
    alive = torch.arange(B, device=dev)  # sentence of each live group of K rows
    lim = limits.clone()
    # the exact bound of early_stop=False: score / (limit + 1) ** lp, the power computed once per
    # sentence in Python floats
    lim_pow = torch.tensor([float((n + 1) ** lp) for n in limits.tolist()], dtype=torch.float64, device=dev)
    n_fin = torch.zeros(B, dtype=torch.long, device=dev)
    best_tok = torch.full((B, L + 1), PAD_ID, dtype=torch.long, device=dev)
    best_len = torch.zeros(B, dtype=torch.long, device=dev)
    best_score = torch.zeros(B, dtype=torch.float64, device=dev)
    best_norm = torch.full((B,), float("-inf"), dtype=torch.float64, device=dev)
    best_fin = torch.zeros(B, dtype=torch.bool, device=dev)
    has_best = torch.zeros(B, dtype=torch.bool, device=dev)
    cols = torch.arange(2 * K, device=dev)
    beams = torch.arange(K, device=dev)
    for t in range(1, L + 1):
        n = alive.numel()
        logp = state.step(buf[:, :t])  # (n K, V)
        V = logp.shape[-1]
        # the best 2K extensions of all K beams are among each beam's best 2K: take those in
        # float32 first, then rank n x K x 2K candidates in float64 (same values and order as
        # ranking all n x K x V, with V-fold less float64 work)
        lp_top, lp_tok = logp.view(n, K, V).topk(min(2 * K, V), dim=-1)  # (n, K, w)
        w = lp_top.shape[-1]
        cand = scores[:, :, None] + lp_top.double()  # (n, K, w)
        top, idx = cand.view(n, K * w).topk(min(2 * K, K * w), dim=-1)  # (n, 2K)
        W = top.shape[1]
        beam_of, tok = idx // w, lp_tok.view(n, K * w).gather(1, idx)
        is_eos = tok == EOS_ID
        ends = is_eos & (cols[:W] < K) & torch.isfinite(top)  # (n, 2K): hypotheses finished now
        # the best of them (first on ties)
        normed = top / (t ** lp) if lp else top
        step_best, j = torch.where(ends, normed, float("-inf")).max(-1)  # (n,)
        better = ends.any(-1) & (~has_best[alive] | (step_best > best_norm[alive]))
        src_rows = torch.arange(n, device=dev) * K + beam_of.gather(1, j[:, None])[:, 0]  # (n,)
        n_fin[alive] += ends.sum(-1)
        # the best K non-<eos> candidates live on
        order = (is_eos.long() * W + cols[:W]).argsort(-1)[:, :K]  # (n, K)
        new_scores = top.gather(1, order)
        rows = (torch.arange(n, device=dev)[:, None] * K + beam_of.gather(1, order)).view(-1)  # (n K,)
        if bool(better.any()):
            i, sent = better.nonzero()[:, 0], alive[better]
            best_tok[sent, : t - 1] = buf[src_rows[i], 1:t]
            best_len[sent] = t - 1
            best_score[sent] = top[i, j[i]]
            best_norm[sent] = step_best[i]
            best_fin[sent] = True
            has_best[sent] = True
        buf = buf[rows]
        buf[:, t] = tok.gather(1, order).view(-1)
        at_limit = lim <= t
        hb = has_best[alive]
        cut = at_limit & ~hb  # at the limit with nothing finished: the best cut-off hypothesis
        if bool(cut.any()):
            i, sent = cut.nonzero()[:, 0], alive[cut]
            best_tok[sent, :t] = buf[i * K, 1 : t + 1]
            best_len[sent] = t
            best_score[sent] = new_scores[i, 0]
            best_norm[sent] = new_scores[i, 0] / (t ** lp) if lp else new_scores[i, 0]
        if cfg.early_stop:
            enough = n_fin[alive] >= K
        else:  # can any live hypothesis still end above the best finished one?
            bound = new_scores[:, 0] / (lim_pow[alive] if lp >= 0 else (t + 1) ** lp) if lp else new_scores[:, 0]
            enough = bound <= best_norm[alive]
        done = at_limit | (hb & enough)
        keep = (~done).nonzero()[:, 0]
        if keep.numel() == 0:
            break
        scores = new_scores[keep]
        sentences = None  # the same sentences as before
        if keep.numel() < n:
            sel = (keep[:, None] * K + beams).view(-1)  # (n' K,)
            rows, buf, alive, lim = rows[sel], buf[sel], alive[keep], lim[keep]
            sentences = keep
        state.select(rows, sentences)  # reorder the beams and drop the sentences that are done
    return _hypotheses(best_tok, best_len, best_score, best_norm, best_fin)


def decode(model, src: torch.Tensor, cfg: DecodeConfig) -> list[Hypothesis]:
    """Greedy when `cfg.beam == 1`, beam search otherwise."""
    return greedy_decode(model, src, cfg) if cfg.beam == 1 else beam_search(model, src, cfg)


__all__ = ["DecodeConfig", "Hypothesis", "greedy_decode", "beam_search", "decode", "length_limits",
           "check_sources"]
