"""`scratchformer export RUN --format onnx --out DIR`: a classify run as an ONNX graph that
ONNX Runtime runs alone (no torch, no scratchformer).

The folder holds
    model.onnx      inputs  input_ids (B, T) int64, [bigram_ids (B, T) int64,] attention_mask (B, T) bool
                            (True = real token)
                    outputs logits (B, K) float32, sentence_embedding (B, C) float32 (pooled, L2-normalised)
                    B and T are dynamic axes.
    tokenizer.json  the run's tokenizer (our JSON), labels.json, export.json (how to make the inputs)
    preprocess.py   text -> the inputs, in the standard library + numpy (a copy of onnx_preprocess.py)

What is exported: our Transformer alone. A run's blend with its TF-IDF baseline is not in the
graph (scikit-learn's TF-IDF is another model; `serve` of the run folder keeps the blend), and
long texts are truncated to `data.max_len` tokens (a run that cuts long texts into segments and
pools them reads only the first segment in the export: said in export.json).

Why the plain projection: our oneDNN fast path (`nn.fast_linear`) calls
`torch.ops.mkldnn._linear_pointwise`, which neither `torch.jit.trace` nor torch.export lower
(docs/perf-notes); the export runs with `use_onednn(False)`, i.e. `F.linear`, the same
arithmetic up to float32 rounding.
"""
from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...errors import UserError
from ...fileio import atomic_write_text
from ...models.pooling import masked_pool
from ...nn.fast_linear import use_onednn
from ..onnx_folder import new_export_folder

OPSET = 18
TOLERANCE = 1e-4  # max |logit difference| the export check accepts


class _Exported(nn.Module):
    """(ids, mask) -> (logits, embedding): EncoderClassifier.features + head, with the padding
    mask given instead of derived from the ids."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def run(self, ids, bigrams, mask):
        h = self.m.encoder(self.m.embed(ids, bigrams), mask)  # (B, T, C)
        pooled = masked_pool(h, mask, self.m.cfg.pooling)  # (B, C)
        return self.m.head(pooled), torch.nn.functional.normalize(pooled, dim=-1)

    def forward(self, ids, mask):
        return self.run(ids, None, mask)


class _ExportedBigrams(_Exported):
    """(ids, bigrams, mask) -> (logits, embedding), for runs with hashed bigram embeddings."""

    def forward(self, ids, bigrams, mask):
        return self.run(ids, bigrams, mask)


def _check_exportable(clf, run_dir: Path) -> None:
    if hasattr(clf, "members"):
        raise UserError(f"{run_dir} is an ensemble run: export one member, e.g. {run_dir}/member0")
    m = clf.recipe.model
    if m.kind != "transformer" or m.bert is not None:
        raise UserError(f"{run_dir}: ONNX export covers our own Transformer encoder; this run's backbone is "
                        f"{'BERT' if m.bert is not None else m.kind}")
    kind = getattr(clf.tokenizer, "kind", None)
    if kind != "char":
        raise UserError(f"{run_dir}: the export's torch-free preprocess.py reads char tokenizers; this run's "
                        f"is {kind!r} (train with data.tokenizer=char to export)")


def export_onnx(run_dir: str | Path, out_dir: str | Path, check: bool = True,
                check_texts: list[str] | None = None) -> dict:
    """Write the folder; with `check`, run it with ONNX Runtime on real texts (the run's test
    split when it has one, else `check_texts`) and compare with our model (<= 1e-4 in the logits)."""
    from .inference import Classifier

    run_dir, out = Path(run_dir), new_export_folder(out_dir)
    clf = Classifier.load(run_dir, blend=False)
    _check_exportable(clf, run_dir)
    model = clf.model.eval()
    bigrams = clf.recipe.model.bigram_buckets > 0
    b, t = 2, 7
    ids = torch.randint(5, max(6, clf.tokenizer.vocab_size), (b, t))
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 4:] = False
    args = (ids, torch.randint(1, max(2, clf.recipe.model.bigram_buckets), (b, t)), mask) if bigrams else (ids, mask)
    names = ["input_ids", "bigram_ids", "attention_mask"] if bigrams else ["input_ids", "attention_mask"]
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=1, max=4096)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "model.onnx.tmp"
    previous = use_onednn(False)
    # packing drops padded rows with a data-dependent branch (torch.export cannot trace it); the
    # graph computes them and the mask keeps them out, as the plain path does
    model.encoder.set_padding_packing(False)
    try:
        with torch.no_grad():
            program = torch.onnx.export((_ExportedBigrams if bigrams else _Exported)(model), args, input_names=names,
                                        output_names=["logits", "sentence_embedding"], opset_version=OPSET, dynamo=True,
                                        dynamic_shapes=tuple({0: batch, 1: length} for _ in names),
                                        external_data=False, verbose=False)
            program.save(str(tmp))
    finally:
        use_onednn(previous)
    tmp.replace(out / "model.onnx")
    shutil.copyfile(run_dir / "tokenizer.json", out / "tokenizer.json")
    atomic_write_text(out / "labels.json", json.dumps(clf.labels, ensure_ascii=False, indent=1) + "\n")
    dc, mc = clf.recipe.data, clf.recipe.model
    meta = {"format": "onnx", "task": "classify", "source_run": str(run_dir), "opset": OPSET,
            "inputs": names, "outputs": ["logits", "sentence_embedding"], "max_len": dc.max_len,
            "cls_token": mc.pooling == "cls", "bigram_buckets": mc.bigram_buckets,
            "truncate_keep": getattr(dc, "truncate_keep", "head"), "long_mode_in_run": dc.long_mode,
            "note": "our Transformer alone (no TF-IDF blend); texts longer than max_len tokens are truncated"}
    atomic_write_text(out / "export.json", json.dumps(meta, indent=1) + "\n")
    source = resources.files(__package__).joinpath("onnx_preprocess.py").read_text(encoding="utf-8")
    atomic_write_text(out / "preprocess.py", source)
    report = {"n_texts": 0, "max_abs_diff": None}
    if check:
        report = check_parity(clf, out, check_texts or _real_texts(clf))
        meta["parity"] = report
        atomic_write_text(out / "export.json", json.dumps(meta, indent=1) + "\n")
        if report["max_abs_diff"] > TOLERANCE:
            raise UserError(f"the export differs from our model by {report['max_abs_diff']:.2e} in the logits "
                            f"(> {TOLERANCE:g}) on {report['n_texts']} texts; {out} is kept for inspection")
    return report


def _real_texts(clf, n: int = 64) -> list[str]:
    try:
        from . import load_classification

        data = load_classification(clf.recipe.data)
        pairs = data.test or data.valid
        return [t for t, _ in pairs[:n] if t.strip()]
    except Exception:  # noqa: BLE001 - the data may be gone; fall back to the labels as texts
        return [lab for lab in clf.labels]


def check_parity(clf, folder: Path, texts: list[str]) -> dict:
    """max |ONNX Runtime logits - ours| over `texts`, batched (padding included), and whether
    every argmax agrees."""
    from .onnx_runtime import OnnxClassifier

    ort = OnnxClassifier(folder)
    texts = [t for t in texts if t.strip()]
    ours = clf.with_max_len(clf.recipe.data.max_len)  # the same truncation as the export
    with torch.no_grad():
        want = np.concatenate([ours.task.logits(ours._batch(texts[i:i + 16])).float().numpy()
                               for i in range(0, len(texts), 16)])
    got = np.concatenate([ort.logits(texts[i:i + 16]) for i in range(0, len(texts), 16)])
    return {"n_texts": len(texts), "max_abs_diff": float(np.abs(got - want).max()),
            "argmax_agree": bool((got.argmax(1) == want.argmax(1)).all())}
