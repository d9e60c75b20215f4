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
import os
import math
from dataclasses import dataclass, field

from pathlib import Path

import torch
import torch.nn.functional as F

from ...data.tokenizers import BOS_ID, CLS_ID, EOS_ID, PAD_ID
from ...errors import UserError
from ...config import JsonConfig
from ...nn import static
from ...nn.compute import BF16_MIN_GAIN, choose_compute  # noqa: F401  (BF16_MIN_GAIN: its old address)


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
    # "bf16": a bfloat16 copy of the model (log-probs in fp32; `Translator.bf16_model`); "auto": whichever a
    # micro-probe on this CPU measures faster for the decode's size (`choose_precision`)
    precision: str = "auto"
    lean: bool = True  # the lean search and decode step (False: the readable reference)
    # torch.compile the lean step (Inductor; the first decodes compile for seconds to a minute).
    # Off by default: on the CPU only batch-1 greedy gained (~14%, benchmarks/results/epyc-avx2/compiled_decode.md)
    compile: bool = False
    # the static compiled step (nn/static.py: fixed shape buckets, K/V buffers written in place,
    # compiled ahead of time by AOTInductor, one package per bucket kept in the cache folder):
    # "on" (or true): compile a bucket the first time it is met (seconds to a minute each);
    # "auto": in float32 on the CPU, where the bucket's package is ready (built in this process or
    # stored): a one-off command never waits for a compile; `serve` builds its buckets at start;
    # "off" (or false): the lean step. Falls back to the lean step, with one warning, where a
    # model cannot use it or the compiler fails
    static: bool | str = "auto"
    # with `static`: weight-only int8 projections (per-output-channel scales, float activations;
    # a quarter of the weight bytes a batch-1 step reads)
    static_int8: bool = False

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise UserError(f"beam must be >= 1, got {self.beam}")
        if self.max_len_ratio < 0 or self.max_len_offset < 0 or self.max_output_len < 1:
            raise UserError("max_len_ratio and max_len_offset must be >= 0 and max_output_len >= 1")
        if self.max_input_len < 1 or self.batch_tokens < 1:
            raise UserError("max_input_len and batch_tokens must be >= 1")
        if isinstance(self.static, bool):  # the earlier spelling
            self.static = "on" if self.static else "off"
        if self.static not in ("on", "off", "auto"):
            raise UserError(f"decode static must be 'on', 'off' or 'auto' (or true/false), got {self.static!r}")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise UserError(f"decode precision must be 'fp32', 'bf16' or 'auto', got {self.precision!r}")


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


# Ids a decoder must never emit: padding, <bos> and <cls> are not outputs.
_BANNED = (PAD_ID, BOS_ID, CLS_ID)


def choose_precision(rows: int, d_model: int, device: str = "cpu") -> tuple[str, str]:
    """`(precision, why)` for decoding `rows` hypotheses at once with a model of width `d_model`:
    "bf16" where `nn.compute.choose_compute` (bf16 matrix units, then a micro-probe of one block,
    once per size bucket) says the bf16 copy is `BF16_MIN_GAIN` times faster, else "fp32"."""
    kind, why = choose_compute(rows, d_model, device)
    return ("bf16" if kind == "bfloat16" else "fp32"), why


def length_limits(src: torch.Tensor, cfg: DecodeConfig, pad_id: int = PAD_ID) -> torch.Tensor:
    """`(B,)` maximum number of output tokens (without <eos>) for each source row. `pad_id`:
    the source's padding id (`model.src_pad_id`: 1 for an XLM-R encoder, whose `<s> .. </s>`
    count as two source tokens where ours have one <eos>)."""
    n = (src != pad_id).sum(-1).double()
    limit = torch.ceil(n * cfg.max_len_ratio).long() + cfg.max_len_offset
    return limit.clamp(min=1, max=cfg.max_output_len)


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
    if static_path(model, cfg) is None:
        try:
            state = _StaticStepper.make(model, src, capacity, expand=expand, int8=cfg.static_int8,
                                        build=cfg.static == "on")
        except Exception as e:  # noqa: BLE001  auto is the default: a step that cannot be built must not stop decoding
            if cfg.static != "auto":
                raise
            _warn_once(f"the static decoding step could not be built ({type(e).__name__}: "
                       f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}); decoding runs the lean step")
            state = None
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


CAP_LEAST, SOURCE_LEAST = 64, 32  # the smallest target-capacity and source-length buckets
def static_path(model, cfg: DecodeConfig) -> str | None:
    """None when a decode may take the static step under `cfg` (with "auto": if its bucket's
    package is ready), else why not."""
    if cfg.static == "off":
        return "decode.static is off"
    if not (cfg.lean and cfg.use_cache):
        return "the readable path was asked for (lean or use_cache off)"
    if hasattr(model, "members"):
        return "an ensemble averages its members' steps: the lean step serves it"
    blocker = getattr(model, "static_blocker", lambda: "the model has no static step")()
    if blocker is not None:
        return blocker
    if cfg.static == "auto":
        p = next(model.parameters())
        if p.dtype != torch.float32 or p.device.type != "cpu":
            return "auto takes it for float32 on the CPU only (decode.static=on forces it)"
    return None


_warned: set = set()


def _warn_once(message: str) -> None:
    import warnings

    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def static_bucket(model, src: torch.Tensor, cfg: DecodeConfig) -> tuple[tuple[int, int, int], bool]:
    """The static step's shape bucket (rows, target capacity, source length) for decoding `src
    (B, S)` with `model` under `cfg`, and whether it is ready (built in this process or its
    package stored): what a decode with decode.static=auto takes."""
    limits = length_limits(src, cfg, getattr(model, "src_pad_id", PAD_ID))
    capacity = int(limits.max()) + 1
    shapes = _StaticStepper._shapes(src, capacity, cfg.beam)
    entry = _StaticStepper._entry(model, src, capacity, cfg.beam, cfg.static_int8)
    return shapes, entry.stored(shapes, greedy=cfg.beam == 1)


def _package_store(module):
    """Where the compiled packages of a static step live between processes: one verified folder
    per bucket under `<cache>/static-steps/<step digest>/` (`$SCRATCHFORMER_STEP_CACHE` for
    `<cache>/static-steps`, else under `$SCRATCHFORMER_CACHE`, else ~/.cache/scratchformer),
    written whole or not at all, its sha256 checked before the shared
    library in it is loaded. Not in the run folder: a run folder is meant to be copied and
    shared, and a package is native code that loading runs (as unpickling would)."""
    from ...data.fetch import cache_dir
    from ...folders import check_whole, whole

    root = Path(os.environ.get("SCRATCHFORMER_STEP_CACHE") or cache_dir() / "static-steps") / static.step_digest(module)

    def store(name: str, build) -> Path | None:
        """The package `name`, built by `build(path)` when it is not stored whole (build=None:
        only a stored one, else None)."""
        folder = root / name
        if build is None:
            return folder / "step.pt2" if check_whole(folder, "package.json", {"kind": "aoti-step"}) is None else None
        whole(folder, "package.json", lambda stage: build(stage.path / "step.pt2"), want={"kind": "aoti-step"},
              what="compiled step cache")
        return folder / "step.pt2"

    return store


class _StaticStepper:
    """The static compiled step (`nn.static`) behind the stepper interface. Its shapes are
    fixed per decode (rows, capacity and source length rounded up to buckets), so rows never
    leave it: `phys` maps each live row to its row in the buffers. Greedy search only drops
    rows from `phys`; beam search copies the reordered hypotheses' filled cache slots to the
    front (and their cross keys/values when sentences left)."""

    @classmethod
    def make(cls, model, src: torch.Tensor, capacity: int, expand: int = 1,
             int8: bool = False, build: bool = True) -> "_StaticStepper | None":
        """The stepper, or None when the compiler failed here or (`build=False`) its bucket's
        package is not stored yet (the lean step serves then)."""
        if static.compiler_on() and static.compile_disabled() is not None:
            return None
        if not build and not cls._entry(model, src, capacity, expand, int8).stored(
                cls._shapes(src, capacity, expand), greedy=expand == 1):
            return None  # before the encoder runs: the lean step would run it again
        state = cls(model, src, capacity, expand, int8)
        return state if state.compiled.warm(state.shapes, *state.args(), greedy=expand == 1, build=build) else None

    @staticmethod
    def _shapes(src: torch.Tensor, capacity: int, expand: int) -> tuple[int, int, int]:
        """(rows, capacity, source length) rounded up to their buckets (the memory is as long as
        the source): few buckets, as each is compiled once (seconds); attention over a few
        padded slots is cheap."""
        return (static.bucket(src.shape[0] * expand), static.bucket(capacity, CAP_LEAST),
                static.bucket(src.shape[1], SOURCE_LEAST))

    @staticmethod
    def _entry(model, src: torch.Tensor, capacity: int, expand: int, int8: bool) -> static.CompiledStep:
        cap = static.bucket(capacity, CAP_LEAST)
        dtype = next(model.parameters()).dtype
        key = (static.weights_digest(model), "int8" if int8 else str(dtype), cap)
        return static.compiled_step(key, lambda: model.static_step(cap, _BANNED, int8), model, _package_store)

    def __init__(self, model, src: torch.Tensor, capacity: int, expand: int = 1, int8: bool = False):
        memory, mask = model.static_encode(src)  # (B, S, C), (B, S): compiled where it wins
        B, S, _ = memory.shape
        K, n = expand, B * expand
        self.shapes = N, cap, Sb = self._shapes(src, capacity, expand)
        assert Sb >= S, "the memory is longer than its source"
        self.compiled = self._entry(model, src, capacity, expand, int8)
        module = self.compiled.module
        self.self_k, self.self_v = module.new_caches(N, cap)  # per layer (cap, N, H, d_k)
        ks, vs = module.memory_kv(memory)  # per layer (S, B, H, d_k): once per sentence
        S_, _, H, D = ks[0].shape
        self.cross_k, self.cross_v = [], []
        for k, v in zip(ks, vs):
            for src_kv, bufs in ((k, self.cross_k), (v, self.cross_v)):
                buf = memory.new_zeros(Sb, N, H, D)  # padded rows attend zeros
                buf[:S, :n] = src_kv.repeat_interleave(K, 1) if K > 1 else src_kv
                bufs.append(buf)
        # 0 = attend; -inf = padding (the source's, and the bucket's beyond S)
        self.cross_bias = memory.new_zeros(Sb, N, 1)
        pad = torch.ones(Sb, n, dtype=torch.bool, device=src.device)  # (Sb, n)
        pad[:S] = ~(mask.repeat_interleave(K, 0) if K > 1 else mask).t()
        self.cross_bias[:, :n, 0].masked_fill_(pad, float("-inf"))
        self.pos = torch.zeros(1, dtype=torch.long, device=src.device)
        self.tokens = torch.zeros(N, dtype=torch.long, device=src.device)
        self.phys = torch.arange(n, device=src.device)  # buffer row of each live row
        self.full = n == N  # phys is every buffer row in order
        self.beams = K

    def args(self) -> tuple:
        return (self.tokens, self.pos, self.self_k, self.self_v, self.cross_k, self.cross_v, self.cross_bias)

    def _run(self, prefix: torch.Tensor, greedy: bool):
        if self.full:  # every buffer row live, in order (batch 1 until it ends): no mapping
            self.tokens.copy_(prefix[:, -1])
        else:
            self.tokens[self.phys] = prefix[:, -1]
        out = self.compiled(self.shapes, greedy, self.args())
        self.pos += 1
        return out

    def _live(self, t: torch.Tensor) -> torch.Tensor:
        return t if self.full else t.index_select(0, self.phys)

    def step(self, prefix: torch.Tensor) -> torch.Tensor:
        """prefix `(n, t)` -> log-probs `(n, V)` (beam search)."""
        return self._live(self._run(prefix, False))

    def best(self, prefix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """prefix `(n, t)` -> the best next token's log-prob `(n,)` and id `(n,)` (greedy)."""
        best, tok = self._run(prefix, True)
        return self._live(best), self._live(tok)

    def select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        rows = self.phys.index_select(0, index)
        self.full = False  # greedy: rows left; beam: the hypotheses move to the front
        if self.beams == 1:  # greedy: rows only leave; their buffers stay where they are
            self.phys = rows
            return
        n, t = rows.numel(), int(self.pos)
        # the reordered hypotheses to the front: only the t filled slots are copied
        for buf in self.self_k + self.self_v:  # (cap, N, H, d_k)
            buf[:t, :n] = buf[:t, rows]
        if sentences is not None:  # sentences left: their hypotheses' memory rows move too
            for buf in self.cross_k + self.cross_v + [self.cross_bias]:  # (Sb, N, ...)
                buf[:, :n] = buf[:, rows]
        self.phys = torch.arange(n, device=rows.device)
        self.full = n == self.tokens.numel()


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
           "check_sources", "static_path", "static_bucket"]
