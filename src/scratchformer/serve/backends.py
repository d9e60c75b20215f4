"""What the server serves: one `Served` per run (or exported folder), over the tasks' inference
objects, found through the faces (tasks/faces.py): a run folder is opened by its task's `load`,
an export folder by its task's export `runtime` (export.json names both), a pretrained encoder by
the embed face's `load`.

Serve keeps its own table of backends by task name (`BACKENDS`, filled from each backend's
`task`; `register_backend` adds one for a task registered from outside): a backend says which
routes it answers (`routes`: HTTP stays here, not in tasks/), counts tokens (for the input limit
and the batcher's budget) and computes a whole batch of inputs at once. It knows HTTP not at
all; the app (app.py) knows no model internals.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from ..errors import UserError

CLASSIFY, TRANSLATE, EMBEDDINGS, COMPLETIONS = "/v1/classify", "/v1/translate", "/v1/embeddings", "/v1/completions"
TORCH = "torch"  # the `--backend` of run folders (our own inference objects)
log = logging.getLogger("scratchformer.serve")


class Served:
    """Base of every backend. `name` is what requests put in "model"; `model` is the task's
    inference object (its face's `load` of a run folder unless given: an export's runtime)."""

    task: str = ""
    routes: tuple[str, ...] = ()
    page: bool = False  # a run folder's backend loads its attention page at start
    weights: dict | None = None  # what /v1/models says of the weights served (weights.identity)
    reopen: Callable[[], "Served"] | None = None  # a fresh load of the same source (reload)

    takes_device = False  # whether its task's `load` takes a `device` (translation's does)

    def __init__(self, name: str, source, compute_type: str | None = None, quantize: str | None = None, *,
                 model: Any = None, engine: str = TORCH, device: str | None = None):
        from ..tasks.faces import face

        self.name, self.source, self.engine = name, str(source), engine
        self._attention: Any = UserError("an export is served without its run's attention page")
        if model is None:
            refuse_device(type(self), device)
            where = {"device": device} if device is not None and self.takes_device else {}
            model = face(self.task).load(source, compute_type=compute_type, quantize=quantize, **where)
            if self.page:
                self._attention = _inspector(Path(source))
        self.model = model

    def prepare(self, cfg, compile: bool = True) -> None:
        """Called once the model is loaded, before the server says ready (`compile=False`: a
        reload, beside running requests): what a backend does ahead of its first request."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        raise NotImplementedError

    def tokenize(self, texts: list[str]) -> tuple[list[str], list[int]]:
        """(the texts as the batch will read them, their token counts) for the input limit. A
        model that can carry its ids gives texts holding them (`Tokenized`), so a request is
        tokenized once, here; the others count now and tokenize again in the batch."""
        tokenize = getattr(self.model, "tokenize", None)
        if tokenize is not None:
            carried = tokenize(texts)
            return carried, [t.n_tokens for t in carried]
        return texts, self.count_tokens(texts)

    def truncate(self, text: str, limit: int) -> str:
        """The longest prefix of `text` with at most `limit` tokens (binary search over
        characters through `count_tokens`, so it holds for every tokenizer)."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.count_tokens([text[:mid]])[0] <= limit:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo]

    def describe(self) -> dict[str, Any]:
        out = {"id": self.name, "object": "model", "owned_by": "scratchformer", "task": self.task,
               "routes": list(self.routes), "source": self.source, "weights": self.weights}
        return out if self.engine == TORCH else {**out, "backend": self.engine}

    # batch entry points (only those of `routes` are called)
    def classify(self, texts: list[str], key: Hashable) -> list[dict]:
        raise NotImplementedError

    def embed(self, texts: list[str], key: Hashable) -> list[list[float]]:
        raise NotImplementedError

    def translate(self, texts: list[str], key: Hashable) -> list[str]:
        raise NotImplementedError

    @property
    def has_attention_page(self) -> bool:
        """A run folder of a task with a page, served with torch (the page may still say why not)."""
        return self.page and self.engine == TORCH

    def attention_page(self, text: str) -> str:
        from ..diagnostics.attention_html import page

        if isinstance(self._attention, UserError):
            raise UserError(f"model {self.name!r} has no attention page: {self._attention}")
        if self._attention is None:
            raise UserError(f"model {self.name!r} has no attention page")
        return page(self._attention.attention(text))


def _inspector(run_dir: Path):
    """The attention inspector of a run, loaded with the model at start (never at a first
    request: the folder may hold another training by then, and a name serves one model)."""
    from ..diagnostics import inspection

    try:
        return inspection.load(run_dir)
    except UserError as e:  # served without a page; the page route says why
        return e


def _probs_rows(labels: list[str], probs) -> list[dict]:
    return [{"label": labels[int(p.argmax())], "score": float(p.max()),
             "probs": {lab: float(x) for lab, x in zip(labels, p)}} for p in probs]


class ClassifierBackend(Served):
    """A classifier: /v1/classify (with the run's blend when it has one) and /v1/embeddings (the
    pooled encoder output, L2-normalised)."""

    task, routes, page = "classify", (CLASSIFY, EMBEDDINGS), True

    @property
    def clf(self):
        return self.model

    @property
    def labels(self) -> list[str]:
        return list(self.model.labels)

    def count_tokens(self, texts):
        return self.model.count_tokens(texts)

    def classify(self, texts, key):
        return _probs_rows(self.labels, self.model.predict_proba(texts, batch_size=max(len(texts), 1)))

    def embed(self, texts, key):
        return self.model.embed(texts, batch_size=max(len(texts), 1)).tolist()

    def describe(self):
        return {**super().describe(), "labels": self.labels}


class TranslatorBackend(Served):
    """A translator: /v1/translate, requests batched together when their decoding settings agree.

    Its decoding path (`prepare`, from the server's `decode` setting): the static compiled step
    (nn/static.py) where the translator can run it, its batch-1 shape buckets compiled before the
    server says ready; a batch whose bucket is not compiled runs the lean step (no request pays a
    6-9 s compile, and torch.compile, which is not thread-safe, never runs beside a request).
    /v1/models says the path, why, the buckets compiled and what the compute type resolved to."""

    task, routes, page, takes_device = "translate", (TRANSLATE,), True, True
    _static = False  # decode through the static step (its compiled buckets); set by `prepare`
    _decode: dict | None = None  # what /v1/models says of the decoding path

    @property
    def tr(self):
        return self.model

    def prepare(self, cfg, compile: bool = True) -> None:
        asked = cfg.decode
        if self.engine != TORCH:
            self._decode = {"asked": asked, "path": self.engine, "why": f"an export runs on its engine ({self.engine})"}
            return
        if asked == "lean":
            self._static, self._decode = False, {"asked": asked, "path": "lean", "why": "--decode lean was asked for"}
            return
        why = self.model.static_blocker()
        if why is not None:
            if asked == "static":
                raise UserError(f"model {self.name!r} cannot decode through the static step ({why}); serve it "
                                "with --decode auto (the lean step, said in /v1/models) or --decode lean")
            log.info("%s: decoding runs the lean step (%s)", self.name, why)
            self._static, self._decode = False, {"asked": asked, "path": "lean", "why": why}
            return
        if not compile:
            why = ("loaded by a reload while serving: the static step compiles only before the server is ready "
                   "(torch.compile is not thread-safe beside running requests); restart to compile")
            self._static, self._decode = False, {"asked": asked, "path": "lean", "why": why}
            return
        beams = cfg.compile_beams or (1, self.model.recipe.decode.beam)
        t0 = time.perf_counter()
        try:
            rows = self.model.warm_static(beams, cfg.compile_tokens, cfg.compile_sentences) if cfg.compile_tokens else []
        except Exception as e:  # noqa: BLE001 - not the compiler (that is a row below): serve lean, say why in one line
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            rows = [{"path": "lean", "why": f"the static step failed before its compile ({type(e).__name__}: {first})"}]
        seconds = round(time.perf_counter() - t0, 1)
        if not rows:
            why = "--compile-tokens 0: no bucket was compiled, so every batch runs the lean step"
            self._static, self._decode = False, {"asked": asked, "path": "lean", "why": why}
            return
        failed = [r for r in rows if r["path"] != "static"]
        if failed:  # one line, never a traceback; every batch runs the lean step
            log.warning("%s: decoding runs the lean step (%s)", self.name, failed[0]["why"])
            self._static, self._decode = False, {"asked": asked, "path": "lean", "why": failed[0]["why"]}
            return
        log.info("%s: the static decoding step compiled for %d buckets (batches of %s sentences, beams %s, sources "
                 "up to %d tokens) in %.1f s", self.name, len(rows), ", ".join(map(str, cfg.compile_sentences)),
                 ", ".join(map(str, dict.fromkeys(beams))), cfg.compile_tokens, seconds)
        self._static = True
        self._decode = {"asked": asked, "path": "static",
                        "why": "the static compiled step; a batch whose shape bucket was not compiled at start runs "
                               "the lean step (per rows bucket below)",
                        "compiled": [{k: r[k] for k in ("beam", "rows", "target_positions", "source_positions",
                                                        "compute_type", "seconds")} for r in rows],
                        "compile_seconds": seconds}

    def describe(self):
        out = super().describe()
        if self.engine != TORCH:
            return out
        decode = self._decode or {"asked": None, "path": "lean", "why": "not prepared by a server (prepare() not called)"}
        return {**out, "decode": decode, "compute": self.model.decode_record()}

    def count_tokens(self, texts):
        return self.model.count_tokens(texts)

    def decode_key(self, beam: int | None, max_length: int | None) -> tuple:
        """The batch key: requests share a batch only with the same decoding settings. Checked
        here (a bad value is the request's fault, found before it joins a batch)."""
        cfg = self.model.decode_config(beam=beam, max_output_len=max_length)
        return (cfg.beam, cfg.max_output_len)

    def translate(self, texts, key):
        beam, max_len = key
        if self._static:
            return self.model.translate(texts, beam=beam, max_output_len=max_len, static=True, cold="lean")
        # --decode lean (or a model the step cannot run): our translator is told so (its default,
        # decode.static=auto, would take a package another process built); an export's runtime has no such knob
        lean = {"static": "off"} if hasattr(self.model, "decode_path") else {}
        return self.model.translate(texts, beam=beam, max_output_len=max_len, **lean)


class LanguageModelBackend(Served):
    """A language model: /v1/completions. Generation is not batched across requests; each
    stream runs in its own worker thread, so concurrent streams interleave instead of queueing."""

    task, routes = "lm", (COMPLETIONS,)

    @property
    def lm(self):
        return self.model

    def count_tokens(self, texts):
        return [self.model.count_tokens(t) for t in texts]

    def check(self, prompt: str, temperature: float, top_k, top_p, max_tokens: int, seed=None) -> None:
        """Every sampler value range-checked before a stream starts (a UserError: the app's 422)."""
        from ..tasks.lm.sampling import check_sampling

        check_sampling(temperature, top_k, top_p, seed=seed, max_new_tokens=max_tokens)
        self.model.encode_prompt(prompt)  # an export samples as its run does (top_k, top_p): nothing more to refuse

    def generate(self, prompt: str, max_tokens: int, temperature: float, top_k, top_p, seed,
                 on_piece: Callable[[str], None]) -> str:
        return self.model.generate(prompt, max_new_tokens=max_tokens, temperature=temperature, top_k=top_k,
                                   top_p=top_p, seed=seed, stream=on_piece, warn=lambda m: None)


class PretrainedEmbedder(Served):
    """A pretrained BERT sentence encoder (`minilm`, or a folder with config.json +
    model.safetensors), as `scratchformer embed --model` loads it: /v1/embeddings."""

    task, routes = "embed", (EMBEDDINGS,)

    def __init__(self, name: str, source: str, compute_type: str | None = None, quantize: str | None = None, **kw):
        super().__init__(name, source, compute_type, quantize, **kw)
        self.encoder, self.tok = self.model

    def count_tokens(self, texts):
        return [len(self.tok.encode(t, add_special_tokens=False)) for t in texts]

    def embed(self, texts, key):
        return self.encoder.embed(texts, self.tok, batch_size=max(len(texts), 1)).tolist()


# task name -> the backend that serves it (from each backend's own `task`: no hand-kept table)
BACKENDS: dict[str, type[Served]] = {b.task: b for b in (ClassifierBackend, TranslatorBackend,
                                                          LanguageModelBackend, PretrainedEmbedder)}


def register_backend(cls: type[Served]) -> type[Served]:
    """Serve a task registered from outside (tasks.faces.register) with `cls` (its `task` names
    it); usable as a class decorator."""
    if not (isinstance(cls, type) and issubclass(cls, Served) and cls.task):
        raise TypeError("register_backend takes a Served subclass with a `task`")
    BACKENDS[cls.task] = cls
    return cls


def routes_of(task: str) -> tuple[str, ...]:
    """The routes a model of `task` answers when served (none: serve has no backend for it)."""
    return BACKENDS[task].routes if task in BACKENDS else ()


def OnnxClassifierBackend(name: str, folder: Path) -> Served:  # noqa: N802 - a class until 0.x; kept as a name
    """Deprecated: `load_backend(ModelSpec(name, folder))` opens any export through its task."""
    return _open_export(ModelSpec(name, str(folder)), None, None, None)


Ct2TranslatorBackend = OnnxClassifierBackend  # deprecated likewise: an export is opened by its export.json


@dataclass
class ModelSpec:
    """One `serve` argument: `[NAME=]RUN_DIR` (or a pretrained embedder's name)."""

    name: str
    source: str


def parse_specs(args: Sequence[str]) -> list[ModelSpec]:
    specs, seen = [], set()
    for a in args:
        name, sep, source = a.partition("=")
        if not sep or "/" in name or not name:
            name, source = Path(a.rstrip("/")).name or a, a
        if name in seen:
            raise UserError(f"two models are named {name!r}: name them, e.g. {name}2={source}")
        seen.add(name)
        specs.append(ModelSpec(name, source))
    if not specs:
        raise UserError("give at least one run directory to serve")
    return specs


def load_backend(spec: ModelSpec, backend: str | None = None, compute_type: str | None = None,
                 quantize: str | None = None, attempts: int = 3, device: str | None = None) -> Served:
    """The backend for one spec, by the run's task (config.json), an export folder
    (export.json), or a pretrained encoder's name. `compute_type` (auto, float32, bfloat16, int8;
    None: each task's default): what the torch backends load with (the load APIs' `compute_type=`;
    `quantize="int8"` its deprecated spelling; an export is served as exported: a compute type or
    a `backend` that is not its format's engine is refused). `backend` None: each source's own.

    One model per name: the folder's identity (weights.identity) is taken before and after the
    load, and a load during which the folder changed is tried again; the backend records the
    identity it was loaded from (`weights`) and how to load its source again (`reopen`).
    `device` (None: the CPU): where a run folder's model computes (`check_device` says which
    sources can take one)."""
    from .weights import identity

    for _ in range(attempts):
        before = identity(spec.source)
        served = _open_backend(spec, backend, compute_type, quantize, device)
        after = identity(spec.source)
        if before == after:
            served.weights = after
            served.reopen = lambda: load_backend(spec, backend, compute_type, quantize, attempts, device)
            return served
    raise UserError(f"{spec.source} changed while it was being loaded ({attempts} tries): is a training writing "
                    "into it? Serve it once the training has finished")


def _open_backend(spec: ModelSpec, backend: str | None, compute_type: str | None, quantize: str | None,
                  device: str | None = None) -> Served:
    path = Path(spec.source)
    check_device(path, device)
    if (path / "export.json").is_file():
        return _open_export(spec, backend, compute_type, quantize)
    if backend not in (None, TORCH):
        formats = [f"--format {fmt}" for f in _all_faces() for fmt, e in f.exports.items() if e.backend == backend]
        raise UserError(f"{path} is not an export for --backend {backend} (no export.json): run "
                        f"`scratchformer export {path} {' or '.join(dict.fromkeys(formats)) or '--format ...'} --out DIR` "
                        "and serve DIR (run folders are served without --backend)")
    if not path.exists() and "/" not in spec.source:
        return PretrainedEmbedder(spec.name, spec.source, compute_type, quantize)  # e.g. `minilm`
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file() and not _is_run(path):
        return PretrainedEmbedder(spec.name, spec.source, compute_type, quantize)  # a Hugging Face BERT folder
    from ..tasks.faces import task_of

    check_finished(path)
    face = task_of(path)
    if face.name not in BACKENDS:
        raise UserError(f"{path} holds a {face.name!r} run, which has no serve routes; serve knows "
                        f"{', '.join(sorted(BACKENDS))} runs")
    return BACKENDS[face.name](spec.name, path, compute_type, quantize, device=device)


def refuse_device(cls: type[Served], device: str | None) -> None:
    """A device other than the CPU for a backend whose task's `load` takes none: one line."""
    if device not in (None, "cpu") and not cls.takes_device:
        from ..tasks.faces import words

        raise UserError(f"--device {device}: {words(cls.task)} is served on the CPU so far (translation runs take "
                        "--device); leave --device out or give --device cpu")


def check_device(path: Path, device: str | None) -> None:
    """Whether the source at `path` can be served on `device` (None and "cpu" always can): an
    export runs on its engine as exported, and only a task whose `load` takes a device (a
    translation run) moves to another; else one line. Whether the device exists here is the
    command's check (`train.device`, the one message every verb gives)."""
    if device in (None, "cpu"):
        return
    if (path / "export.json").is_file():
        raise UserError(f"--device {device} does not apply to {path}: an export runs on the CPU under its engine, as it "
                        "was exported; leave --device out, or serve the run folder")
    if not _is_run(path):  # a pretrained encoder's name or folder
        refuse_device(PretrainedEmbedder, device)
        return
    from ..tasks.faces import task_of

    task = task_of(path).name
    if task in BACKENDS:
        refuse_device(BACKENDS[task], device)


def _all_faces():
    from ..tasks.faces import faces

    return faces().values()


def _open_export(spec: ModelSpec, backend: str | None, compute_type: str | None, quantize: str | None) -> Served:
    """An export folder, as its export.json says: its task's backend over its format's runtime.
    A --backend other than the format's engine, or a --compute-type (an export runs as it was
    exported), is refused in one line before anything is loaded."""
    from ..tasks.export_folder import require_complete

    path = Path(spec.source)
    face, fmt, export = check_source(path, backend, compute_type, quantize)
    if face.name not in BACKENDS:
        raise UserError(f"{path} holds an export of {face.words}, which has no serve routes; serve knows "
                        f"{', '.join(sorted(BACKENDS))} models")
    require_complete(path, export.backend)
    return BACKENDS[face.name](spec.name, path, model=export.runtime(path), engine=export.backend)


def check_source(path: Path, backend: str | None, compute_type: str | None, quantize: str | None):
    """For an export folder, (face, format, Export) once what serve was asked for applies to it: a
    format serve runs, the --backend of its engine (or none), no --compute-type (an export runs as
    it was exported); else one line. None for any other source. `serve` checks every argument so
    before the server starts."""
    from ..tasks.faces import exported_by

    if not (path / "export.json").is_file():
        return None
    face, fmt, export = exported_by(path)
    if not export.backend:
        served: dict[str, list[str]] = {}  # format -> the runs whose export of it serve runs
        for g in _all_faces():
            for name, e in g.exports.items():
                if e.backend:
                    served.setdefault(name, []).append(g.noun)
        shown = " and ".join(f"--format {name} ({' and '.join(nouns)} runs)" for name, nouns in served.items())
        raise UserError(f"{path} holds a {fmt!r} export of {face.words}, which serve does not run (its README.md "
                        f"says how to load it); serve runs run folders and the exports {shown}")
    if backend not in (None, export.backend):
        raise UserError(f"{path} is the {fmt} export of {face.words}, which runs under --backend {export.backend}, "
                        f"not {backend}: leave --backend out or give --backend {export.backend}")
    if compute_type is not None or quantize not in (None, "none"):
        given = f"--compute-type {compute_type}" if compute_type is not None else f"--quantize {quantize}"
        raise UserError(f"{given} does not apply to {path}: an export runs as it was exported; leave it out, "
                        "or serve the run folder to choose what it computes in")
    return face, fmt, export


def check_finished(path: Path) -> None:
    """A run still training, or interrupted, is refused with one line saying `--resume` finishes it."""
    from ..tasks.runs import require_finished

    require_finished(path)


def _is_run(path: Path) -> bool:
    try:
        return "task" in json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False
