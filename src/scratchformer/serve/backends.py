"""What the server serves: one `Served` per run (or exported folder), over the tasks' public
inference API (`Classifier`, `Translator`, `LanguageModel`, `interop.hf_bert`, an ONNX export).

A backend says which routes it answers (`routes`), counts tokens (for the input limit and the
batcher's budget) and computes a whole batch of inputs at once. It knows HTTP not at all; the
app (app.py) knows no model internals.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from ..errors import UserError

CLASSIFY, TRANSLATE, EMBEDDINGS, COMPLETIONS = "/v1/classify", "/v1/translate", "/v1/embeddings", "/v1/completions"


class Served:
    """Base of every backend. `name` is what requests put in "model"."""

    task: str = ""
    routes: tuple[str, ...] = ()
    weights: dict | None = None  # what /v1/models says of the weights served (weights.identity)
    reopen: Callable[[], "Served"] | None = None  # a fresh load of the same source (reload)

    def __init__(self, name: str, source: str):
        self.name, self.source = name, source

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        raise NotImplementedError

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
        return {"id": self.name, "object": "model", "owned_by": "scratchformer", "task": self.task,
                "routes": list(self.routes), "source": self.source, "weights": self.weights}

    # batch entry points (only those of `routes` are called)
    def classify(self, texts: list[str], key: Hashable) -> list[dict]:
        raise NotImplementedError

    def embed(self, texts: list[str], key: Hashable) -> list[list[float]]:
        raise NotImplementedError

    def translate(self, texts: list[str], key: Hashable) -> list[str]:
        raise NotImplementedError

    def attention_page(self, text: str) -> str:
        raise UserError(f"model {self.name!r} has no attention page")


def _inspector(run_dir: Path):
    """The attention inspector of a run, loaded with the model at start (never at a first
    request: the folder may hold another training by then, and a name serves one model)."""
    from ..diagnostics import inspection

    try:
        return inspection.load(run_dir)
    except UserError as e:  # served without a page; the page route says why
        return e


class _WithAttention(Served):
    """A torch backend with the offline attention page of its run (loaded at start)."""

    _attention: Any = None

    def attention_page(self, text: str) -> str:
        from ..diagnostics.attention_html import page

        if isinstance(self._attention, UserError):
            raise UserError(f"model {self.name!r} has no attention page: {self._attention}")
        return page(self._attention.attention(text))


def _probs_rows(labels: list[str], probs) -> list[dict]:
    return [{"label": labels[int(p.argmax())], "score": float(p.max()),
             "probs": {lab: float(x) for lab, x in zip(labels, p)}} for p in probs]


class ClassifierBackend(_WithAttention):
    """A classify run: /v1/classify (with the run's blend when it has one) and /v1/embeddings
    (the pooled encoder output, L2-normalised)."""

    task, routes = "classify", (CLASSIFY, EMBEDDINGS)

    def __init__(self, name: str, run_dir: Path, compute_type: str | None = None, quantize: str | None = None):
        from ..tasks.classify import Classifier

        super().__init__(name, str(run_dir))
        self.run_dir = run_dir
        self.clf = Classifier.load(run_dir, compute_type=compute_type, quantize=quantize)
        self.labels = list(self.clf.labels)
        self._attention = _inspector(run_dir)

    def count_tokens(self, texts):
        return self.clf.count_tokens(texts)

    def classify(self, texts, key):
        return _probs_rows(self.labels, self.clf.predict_proba(texts, batch_size=max(len(texts), 1)))

    def embed(self, texts, key):
        return self.clf.embed(texts, batch_size=max(len(texts), 1)).tolist()

    def describe(self):
        return {**super().describe(), "labels": self.labels}


class TranslatorBackend(_WithAttention):
    task, routes = "translate", (TRANSLATE,)

    def __init__(self, name: str, run_dir: Path, compute_type: str | None = None, quantize: str | None = None):
        from ..tasks.translate import Translator

        super().__init__(name, str(run_dir))
        self.run_dir = run_dir
        self.tr = Translator.load(run_dir, compute_type=compute_type, quantize=quantize)
        self._attention = _inspector(run_dir)

    def count_tokens(self, texts):
        return self.tr.count_tokens(texts)

    def decode_key(self, beam: int | None, max_length: int | None) -> tuple:
        """The batch key: requests share a batch only with the same decoding settings. Checked
        here (a bad value is the request's fault, found before it joins a batch)."""
        cfg = self.tr.decode_config(beam=beam, max_output_len=max_length)
        return (cfg.beam, cfg.max_output_len)

    def translate(self, texts, key):
        beam, max_len = key
        return self.tr.translate(texts, beam=beam, max_output_len=max_len)


class LanguageModelBackend(Served):
    """A language-model run: /v1/completions. Generation is not batched across requests; each
    stream runs in its own worker thread, so concurrent streams interleave instead of queueing."""

    task, routes = "lm", (COMPLETIONS,)

    def __init__(self, name: str, run_dir: Path, compute_type: str | None = None, quantize: str | None = None):
        from ..tasks.lm import LanguageModel

        super().__init__(name, str(run_dir))
        self.lm = LanguageModel.load(run_dir, compute_type=compute_type, quantize=quantize)

    def count_tokens(self, texts):
        return [self.lm.count_tokens(t) for t in texts]

    def check(self, prompt: str, temperature: float, top_k, top_p, max_tokens: int, seed=None) -> None:
        """Every sampler value range-checked before a stream starts (a UserError: the app's 422)."""
        from ..tasks.lm.sampling import check_sampling

        check_sampling(temperature, top_k, top_p, seed=seed, max_new_tokens=max_tokens)
        self.lm.encode_prompt(prompt)

    def generate(self, prompt: str, max_tokens: int, temperature: float, top_k, top_p, seed,
                 on_piece: Callable[[str], None]) -> str:
        return self.lm.generate(prompt, max_new_tokens=max_tokens, temperature=temperature, top_k=top_k,
                                top_p=top_p, seed=seed, stream=on_piece, warn=lambda m: None)


class PretrainedEmbedder(Served):
    """A pretrained BERT sentence encoder (`minilm`, or a folder with config.json +
    model.safetensors), as `scratchformer embed --model` loads it: /v1/embeddings."""

    task, routes = "embed", (EMBEDDINGS,)

    def __init__(self, name: str, source: str, compute_type: str | None = None, quantize: str | None = None):
        from ..tasks.faces import face

        super().__init__(name, source)
        self.model, self.tok = face("embed").load(source, compute_type=compute_type, quantize=quantize)

    def count_tokens(self, texts):
        return [len(self.tok.encode(t, add_special_tokens=False)) for t in texts]

    def embed(self, texts, key):
        return self.model.embed(texts, self.tok, batch_size=max(len(texts), 1)).tolist()


class OnnxClassifierBackend(Served):
    """A folder written by `scratchformer export RUN --format onnx`, run by ONNX Runtime:
    /v1/classify and /v1/embeddings, without torch in the loop."""

    task, routes = "classify", (CLASSIFY, EMBEDDINGS)

    def __init__(self, name: str, folder: Path):
        from ..tasks.classify.onnx_runtime import OnnxClassifier

        super().__init__(name, str(folder))
        self.model = OnnxClassifier(folder)
        self.labels = self.model.labels

    def count_tokens(self, texts):
        return self.model.count_tokens(texts)

    def classify(self, texts, key):
        return _probs_rows(self.labels, self.model.predict_proba(texts))

    def embed(self, texts, key):
        return self.model.embed(texts).tolist()

    def describe(self):
        return {**super().describe(), "labels": self.labels, "backend": "onnxruntime"}


class Ct2TranslatorBackend(Served):
    """A folder written by `scratchformer export RUN --format ctranslate2`, run by CTranslate2:
    /v1/translate, without torch in the loop."""

    task, routes = "translate", (TRANSLATE,)

    def __init__(self, name: str, folder: Path):
        from ..tasks.translate.ct2_runtime import Ct2Translator

        super().__init__(name, str(folder))
        self.model = Ct2Translator(folder)

    def count_tokens(self, texts):
        return self.model.count_tokens(texts)

    def decode_key(self, beam: int | None, max_length: int | None) -> tuple:
        if beam is not None and (isinstance(beam, bool) or not isinstance(beam, int) or beam < 1):
            raise UserError(f"beam must be >= 1, got {beam}")
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
            raise UserError(f"max_length must be >= 1, got {max_length}")
        return (beam or self.model.decode["beam"], max_length or self.model.decode["max_output_len"])

    def translate(self, texts, key):
        beam, max_len = key
        return self.model.translate(texts, beam=beam, max_output_len=max_len)

    def describe(self):
        return {**super().describe(), "backend": "ctranslate2"}


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


def load_backend(spec: ModelSpec, backend: str = "torch", compute_type: str | None = None,
                 quantize: str | None = None, attempts: int = 3) -> Served:
    """The backend for one spec, by the run's task (config.json), an export folder
    (export.json), or a pretrained encoder's name. `compute_type` (auto, float32, bfloat16, int8;
    None: each task's default): what the torch backends load with (the load APIs' `compute_type=`;
    `quantize="int8"` its deprecated spelling; an export is served as exported).

    One model per name: the folder's identity (weights.identity) is taken before and after the
    load, and a load during which the folder changed is tried again; the backend records the
    identity it was loaded from (`weights`) and how to load its source again (`reopen`)."""
    from .weights import identity

    for _ in range(attempts):
        before = identity(spec.source)
        served = _open_backend(spec, backend, compute_type, quantize)
        after = identity(spec.source)
        if before == after:
            served.weights = after
            served.reopen = lambda: load_backend(spec, backend, compute_type, quantize, attempts)
            return served
    raise UserError(f"{spec.source} changed while it was being loaded ({attempts} tries): is a training writing "
                    "into it? Serve it once the training has finished")


def _open_backend(spec: ModelSpec, backend: str, compute_type: str | None, quantize: str | None) -> Served:
    path = Path(spec.source)
    if (path / "export.json").is_file():
        from ..tasks.export_folder import require_complete

        meta = json.loads((path / "export.json").read_text(encoding="utf-8"))
        require_complete(path, "ctranslate2" if meta.get("format") == "ctranslate2" else "onnxruntime")
        if meta.get("format") == "ctranslate2":
            return Ct2TranslatorBackend(spec.name, path)
        if meta.get("format") != "onnx":
            raise UserError(f"{path} holds a {meta.get('format')!r} export; serve runs ONNX exports "
                            "(--backend onnxruntime), CTranslate2 exports (--backend ctranslate2) or run directories")
        return OnnxClassifierBackend(spec.name, path)
    if backend == "ctranslate2":
        raise UserError(f"{path} is not a CTranslate2 export (no export.json): run "
                        f"`scratchformer export {path} --format ctranslate2 --out DIR` and serve DIR")
    if backend == "onnxruntime":
        raise UserError(f"{path} is not an ONNX export (no export.json): run "
                        f"`scratchformer export {path} --format onnx --out DIR` and serve DIR")
    if not path.exists() and "/" not in spec.source:
        return PretrainedEmbedder(spec.name, spec.source, compute_type, quantize)  # e.g. `minilm`
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file() and not _is_run(path):
        return PretrainedEmbedder(spec.name, spec.source, compute_type, quantize)  # a Hugging Face BERT folder
    from ..tasks.faces import faces, task_of

    check_finished(path)
    face = task_of(path)  # a backend answers routes; the run's face says which routes its task has
    runs = (ClassifierBackend, TranslatorBackend, LanguageModelBackend)
    served = [b for b in runs if b.routes == face.routes]
    if not served:
        able = [f.name for f in faces().values() if any(b.routes == f.routes for b in runs)]
        raise UserError(f"{path} holds a {face.name!r} run, which has no serve routes; serve knows "
                        f"{', '.join(able)} runs")
    return served[0](spec.name, path, compute_type, quantize)


def check_finished(path: Path) -> None:
    """A run still training, or interrupted, is refused with one line saying `--resume` finishes it."""
    from ..tasks.runs import require_finished

    require_finished(path)


def _is_run(path: Path) -> bool:
    try:
        return "task" in json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return False
