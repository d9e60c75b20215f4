"""The static compiled step behind the search's stepper interface (`nn/static.py` is the step
itself): which decodes take it (`static_path`), its shape buckets and whether one is ready
(`static_bucket`), where its AOTInductor packages live between processes (`_package_store`), and
`_StaticStepper`, the stepper that runs it. `decoding._stepper` asks `static_stepper` first."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from ...data.tokenizers import PAD_ID
from ...nn import static
from .decode_config import _BANNED, DecodeConfig, length_limits


def static_stepper(model, src: torch.Tensor, cfg: DecodeConfig, capacity: int, expand: int = 1):
    """The `_StaticStepper` of this decode, or None when the lean step serves it (`static_path`
    says no; under auto, its bucket is not ready; the compiler failed here)."""
    if static_path(model, cfg) is not None:
        return None
    try:
        return _StaticStepper.make(model, src, capacity, expand=expand, int8=cfg.static_int8,
                                   build=cfg.static == "on")
    except Exception as e:  # noqa: BLE001  auto is the default: a step that cannot be built must not stop decoding
        if cfg.static != "auto":
            raise
        _warn_once(f"the static decoding step could not be built ({type(e).__name__}: "
                   f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}); decoding runs the lean step")
        return None


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


__all__ = ["static_stepper", "static_path", "static_bucket"]
