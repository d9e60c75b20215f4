"""`scratchformer export RUN --format onnx --out DIR`: a classify run as an ONNX graph that
ONNX Runtime runs with `tokenizers` and numpy (no torch, no scratchformer).

The folder holds
    model.onnx      inputs  input_ids (B, T) int64, [bigram_ids (B, T) int64,] attention_mask (B, T) bool
                            (True = real token)
                    outputs logits (B, K) float32, sentence_embedding (B, C) float32 (pooled, L2-normalised)
                    B and T are dynamic axes.
    tokenizer.json  the run's tokenizer as a standard `tokenizers` file (data/hf_tokenizer.py) giving
                    our ids, with the run's template, truncation and padding set
    preprocess.py   text -> the inputs (a copy of onnx_preprocess.py): prefix, bigrams, every
                    truncation mode; labels.json, export.json (its settings), README.md

Every Transformer run exports: our encoder with any tokenizer (char, word, BPE, WordPiece; hashed
character or token-id bigrams) and BERT backbones (`--init minilm`, `--init e5` with its pruned
XLM-R vocabulary, pad id 1 and "query: " prefix), mean / cls / max pooling. Refused, one line each:
LSTM runs, ensembles (export a member), word runs cut by jieba. A run's blend with its TF-IDF
baseline is not in the graph (docs/export.md says why); long texts are truncated to
`data.max_len` tokens (a run that cuts them into segments reads the first segment here).

Why the plain projection: our oneDNN fast path (`nn.fast_linear`) calls
`torch.ops.mkldnn._linear_pointwise`, which neither `torch.jit.trace` nor torch.export lower
(docs/perf-notes); the export runs with `use_onednn(False)`, i.e. `F.linear`, the same
arithmetic up to float32 rounding.
"""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ...data.hf_tokenizer import to_hf
from ...errors import UserError
from ...fileio import atomic_write_text
from ...models.pooling import masked_pool
from ...nn.fast_linear import use_onednn
from ..export_folder import parity_failed, staged_export
from ..onnx_folder import new_export_folder

OPSET = 18
TOLERANCE = 1e-4  # max |logit difference| the export check accepts


class _Exported(nn.Module):
    """(ids, mask) -> (logits, embedding): EncoderClassifier.features + head, with the padding
    mask given instead of derived from the ids. Our encoder or a BERT backbone (minilm, e5)."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def run(self, ids, bigrams, mask):
        if self.m.cfg.bert is not None:
            h = self.m.bert(ids, attention_mask=mask)  # (B, T, C)
        else:
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
    if clf.recipe.model.kind != "transformer":
        raise UserError(f"{run_dir}: ONNX export covers Transformer encoders (ours, --init minilm/e5); this run is "
                        f"model.kind={clf.recipe.model.kind}: serve the run folder instead")


def _max_length(clf) -> int:
    """The longest input the graph accepts (a learned position table's rows, else 4096)."""
    return clf.max_positions or 4096


def _preprocess_settings(clf) -> dict:
    """What preprocess.py needs besides tokenizer.json to give the run's model inputs."""
    enc, dc, mc, tok = clf._encode, clf.recipe.data, clf.recipe.model, clf.tokenizer
    bigrams = None
    if enc.bigrams:
        bigrams = "char" if getattr(tok, "bigram_buckets", 0) == mc.bigram_buckets and hasattr(tok, "encode_bigrams") \
            else "id"
    return {"text_prefix": getattr(tok, "text_prefix", ""), "prefix_ids": [i for i, _ in enc.prefix],
            "suffix_ids": [i for i, _ in enc.suffix], "pad_id": enc.pad_id, "max_len": dc.max_len,
            # a run that cuts long texts into segments reads the first one here: the head
            "truncate_keep": dc.truncate_keep if dc.long_mode == "truncate" else "head",
            "bigrams": bigrams, "bigram_buckets": mc.bigram_buckets,
            **({"trigram_buckets": mc.trigram_buckets} if mc.trigram_buckets else {}),
            "lowercase": bool(getattr(tok, "lowercase", False))}


def standard_tokenizer(clf, settings: dict):
    """The run's tokenizer as a `tokenizers.Tokenizer` whose plain `encode_batch` gives the model's
    input ids: the template ([CLS] $A [SEP], <s> $A </s>, <cls> $A), truncation to max_len
    (head or tail; head+tail is preprocess.py's alone) and right padding with the pad id."""
    from tokenizers import processors

    hf = to_hf(clf.tokenizer)
    name = clf.tokenizer.id_to_token
    pre, suf = settings["prefix_ids"], settings["suffix_ids"]
    if pre or suf:
        single = " ".join([name(i) for i in pre] + ["$A"] + [name(i) for i in suf])
        hf.post_processor = processors.TemplateProcessing(single=single,
                                                          special_tokens=[(name(i), i) for i in sorted(set(pre + suf))])
    else:
        hf.post_processor = None
    keep = settings["truncate_keep"]
    hf.enable_truncation(settings["max_len"], direction="left" if keep == "tail" else "right")
    hf.enable_padding(pad_id=settings["pad_id"], pad_token=name(settings["pad_id"]))
    return hf


def export_onnx(run_dir: str | Path, out_dir: str | Path, check: bool = True,
                check_texts: list[str] | None = None) -> dict:
    """Write the folder; with `check`, run it with ONNX Runtime on real texts (the run's test
    split when it has one, else `check_texts`) and compare with our model (<= 1e-4 in the logits)."""
    from .inference import Classifier

    run_dir, out = Path(run_dir), new_export_folder(out_dir)
    clf = Classifier.load(run_dir, blend=False)
    _check_exportable(clf, run_dir)
    settings = _preprocess_settings(clf)
    hf_tokenizer = standard_tokenizer(clf, settings)  # refuses what has no standard form, before any writing
    model = clf.model.eval()
    bigrams = settings["bigrams"] is not None
    b, t = 2, 7
    vocab = clf.tokenizer.vocab_size
    ids = torch.randint(5, max(6, vocab), (b, t))
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[1, 4:] = False
    args = (ids, torch.randint(1, max(2, clf.recipe.model.bigram_buckets) * max(1, clf.recipe.model.trigram_buckets), (b, t)), mask) if bigrams else (ids, mask)
    names = ["input_ids", "bigram_ids", "attention_mask"] if bigrams else ["input_ids", "attention_mask"]
    batch, length = torch.export.Dim("batch", min=1), torch.export.Dim("length", min=1, max=_max_length(clf))
    with staged_export(out, "onnx", run_dir) as stage:
        report = _write(clf, model, run_dir, out, stage, args, names, (batch, length), bigrams, settings, hf_tokenizer,
                        check, check_texts)
    return report


def _write(clf, model, run_dir: Path, out: Path, stage: Path, args, names, dims, bigrams: bool, settings: dict,
           hf_tokenizer, check: bool, check_texts) -> dict:
    """The folder's files into `stage` (renamed to `out` once whole and checked)."""
    batch, length = dims
    previous = use_onednn(False)
    # packing drops padded rows with a data-dependent branch (torch.export cannot trace it); the
    # graph computes them and the mask keeps them out, as the plain path does
    encoder = model.bert.encoder if model.cfg.bert is not None else model.encoder
    packing = encoder.pack_padding
    encoder.set_padding_packing(False)
    try:
        with torch.no_grad():
            program = torch.onnx.export((_ExportedBigrams if bigrams else _Exported)(model).eval(), args, input_names=names,
                                        output_names=["logits", "sentence_embedding"], opset_version=OPSET, dynamo=True,
                                        dynamic_shapes=tuple({0: batch, 1: length} for _ in names),
                                        external_data=False, verbose=False)
            program.save(str(stage / "model.onnx"))
    finally:
        use_onednn(previous)
        encoder.set_padding_packing(packing)  # the parity check compares with the run as it serves
    atomic_write_text(stage / "tokenizer.json", hf_tokenizer.to_str(pretty=True))
    atomic_write_text(stage / "labels.json", json.dumps(clf.labels, ensure_ascii=False, indent=1) + "\n")
    dc, mc = clf.recipe.data, clf.recipe.model
    backbone = "ours" if mc.bert is None else f"{mc.bert.model_type} ({mc.init})"
    meta = {"format": "onnx", "task": "classify", "source_run": str(run_dir), "opset": OPSET,
            "inputs": names, "outputs": ["logits", "sentence_embedding"], "backbone": backbone,
            "pooling": mc.pooling, "max_len": dc.max_len, "long_mode_in_run": dc.long_mode,
            "blend_in_run": (run_dir / "baseline" / "blend.json").is_file(), "preprocess": settings,
            "note": "the run's Transformer alone (no TF-IDF blend, no ensemble); texts longer than max_len "
                    "tokens are truncated as preprocess.truncate_keep says"}
    source = resources.files(__package__).joinpath("onnx_preprocess.py").read_text(encoding="utf-8")
    atomic_write_text(stage / "preprocess.py", source)
    atomic_write_text(stage / "README.md", _readme(meta, out))
    atomic_write_text(stage / "export.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    report = {"n_texts": 0, "max_abs_diff": None}
    if check:  # the folder as written (export.json included: preprocess.py reads its settings)
        report = check_parity(clf, stage, check_texts or _real_texts(clf))
        meta["parity"] = report
        atomic_write_text(stage / "export.json", json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    if check and (report["max_abs_diff"] > TOLERANCE or not report["argmax_agree"]):
        raise parity_failed(f"the export differs from our model by {report['max_abs_diff']:.2e} in the logits "
                            f"(tolerance {TOLERANCE:g}; argmax agrees on every text: {report['argmax_agree']}) "
                            f"on {report['n_texts']} texts", out)
    return report


def _readme(meta: dict, out: Path) -> str:
    p = meta["preprocess"]
    prefix = f'Every text is read as `{p["text_prefix"]!r} + text` (the prefix the run was trained with).\n' \
        if p["text_prefix"] else ""
    blend = ("The run predicts with a blend of this model and a TF-IDF baseline (baseline/blend.json); the blend is "
             "NOT in this folder: its probabilities are those of the model alone. Serve the run folder to keep it.\n"
             if meta["blend_in_run"] else "")
    only = "".join(f"\n  {x} is preprocess.py's alone." for x, on in (
        ("Hashing the bigram ids", p["bigrams"]), ("head+tail truncation", p["truncate_keep"] == "head+tail")) if on)
    return f"""# ONNX export of {meta["source_run"]}

Runs with `onnxruntime`, `tokenizers` and `numpy` (no torch, no scratchformer):

```python
import sys, onnxruntime as ort
sys.path.insert(0, "{out}")
from preprocess import Preprocessor
pre = Preprocessor("{out}")
sess = ort.InferenceSession("{out}/model.onnx")
logits, embedding = sess.run(None, pre(["a text to classify"]))
print(pre.labels[int(logits[0].argmax())])
```

- `model.onnx`: inputs {", ".join(meta["inputs"])} (int64, bool mask: True = real token), batch and length
  dynamic; outputs `logits` (B, K) and `sentence_embedding` (B, C, {meta["pooling"]} pooling, L2-normalised).
  Backbone: {meta["backbone"]}.
- `tokenizer.json`: a standard `tokenizers` file; `Tokenizer.from_file(...).encode_batch(texts)` gives the
  model's `input_ids` (specials, truncation to {meta["max_len"]} tokens, padding with id {p["pad_id"]}).{only}
- `preprocess.py`: text -> the inputs, as the run's classifier makes them; `labels.json`; `export.json`.

In the graph: the run's Transformer (embeddings, encoder, pooling, head). Not in it: an ensemble's other
members (export each member) and a TF-IDF blend. Texts longer than {meta["max_len"]} tokens are truncated
(keep: {p["truncate_keep"]}){"; the run itself read long texts as several segments" if meta["long_mode_in_run"] != "truncate" else ""}.
{prefix}{blend}"""


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
    from .inference import Classifier
    from .onnx_runtime import OnnxClassifier

    ort = OnnxClassifier(folder)
    texts = [t for t in texts if t.strip()]
    keep = _preprocess_settings(clf)["truncate_keep"]  # a segmenting run: its first segment, as exported
    ours = Classifier(clf.model, clf.tokenizer, clf.labels, clf.recipe.replace(
        data=clf.recipe.data.replace(long_mode="truncate", truncate_keep=keep)).freeze())
    with torch.no_grad():
        want = np.concatenate([ours.task.logits(ours._batch(texts[i:i + 16])).float().numpy()
                               for i in range(0, len(texts), 16)])
    got = np.concatenate([ort.logits(texts[i:i + 16]) for i in range(0, len(texts), 16)])
    return {"n_texts": len(texts), "max_abs_diff": float(np.abs(got - want).max()),
            "argmax_agree": bool((got.argmax(1) == want.argmax(1)).all())}
