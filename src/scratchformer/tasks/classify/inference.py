"""The inference API of classification: `Classifier.load(run_dir).predict([...])`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ...errors import UserError
from ...nn.compute import Compute, compute_type_from
from ...fileio import atomic_write_text
from ...progress import progress_bar
from ...models.classifier import EncoderClassifier, build_classifier
from ...train.checkpoint import build_checked
from ..runs import WEIGHTS, RunDir
from .baseline import NAME as BASELINE_NAME, Baseline
from .data import (ClassifyBatch, EncodedSplit, PreparedSplit, collate, encoder_for, gold_ids, is_prepared,
                   load_tokenizer, texts_of)
from .recipe import ClassifyRecipe
from .report import write_report
from .task import ClassificationTask


class Classifier:
    """A trained classifier, loaded from its run directory.

    >>> clf = Classifier.load("runs/thucnews")
    >>> clf.predict(["火箭队击败湖人队"])[0]["label"]
    'sports'
    """

    def __init__(self, model: EncoderClassifier, tokenizer, labels: list[str], recipe: ClassifyRecipe,
                 compute: Compute | None = None):
        self.model, self.tokenizer, self.labels, self.recipe = model.eval(), tokenizer, labels, recipe
        self.compute = compute or Compute(model, "float32", recipe.model.d_model)  # float32, or int8 projections
        self.task = ClassificationTask(model, recipe, tokenizer, labels)
        self._tasks = {id(model): self.task}  # one task view per module the compute type runs
        self._encode = encoder_for(recipe, tokenizer)

    @property
    def compute_type(self) -> str:
        return self.compute.compute_type

    def compute_choice(self, rows: int | None = None) -> tuple[str, str]:
        """What a batch of `rows` tokens (default: a typical one, batch_size x max_len) computes
        in, and why; nothing is stored (`nn/compute.py`)."""
        return self.compute.choose(rows or self.recipe.data.batch_size * self.recipe.data.max_len)

    def task_for(self, rows: int) -> tuple[ClassificationTask, str, str]:
        """(the task view to run a batch of `rows` tokens with, its compute type, why): the float
        model, or its bf16 copy where the compute type says so (`nn/compute.py`)."""
        model, kind, why = self.compute.model_for(rows)
        if id(model) not in self._tasks:
            self._tasks[id(model)] = ClassificationTask(model, self.recipe, self.tokenizer, self.labels)
        return self._tasks[id(model)], kind, why

    @classmethod
    def load(cls, run_dir: str | Path, blend: bool = True, quantize: str | None = None,
             compute_type: str | None = None, static_encoder: bool = False) -> "Classifier":
        """A finished run directory; an ensemble run gives an `EnsembleClassifier`. When the run
        holds a blend with the TF-IDF baseline (`baseline/blend.json`, see blend.py), the
        `BlendedClassifier` is what the run predicts with; `blend=False`: ours alone.
        `compute_type`: float32 (default), bfloat16 (a bf16 copy of the model), int8 (int8
        projections, CPU) or auto (per batch, what a probe measures faster; `nn/compute.py`).
        `quantize='int8'` is the deprecated spelling of compute_type='int8'. `static_encoder=True`:
        inputs of up to `nn.static_encoder.MAX_TOKENS` padded tokens (a served sentence) run the
        compiled static encoder (a compile of seconds per new shape bucket, then faster: see
        docs/speed.md); larger batches, and models it cannot serve, run the eager one."""
        compute_type = compute_type_from(compute_type, quantize)
        run = RunDir(run_dir)
        if blend and (run.path / BLEND_DIR / BLEND_FILE).is_file():
            return BlendedClassifier.load(cls.load(run_dir, blend=False, compute_type=compute_type,
                                                   static_encoder=static_encoder),
                                          run.path / BLEND_DIR)
        if run.is_ensemble:
            recipe = run.load_recipe(ClassifyRecipe, "classify", (), "classification")
            members = [cls.load(run.member(i).path, compute_type=compute_type, static_encoder=static_encoder)
                       for i in range(recipe.ensemble)]
            return EnsembleClassifier(members, recipe)
        recipe = run.load_recipe(ClassifyRecipe, "classify", ("tokenizer.json", "labels.json", WEIGHTS),
                                 "classification")
        labels = run.load_labels()
        if len(labels) != recipe.model.n_classes:
            raise UserError(f"{run / 'labels.json'} lists {len(labels)} labels but {run / 'config.json'} "
                            f"has a {recipe.model.n_classes}-class head: the run folder is inconsistent")
        tokenizer = load_tokenizer(run.path, recipe.model)
        if recipe.model.bert is None and tokenizer.vocab_size > recipe.model.vocab_size:  # ids would not fit
            raise UserError(f"{run / 'tokenizer.json'} has {tokenizer.vocab_size} tokens but "
                            f"{run / 'config.json'} only a {recipe.model.vocab_size}-row embedding: "
                            "the run folder is inconsistent")
        model = build_checked(lambda: build_classifier(recipe.model, run.path), run / WEIGHTS, run / "config.json")
        if static_encoder and hasattr(model, "static_encoder"):  # (not the LSTM baseline)
            model.static_encoder = True
        return cls(model, tokenizer, labels, recipe, Compute(model, compute_type, recipe.model.d_model))

    @property
    def max_positions(self) -> int | None:
        """Hard limit on tokens per segment (a learned position table), or None."""
        m = self.recipe.model
        if m.kind == "yours":
            return m.yours.max_len
        if m.bert is not None:
            return m.bert.max_positions
        return m.encoder.max_len if m.encoder.position == "learned" else None

    def with_max_len(self, max_len: int) -> "Classifier":
        """The same model reading `max_len` tokens per segment (`evaluate --max-len`): a longer
        input than in training, to see how the positions carry over. Refused past a learned
        position table."""
        limit = self.max_positions
        if limit is not None and max_len > limit:
            raise UserError(f"this classifier has learned positions: its table has {limit} rows "
                            f"(model.{'bert.max_position_embeddings' if self.recipe.model.bert else 'encoder.max_len'}), "
                            f"so data.max_len={max_len} cannot be read; use --max-len <= {limit}")
        recipe = self.recipe.replace(data=self.recipe.data.replace(max_len=max_len)).freeze()
        return Classifier(self.model, self.tokenizer, self.labels, recipe, self.compute)

    def _batch(self, texts: Sequence[str]) -> ClassifyBatch:
        docs = []
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise UserError(f"text {i + 1} is empty: there is nothing to classify")
            docs.append(self._encode(text))
        return collate(docs, [0] * len(docs), self._encode.bigrams, pad_id=self._encode.pad_id)

    @torch.no_grad()
    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """`(N, n_classes)` probabilities."""
        if isinstance(texts, str):
            texts = [texts]
        out = []
        for i in range(0, len(texts), batch_size):
            b = self._batch(texts[i : i + batch_size])
            logits = self.task_for(b.ids.numel())[0].logits(b)
            out.append(torch.softmax(logits.float(), -1).numpy())
        return finite(np.concatenate(out) if out else np.zeros((0, len(self.labels))), "probabilities")

    def predict(self, texts: Sequence[str], batch_size: int = 64) -> list[dict[str, Any]]:
        """One dict per text: `label`, its `score`, and `probs` for every label."""
        probs = self.predict_proba(texts, batch_size)
        return [{"label": self.labels[int(p.argmax())], "score": float(p.max()),
                 "probs": {lab: float(x) for lab, x in zip(self.labels, p)}} for p in probs]

    def tokenize(self, texts: Sequence[str]) -> list:
        """The texts as `Tokenized` strs carrying their ids (n_tokens: as `count_tokens`), which
        `predict_proba` and `embed` read without tokenizing again (serve: one tokenization per
        request, from the limit check to the batch)."""
        return [self._encode.tokenized(t) for t in texts]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens each text becomes before truncation or segmentation (what a server limits)."""
        if hasattr(self.tokenizer, "cls_id"):  # a BERT tokenizer
            return [len(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]
        return [len(self.tokenizer.encode(t)) for t in texts]

    @torch.no_grad()
    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """`(N, C)` sentence embeddings: the pooled encoder output the head reads (segments of a
        long text averaged as the head sees them), L2-normalised."""
        out = []
        for i in range(0, len(texts), batch_size):
            b = self._batch(texts[i : i + batch_size])
            seg = self.task_for(b.ids.numel())[0].model.features(b.ids, b.bigrams)  # (S, C)
            if b.doc_index is not None:
                from ...models.pooling import pool_segments

                seg = pool_segments(seg, b.doc_index, len(b.labels), self.recipe.model.segment_pooling)  # (N, C)
            out.append(torch.nn.functional.normalize(seg.float(), dim=-1).numpy())
        return finite(np.concatenate(out) if out else np.zeros((0, self.recipe.model.d_model), dtype=np.float32),
                      "sentence embeddings")

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", meta: dict | None = None) -> dict[str, Any]:
        _check_labels(pairs, self.labels)
        task = self.task_for(self.recipe.data.batch_size * self.recipe.data.max_len)[0]  # a typical batch's choice
        return task.report(self._split(pairs), Path(out_dir) if out_dir else None, name, meta)

    def _split(self, pairs):
        """The labelled pairs encoded once: prepared data (a big file) read by batch, else in memory."""
        label_ids = {lab: i for i, lab in enumerate(self.labels)}
        if is_prepared(pairs) and not self._encode.bert:
            import sys

            from ...data.prepared_tokens import token_shards

            shards = token_shards(pairs.rows, self.tokenizer, self._encode.bigram_buckets,
                                  log=lambda m: print(m, file=sys.stderr))
            return PreparedSplit(pairs, shards, self._encode, label_ids, self.recipe.data, shuffle=False)
        return EncodedSplit(pairs, self._encode, label_ids, self.recipe.data, shuffle=False)

    @torch.no_grad()
    def split_proba(self, pairs: Sequence[tuple[str, str]], progress: str | None = None) -> np.ndarray:
        """`(N, n_classes)` probabilities for labelled pairs, in their order (empty texts allowed,
        as in evaluation). `progress`: a name to show the texts scored under (long splits)."""
        split = self._split(pairs)
        out = np.zeros((len(pairs), len(self.labels)))
        update, close = progress_bar(len(pairs), progress, "text")
        for idx, b in zip(split.sampler.epoch_arrays(0), split.batches(0)):
            out[idx] = torch.softmax(self.task_for(b.ids.numel())[0].logits(b).float(), -1).numpy()
            update(len(idx))
        close()
        return out

    @torch.no_grad()
    def attention(self, text: str) -> tuple[list[str], list[torch.Tensor]]:
        """Tokens of the first segment and per-layer attention weights `(H, T, T)`."""
        batch = self._batch([text])
        ids = batch.ids[:1]
        _, weights = self.model.features(ids, None if batch.bigrams is None else batch.bigrams[:1], need_weights=True)
        tokens = [self.tokenizer.id_to_token(int(i)) for i in ids[0]]
        return tokens, [w[0] for w in weights]


def _check_labels(pairs, labels) -> None:
    unknown = sorted(set(pairs.label_names() if is_prepared(pairs) else {lab for _, lab in pairs}) - set(labels))
    if unknown:
        raise UserError(f"labels {unknown[:5]} were not seen in training; known labels: {labels}")


class EnsembleClassifier:
    """Several classifiers (the members of an `ensemble` run): the mean of their probabilities.
    The same interface as `Classifier` (predict, predict_proba, evaluate, attention of member 1)."""

    def __init__(self, members: list[Classifier], recipe: ClassifyRecipe):
        self.members, self.recipe = members, recipe
        self.labels, self.tokenizer, self.model = members[0].labels, members[0].tokenizer, members[0].model
        if any(m.labels != self.labels for m in members):
            raise UserError("ensemble members were trained with different label sets")

    def compute_choice(self, rows: int | None = None) -> tuple[str, str]:
        return self.members[0].compute_choice(rows)

    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.mean([m.predict_proba(texts, batch_size) for m in self.members], axis=0)

    predict = Classifier.predict

    def split_proba(self, pairs: Sequence[tuple[str, str]], progress: str | None = None) -> np.ndarray:
        return np.mean([m.split_proba(pairs, progress and f"{progress} (member {i + 1} of {len(self.members)})")
                        for i, m in enumerate(self.members)], axis=0)  # (N, K)

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", meta: dict | None = None) -> dict[str, Any]:
        _check_labels(pairs, self.labels)
        return report_in_blocks(pairs, self.labels, lambda block: (self.split_proba(block), {}), out_dir, name, meta,
                                {"members": len(self.members)})

    def attention(self, text: str):
        return self.members[0].attention(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.members[0].count_tokens(texts)

    def tokenize(self, texts: Sequence[str]) -> list:
        return self.members[0].tokenize(texts)  # the other members read the text as text

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Member 1's embeddings (members do not share a vector space)."""
        return self.members[0].embed(texts, batch_size)

    def with_max_len(self, max_len: int) -> "EnsembleClassifier":
        return EnsembleClassifier([m.with_max_len(max_len) for m in self.members],
                                  self.recipe.replace(data=self.recipe.data.replace(max_len=max_len)).freeze())


def member_count(clf) -> int:
    """How many seeds a loaded classifier averages (1 for a single run)."""
    return len(getattr(clf, "members", ())) or 1


EVAL_BLOCK = 20_000  # rows whose probabilities (and, for a blend, texts) are held at once in an evaluation


def report_in_blocks(pairs: Sequence[tuple[str, str]], labels: list[str],
                     proba: Callable[[Sequence[tuple[str, str]]], tuple[np.ndarray, dict[str, np.ndarray]]],
                     out_dir, name: str, meta: dict | None, extra: dict[str, Any]) -> dict[str, Any]:
    """The evaluation report of `proba(block) -> ((n, K) probabilities, {part: (n, K) probabilities})`
    over `pairs`, `EVAL_BLOCK` rows at a time: every row's predicted and gold ids are kept (integers),
    never all rows' probabilities or texts, so a prepared file of millions of rows stays flat. The
    loss is the probabilities' mean negative log-likelihood; each part's accuracy is `<part>_accuracy`."""
    gold = gold_ids(pairs, labels)
    preds: dict[str, np.ndarray] = {}
    nll = 0.0
    for a in range(0, len(gold), EVAL_BLOCK):
        g = gold[a:a + EVAL_BLOCK]
        probs, parts = proba(pairs[a:a + EVAL_BLOCK])
        nll -= float(np.log(np.clip(probs[np.arange(len(g)), g], 1e-12, None)).sum())
        for part, p in {"": probs, **parts}.items():
            preds.setdefault(part, np.empty(len(gold), np.int64))[a:a + len(g)] = p.argmax(-1)
    ours = preds.pop("", np.zeros(0, np.int64))
    accuracy = {f"{k}_accuracy": float((p == gold).mean()) for k, p in preds.items()}
    return write_report(ours, gold, labels, nll / len(gold) if len(gold) else 0.0, Path(out_dir) if out_dir else None,
                        name, meta, extra={**extra, **accuracy})


BLEND_DIR, BLEND_FILE = "baseline", "blend.json"  # in a run directory, beside the saved baseline


class BlendedClassifier:
    """Ours (a `Classifier` or an `EnsembleClassifier`) averaged with the run's saved TF-IDF
    baseline: p = w · p_ours + (1 − w) · p_tfidf, the weight w chosen on valid (blend.py). The
    same interface as `Classifier`; attention maps and `.model` are ours."""

    def __init__(self, ours, baseline: Baseline, weight: float):
        if baseline.labels != ours.labels:
            raise UserError(f"the saved baseline's labels {baseline.labels[:5]} differ from the run's "
                            f"{ours.labels[:5]}: run `scratchformer blend RUN_DIR` again")
        if not 0.0 <= weight <= 1.0:
            raise UserError(f"blend weight {weight} is not in [0, 1]: run `scratchformer blend RUN_DIR` again")
        self.ours, self.baseline, self.weight = ours, baseline, weight
        self.labels, self.recipe, self.tokenizer, self.model = ours.labels, ours.recipe, ours.tokenizer, ours.model
        if hasattr(ours, "members"):  # an ensemble inside (hasattr(clf, "members") means one, elsewhere)
            self.members = ours.members

    def compute_choice(self, rows: int | None = None) -> tuple[str, str]:
        return self.ours.compute_choice(rows)

    @classmethod
    def load(cls, ours, directory: Path) -> "BlendedClassifier":
        try:
            weight = float(json.loads((directory / BLEND_FILE).read_text(encoding="utf-8"))["weight"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{directory / BLEND_FILE} is unreadable ({type(e).__name__}: {e}); "
                            "run `scratchformer blend RUN_DIR` again") from None
        return cls(ours, Baseline.load(directory), weight)

    def save(self, directory: Path, record: dict[str, Any]) -> None:
        """The baseline, then `blend.json` (its presence is what makes the run predict blended)."""
        self.baseline.save(directory)
        atomic_write_text(directory / BLEND_FILE, json.dumps({"weight": self.weight, "baseline": BASELINE_NAME,
                                                               **record}, indent=1) + "\n", root=Path(directory).parent)

    def _mix(self, ours: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        if self.weight == 1.0:
            return ours
        return self.weight * ours + (1.0 - self.weight) * self.baseline.predict_proba(texts)

    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        texts = [texts] if isinstance(texts, str) else texts
        return self._mix(self.ours.predict_proba(texts, batch_size), texts)  # ours first: it refuses empty texts

    predict = Classifier.predict

    def split_proba(self, pairs: Sequence[tuple[str, str]], progress: str | None = None) -> np.ndarray:
        return self._mix(self.ours.split_proba(pairs, progress), [t for t, _ in pairs])

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", meta: dict | None = None) -> dict[str, Any]:
        """The blend's report, with the accuracy of each part on the same pairs beside it."""
        _check_labels(pairs, self.labels)

        def proba(block):
            ours, base = self.ours.split_proba(block), self.baseline.predict_proba(texts_of(block))
            return self.weight * ours + (1 - self.weight) * base, {"ours": ours, "baseline": base}
        return report_in_blocks(pairs, self.labels, proba, out_dir, name, meta,
                                {"blend_weight": self.weight, "members": member_count(self)})

    def attention(self, text: str):
        return self.ours.attention(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.ours.count_tokens(texts)

    def tokenize(self, texts: Sequence[str]) -> list:
        return self.ours.tokenize(texts)

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return self.ours.embed(texts, batch_size)

    def with_max_len(self, max_len: int) -> "BlendedClassifier":
        return BlendedClassifier(self.ours.with_max_len(max_len), self.baseline, self.weight)


def finite(values: np.ndarray, what: str) -> np.ndarray:
    """`values` (one row per text) when every number is finite; else one line naming the rows: a
    NaN probability or vector is never printed, served or returned as if it were a number."""
    bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(1)) if len(values) else []
    if len(bad):
        raise UserError(f"the model's {what} of {len(bad)} of {len(values)} texts (the first: text {bad[0] + 1}) are "
                        "not finite (NaN or inf): its weights hold NaN or inf (`scratchformer doctor RUN` looks "
                        "for where); retrain or resume from an earlier checkpoint")
    return values
