"""The static decoding step: one new position per row through a whole decoder, at fixed shapes,
as one graph that AOTInductor compiles ahead of time into a single C++ function (`CompiledStep`).

The lean step (nn/lean.py) removed the per-step decisions of the readable path, but it still
runs ~150 PyTorch ops a step from Python, and at batch 1 their dispatch (2-7 us each) is most of
the step. A compiled graph removes that only if its shapes never change, so here everything a
decode touches has a size fixed before its first step (a "bucket"):

  - rows `N`: the hypotheses, padded up to a bucket; a row that finished keeps being computed
    (its output is ignored) instead of leaving and changing the shape;
  - the self-attention keys/values: per layer a buffer `(cap, N, H, d_k)`, written in place
    (`index_put_`) at the step's slot `pos` (a tensor, so a new position is not a new graph);
    the query attends to all `cap` slots with the ones after `pos` masked;
  - the cross-attention keys/values of the memory: per layer `(S, N, H, d_k)`, projected once
    per sentence (`memory_kv`, eagerly), the source padded to `S` with its padding masked by an
    additive bias `(S, N, 1)` (0 = attend, -inf = padding).

Attention with one query is written out (dot products, softmax, weighted sum) and projections
of at most `LOOP_ROWS` rows as a broadcast product summed over the inputs, so that Inductor
generates them as loops fused with what surrounds them instead of calling a library kernel.

`forward` is the step: embedding at `pos` -> blocks -> output projection -> log-probabilities
with the banned ids at -inf; with `greedy=True` it returns, instead, the best token and its
log-probability (the max logit minus the logsumexp: no softmax over the vocabulary is written).
Tested equal to the readable path (tests/tasks/test_static_decoding.py). `static_blocker(decoder)` says why
a decoder cannot run here (the lean step then serves it).
"""
from __future__ import annotations

import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .norm import LayerNorm, RMSNorm
from .quant import Int8Linear

__all__ = ["StaticDecoderStep", "CompiledStep", "static_blocker", "bucket", "compiled_step", "compile_disabled",
           "use_compiler", "compiler_on", "weights_digest", "step_digest", "build_package", "load_package", "flat_args"]


def bucket(n: int, least: int = 1) -> int:
    """The shape bucket of a size: the next power of two, at least `least` (few graphs, at most
    2x padding)."""
    b = least
    while b < n:
        b *= 2
    return b


def static_blocker(decoder) -> str | None:
    """Why `StaticDecoderStep` cannot run `decoder` (None when it can)."""
    from .lean import lean_blocker  # the lean step's limits are the static step's too

    reason = lean_blocker(decoder)
    if reason is not None:
        return reason
    if decoder.rope is not None:
        return "rotary positions rotate by a per-step offset: the lean step serves them"
    for layer in decoder.layers:
        a = layer.self_attn
        if a.n_kv_heads != a.n_heads:
            return "grouped-query attention: the lean step serves it"
        for norm in (layer.norm1, layer.norm2, layer.norm3):
            if not (isinstance(norm, (LayerNorm, RMSNorm)) and norm.fused):
                return "an unfused norm: the lean step serves it"
        for lin in (a.qkv_proj, a.out_proj, layer.cross_attn.qkv_proj, layer.cross_attn.out_proj,
                    layer.ffn.linear_in, layer.ffn.linear_out):
            # an Int8Linear keeps a float `weight` beside its packed int8 one: asked by its type
            if isinstance(lin, Int8Linear) or not isinstance(getattr(lin, "weight", None), torch.Tensor) \
                    or lin.weight.dtype == torch.int8:
                return "int8 projections: the lean step serves them"
    return None


def _norm(norm, x: torch.Tensor) -> torch.Tensor:
    if isinstance(norm, RMSNorm):
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.eps)
    return F.layer_norm(x, norm.weight.shape, norm.weight, norm.bias, norm.eps)


def _act(name: str, h: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return F.relu(h)
    if name == "gelu":
        return F.gelu(h)
    if name == "gelu_tanh":
        return F.gelu(h, approximate="tanh")
    gate, value = h.chunk(2, dim=-1)  # (N, d_ff) each
    return F.silu(gate) * value


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """One query per row over T keys, written out: q `(N, H, d_k)`, k and v `(T, N, H, d_k)`,
    bias `(T, N | 1, 1)` (0 or -inf) -> `(N, H, d_k)`. With a single query the products are
    dot products over d_k that Inductor fuses into two loops (no attention kernel call)."""
    scores = (k * q).sum(-1) * scale + bias  # (T, N, H)
    p = torch.softmax(scores.float(), dim=0).to(v.dtype)  # over the keys
    return (p[..., None] * v).sum(0)  # (N, H, d_k)


class StaticDecoderStep(nn.Module):
    """`forward(tokens (N,), pos (1,), self_k, self_v, cross_k, cross_v, cross_bias)` -> log-probs
    `(N, V)` (float32, banned ids at -inf), or with `greedy=True` `(best log-prob (N,), token (N,))`.

    self_k / self_v: per layer `(cap, N, H, d_k)` (slot first: the step writes one slot with an
    in-place `index_put_`); cross_k / cross_v: per layer `(S, N, H, d_k)`; cross_bias `(S, N, 1)`.
    Holds the decoder's weights `(out, in)` as they are (a few-row product is a dot product over
    each contiguous weight row; with `int8`, int8 copies with per-row scales, made once), the
    target embedding table with its scale and position rows, and the output projection.
    `new_caches(rows, cap)` makes the self-attention buffers, `memory_kv(memory)` the cross ones."""

    def __init__(self, decoder, table: torch.Tensor, scale: float, positions: torch.Tensor | None,
                 out_weight: torch.Tensor, out_bias: torch.Tensor | None, banned: tuple[int, ...],
                 int8: bool = False):
        super().__init__()
        self.int8 = int8
        self.decoder = decoder
        self.table, self.scale, self.positions = table.detach(), float(scale), positions
        self.banned = list(banned)
        a = decoder.layers[0].self_attn
        self.H, self.D = a.n_heads, a.head_dim
        self.layers = []
        for layer in decoder.layers:
            sa, ca, f = layer.self_attn, layer.cross_attn, layer.ffn
            q_dim = ca.split_sizes[0]
            cb = ca.qkv_proj.bias
            self.layers.append(dict(
                block=layer, split=sa.split_sizes, scale=sa.scale or self.D ** -0.5,
                cross_scale=ca.scale or self.D ** -0.5, act=f.activation,
                qkv=_t(sa.qkv_proj.weight, sa.qkv_proj.bias, int8), out=_t(sa.out_proj.weight, sa.out_proj.bias, int8),
                cross_q=_t(ca.qkv_proj.weight[:q_dim], None if cb is None else cb[:q_dim], int8),
                cross_kv=(ca.qkv_proj.weight[q_dim:].detach(), None if cb is None else cb[q_dim:].detach()),
                cross_split=ca.split_sizes[1:],
                cross_out=_t(ca.out_proj.weight, ca.out_proj.bias, int8),
                ffn_in=_t(f.linear_in.weight, f.linear_in.bias, int8), ffn_out=_t(f.linear_out.weight, f.linear_out.bias, int8)))
        self.out = _t(out_weight, out_bias, int8)

    def new_caches(self, rows: int, cap: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Zeroed self-attention keys and values, per layer `(cap, rows, H, d_k)`."""
        shape = (cap, rows, self.H, self.D)
        L = len(self.layers)
        return [self.table.new_zeros(shape) for _ in range(L)], [self.table.new_zeros(shape) for _ in range(L)]

    @torch.no_grad()
    def memory_kv(self, memory: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """memory `(n, S, C)` -> the cross-attention keys and values, per layer `(S, n, H, d_k)`,
        once per sentence."""
        n, S, _ = memory.shape
        ks, vs = [], []
        for p in self.layers:
            k, v = F.linear(memory, *p["cross_kv"]).split(p["cross_split"], dim=-1)  # (n, S, H d_k) each
            ks.append(k.reshape(n, S, self.H, self.D).transpose(0, 1))  # (S, n, H, d_k)
            vs.append(v.reshape(n, S, self.H, self.D).transpose(0, 1))
        return ks, vs

    def _self_attention(self, p, i: int, h, pos, self_k, self_v, self_bias):
        N = h.shape[0]
        q, k, v = _mm(h, p["qkv"]).split(p["split"], dim=-1)  # (N, H d_k) x 3
        # the new position's keys/values go into slot `pos` of this layer's buffers, in place
        self_k[i].index_put_((pos,), k.view(1, N, self.H, self.D))
        self_v[i].index_put_((pos,), v.view(1, N, self.H, self.D))
        out = _attend(q.view(N, self.H, self.D), self_k[i], self_v[i], self_bias, p["scale"])  # (N, H, d_k)
        return _mm(out.view(N, self.H * self.D), p["out"])  # (N, C): heads side by side

    def _cross_attention(self, p, i: int, h, cross_k, cross_v, cross_bias):
        N = h.shape[0]
        q = _mm(h, p["cross_q"]).view(N, self.H, self.D)  # (N, H, d_k)
        out = _attend(q, cross_k[i], cross_v[i], cross_bias, p["cross_scale"])  # (N, H, d_k)
        return _mm(out.view(N, self.H * self.D), p["cross_out"])  # (N, C)

    def _ffn(self, p, h):
        return _mm(_act(p["act"], _mm(h, p["ffn_in"])), p["ffn_out"])

    def forward(self, tokens, pos, self_k, self_v, cross_k, cross_v, cross_bias, greedy: bool = False):
        cap = self_k[0].shape[0]
        # slots after `pos` are not written yet (or hold an older decode's keys): masked
        slots = torch.arange(cap, device=tokens.device)
        self_bias = torch.where(slots <= pos, 0.0, float("-inf")).to(self_k[0].dtype).view(cap, 1, 1)  # (cap, 1, 1)
        x = F.embedding(tokens, self.table)  # (N, C)
        if self.positions is None:
            x = x * self.scale
        else:
            x = torch.add(self.positions.index_select(0, pos), x, alpha=self.scale)  # (N, C)
        for i, p in enumerate(self.layers):
            b = p["block"]
            if b.norm_first:
                x = x + self._self_attention(p, i, _norm(b.norm1, x), pos, self_k, self_v, self_bias)
                x = x + self._cross_attention(p, i, _norm(b.norm2, x), cross_k, cross_v, cross_bias)
                x = x + self._ffn(p, _norm(b.norm3, x))
            else:
                x = _norm(b.norm1, x + self._self_attention(p, i, x, pos, self_k, self_v, self_bias))
                x = _norm(b.norm2, x + self._cross_attention(p, i, x, cross_k, cross_v, cross_bias))
                x = _norm(b.norm3, x + self._ffn(p, x))
        if self.decoder.norm is not None:
            x = _norm(self.decoder.norm, x)
        logits = _mm(x, self.out).float()  # (N, V)
        if not greedy:  # normalised over every id, then the banned ones out (as the lean step)
            logp = F.log_softmax(logits, dim=-1)
            logp[:, self.banned] = float("-inf")
            return logp
        lse = torch.logsumexp(logits, -1)  # (N,)
        logits[:, self.banned] = float("-inf")
        best, tok = logits.max(-1)  # (N,): the argmax needs no softmax
        return best - lse, tok  # and its log-probability


def _t(weight: torch.Tensor, bias: torch.Tensor | None, int8: bool = False) -> tuple:
    """A projection as `(W (out, in) contiguous, bias)`, detached: read by `_mm`. With `int8`:
    `(W in int8, per-output-channel scale (out,), bias)` (weight-only int8, symmetric: each
    row's largest magnitude is 127), a quarter of the bytes a batch-1 step reads."""
    w = weight.detach().contiguous()
    b = None if bias is None else bias.detach()
    if not int8:
        return w, b
    scale = (w.float().abs().amax(1) / 127.0).clamp(min=1e-12)  # (out,)
    q = torch.round(w.float() / scale[:, None]).clamp(-127, 127).to(torch.int8)  # (out, in)
    return q, scale.to(weight.dtype), b


# Up to this many rows a projection is written as a broadcast product summed over `in`, which
# Inductor turns into its own vectorised loop (each output a dot product over a contiguous row of
# the weight) fused with the bias and what follows, instead of a call into the BLAS library
# (measured: benchmarks/static_decode.py); 0 turns it off.
LOOP_ROWS = 4


def _mm(x: torch.Tensor, wb) -> torch.Tensor:
    """x `(N, in)` times a projection from `_t` -> `(N, out)`."""
    if len(wb) == 3:  # weight-only int8: the int8 -> float conversion fused into the product
        q, scale, b = wb
        if x.shape[0] <= LOOP_ROWS:
            y = (x[:, None, :] * q.to(x.dtype)).sum(-1) * scale  # (N, 1, in) * (out, in) -> (N, out)
        else:
            y = F.linear(x, q.to(x.dtype)) * scale
        return y if b is None else y + b
    w, b = wb
    if x.shape[0] <= LOOP_ROWS:  # a static shape: decided once, when the graph is traced
        y = (x[:, None, :] * w).sum(-1)  # (N, 1, in) * (out, in) summed over in -> (N, out)
        return y if b is None else y + b
    return F.linear(x, w, b)


# ---- compiled steps, cached per (model digest, compute type, capacity bucket) -----------------

# Each entry: the step module, its torch.compile'd function and, per shape bucket seen, the
# seconds its first call took (the one-time compile). Dynamo compiles one graph per bucket of
# (rows, capacity, source length); an entry per model and capacity bucket keeps its guards simple.
_COMPILED: dict = {}
_MAX_ENTRIES = 8  # models a process keeps compiled steps for (the oldest is dropped)
_disabled: list[str] = []  # why compiling failed here, once: every later decode runs the lean step


def weights_digest(module: nn.Module) -> tuple:
    """Identity and in-place-update count of a module's weights: a static step holds copies of
    the weights it saw (int8) or was compiled for, so a training step after it needs a new one."""
    return (id(module), sum(p._version for p in module.parameters()))


def compiled_step(key: tuple, build, owner: nn.Module, store=None) -> "CompiledStep":
    """The `CompiledStep` of `key` = (weights digest of `owner`, compute type, capacity bucket),
    made with `build()` -> `StaticDecoderStep` the first time; `store(module)` -> its package
    store (`CompiledStep`), or None. An entry remembers its owner
    weakly: a new model that reuses a freed one's `id` (and weight versions) gets its own."""
    key = (*key, _use_compiler[0])
    entry = _COMPILED.get(key)
    if entry is None or entry.owner() is not owner:
        if entry is None and len(_COMPILED) >= _MAX_ENTRIES:
            _COMPILED.pop(next(iter(_COMPILED)))
        module = build()
        entry = _COMPILED[key] = CompiledStep(module, None if store is None else store(module))
        entry.owner = weakref.ref(owner)
    return entry


_use_compiler = [True]


def use_compiler(enabled: bool = True) -> bool:
    """Compile the static step (the default), or run the same step eagerly (tests of its logic
    in seconds; a machine where compiling is not wanted). Returns the previous setting; steps
    made before keep theirs."""
    previous = _use_compiler[0]
    _use_compiler[0] = bool(enabled)
    return previous


def compiler_on() -> bool:
    """Whether new static steps are compiled (`use_compiler`)."""
    return _use_compiler[0]


def compile_disabled() -> str | None:
    """Why the compiled step is off in this process (a compile failed), else None."""
    return _disabled[0] if _disabled else None


def step_digest(module: "StaticDecoderStep") -> str:
    """sha256 of everything a compiled step bakes in: the weights it holds (their bytes), the
    decoder's layout (`repr`: sizes, norms, eps), the banned ids, int8, this module's source, and
    the torch version and CPU capability the code is generated for. The name of its artefacts in a cache shared by
    processes (an entry in `_COMPILED` is per process and keyed by identity instead)."""
    import hashlib

    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())  # the step's code: a change to it is a new graph
    h.update(f"{LOOP_ROWS}|{torch.__version__}|{torch.backends.cpu.get_cpu_capability()}|{module.int8}|{module.banned}|"
             f"{module.scale}|{module.H}x{module.D}|{module.decoder!r}".encode())
    tensors = [module.table, module.positions, *module.out]
    for p in module.layers:
        tensors += [*p["qkv"], *p["out"], *p["cross_q"], *p["cross_kv"], *p["cross_out"], *p["ffn_in"], *p["ffn_out"]]
    tensors += [t for t in module.decoder.state_dict().values()]  # the norms' weights too
    for t in tensors:
        if t is not None:
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class _Flat(nn.Module):
    """The step with flat tensor arguments (what `torch.export` and the AOTInductor runner take):
    tokens, pos, then per layer self K, self V, cross K, cross V (each list L long), the bias."""

    def __init__(self, step: "StaticDecoderStep", greedy: bool):
        super().__init__()
        self.step, self.greedy, self.L = step, greedy, len(step.layers)

    def forward(self, *flat):
        L = self.L
        tokens, pos, rest, bias = flat[0], flat[1], flat[2:-1], flat[-1]
        return self.step(tokens, pos, list(rest[:L]), list(rest[L:2 * L]), list(rest[2 * L:3 * L]),
                         list(rest[3 * L:]), bias, greedy=self.greedy)


def flat_args(tokens, pos, self_k, self_v, cross_k, cross_v, cross_bias) -> list:
    return [tokens, pos, *self_k, *self_v, *cross_k, *cross_v, cross_bias]


def build_package(step: "StaticDecoderStep", args: tuple, greedy: bool, path) -> None:
    """Export the step at the shapes of `args` and compile it ahead of time (AOTInductor) into the
    package file `path` (`.pt2`: the generated C++ as a shared library, the weights as constants)."""
    import warnings

    flat = tuple(flat_args(*args))
    with warnings.catch_warnings():  # export's notes on the lifted weight constants are not for the user
        warnings.simplefilter("ignore")
        program = torch.export.export(_Flat(step, greedy), flat, strict=False)
        torch._inductor.aoti_compile_and_package(program, package_path=str(path))


def load_package(path):
    """The callable of a package from `build_package`: `runner(*flat_args(...))`."""
    return torch._inductor.aoti_load_package(str(path))


def _package_name(shapes: tuple, greedy: bool) -> str:
    return "x".join(map(str, shapes)) + ("-greedy" if greedy else "-logp")  # e.g. 1x64x32-greedy


class CompiledStep:
    """A `StaticDecoderStep` compiled ahead of time, one AOTInductor package per shape bucket and
    mode (greedy / log-probs): the step is exported (`torch.export`, static shapes) and Inductor
    generates one C++ function with the weights as constants, called through a C++ runner. Over
    `torch.compile` this removes the per-call Dynamo guards on the ~60 tensors the step reads and
    the Python runtime wrapper (measured 1.6-2x per step at batch 1: docs/speed.md).

    `store(name, build)` -> the package's path: where packages live between processes (the
    translation layer keeps them in a verified cache folder named by `step_digest`); None: a
    temporary folder, per process. `compile_seconds[(shapes, greedy)]`: the wall time of each
    bucket's build, or of its load when a stored package was found (`loaded` says which)."""

    def __init__(self, module: StaticDecoderStep, store=None):
        self.module = module
        self.compiled = _use_compiler[0]
        self.store = store
        self.runners: dict = {}
        self.compile_seconds: dict = {}
        self.loaded: dict = {}  # (shapes, greedy) -> True when the package came from the store
        self.owner = lambda: None  # the model it was built from (a weakref, set by `compiled_step`)

    def _runner(self, shapes: tuple, args: tuple, greedy: bool, build: bool):
        import tempfile

        name = _package_name(shapes, greedy)
        built = []

        def make(path):
            build_package(self.module, args, greedy, path)
            built.append(True)

        if self.store is not None:
            path = self.store(name, make if build else None)
        elif build:
            path = Path(tempfile.mkdtemp(prefix="scratchformer-step-")) / f"{name}.pt2"
            make(path)
        else:
            path = None
        if path is None:
            return None
        self.loaded[(shapes, greedy)] = not built
        return load_package(path)

    def stored(self, shapes: tuple, greedy: bool) -> bool:
        """Whether a step of these shapes is ready without compiling: warmed in this process, or
        its package stored whole (the eager step: warmed, as a compiled one would be)."""
        if (shapes, greedy) in self.runners:
            return True
        if not self.compiled:
            return False
        return self.store is not None and self.store(_package_name(shapes, greedy), None) is not None

    def warm(self, shapes: tuple, *args, greedy: bool, build: bool = True) -> bool:
        """Build (or load) the package of these shapes unless done already (`build=False`: load
        a stored one only; False when there is none). False, with one warning line, when the
        compiler fails here (no C++ compiler, a kernel missing): the caller runs the lean step."""
        import time
        import warnings

        key = (shapes, greedy)
        if key in self.runners:
            return True
        if not self.compiled:  # the same step, eagerly (tests of its logic in seconds)
            flat = _Flat(self.module, greedy)
            self.runners[key] = flat
            return True
        if _disabled:
            return False
        t0 = time.perf_counter()
        try:
            runner = self._runner(shapes, args, greedy, build)
            if runner is None:
                return False
            self.runners[key] = runner
        except Exception as e:  # noqa: BLE001  any compiler failure: fall back, say why once
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            _disabled.append(f"{type(e).__name__}: {first}")
            warnings.warn(f"the compiled decoding step is off (compiling it failed: {_disabled[0]}); "
                          "decoding runs the lean step", RuntimeWarning, stacklevel=2)
            return False
        self.compile_seconds[key] = time.perf_counter() - t0
        return True

    def __call__(self, shapes: tuple, greedy: bool, args: tuple):
        """One step: log-probs `(N, V)`, or `(best (N,), token (N,))` (a bucket not warmed yet
        is warmed first)."""
        runner = self.runners.get((shapes, greedy))
        if runner is None:
            if not self.warm(shapes, *args, greedy=greedy):
                raise RuntimeError(f"the compiled decoding step is off: {compile_disabled()}")
            runner = self.runners[(shapes, greedy)]
        return runner(*flat_args(*args))
