"""Text classification: how labelled texts become batches, a loss, metrics and predictions.

`train_classifier(recipe, out_dir)` is what `scratchformer train classify` runs;
`Classifier.load(run_dir).predict([...])` is the inference API.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data.batching import LengthBucketSampler, pad_sequences, segment, truncate
from ..data.tokenizers import CLS_ID, PAD_ID, Tokenizer, auto_kind, build_tokenizer
from ..errors import UserError
from ..interop.hf_bert import BertTokenizer
from ..models.classifier import ClassifierConfig, EncoderClassifier
from ..nn import JsonConfig
from ..train import TrainConfig, Trainer
from ..train.checkpoint import load_weights
from ..train.members import MEMBERS, train_members
from . import metrics as M
from .data_source import load_classification, load_run_recipe
from .mlm import encode_with_bigrams


@dataclass
class ClassifyDataConfig(JsonConfig):
    dataset: str = "thucnews"  # a registered data set, or the path of the user's training file
    dataset_options: dict = field(default_factory=dict)  # e.g. {"fields": "title"} for inews
    valid_file: str | None = None
    test_file: str | None = None
    text_col: str | int | None = None
    label_col: str | int | None = None
    tokenizer: str = "auto"  # char | word | bpe | wordpiece | auto (char for CJK text, else bpe)
    vocab_size: int = 8000  # bpe / wordpiece
    min_freq: int = 1  # char / word: rarer tokens become <unk>
    lowercase: bool = False
    max_len: int = 128  # tokens per segment, <cls> included
    long_mode: str = "truncate"  # truncate | segments (encode each window, pool per document)
    truncate_keep: str = "head"  # head | tail | head+tail
    max_segments: int = 8
    batch_size: int = 64
    max_tokens: int | None = None  # token budget per batch instead of batch_size
    label_smoothing: float = 0.0

    def __post_init__(self) -> None:
        if self.long_mode not in ("truncate", "segments"):
            raise UserError(f"long_mode must be 'truncate' or 'segments', got {self.long_mode!r}")
        if self.max_len < 2:
            raise UserError("max_len must be at least 2")


@dataclass
class ClassifyRecipe(JsonConfig):
    """Everything a classification run needs; saved as the run's config.json."""

    task: str = "classify"
    data: ClassifyDataConfig = field(default_factory=ClassifyDataConfig)
    model: ClassifierConfig = field(default_factory=ClassifierConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=10, metric="accuracy", metric_mode="max"))
    ensemble: int = 1  # >1: train members with seeds seed, seed+1, ...; predict with their mean probabilities

    def __post_init__(self) -> None:
        if not isinstance(self.ensemble, int) or self.ensemble < 1:
            raise UserError(f"ensemble must be a whole number >= 1, got {self.ensemble!r}")


@dataclass
class ClassifyBatch:
    ids: torch.Tensor  # (S, T) segments
    labels: torch.Tensor  # (B,)
    bigrams: torch.Tensor | None = None  # (S, T)
    doc_index: torch.Tensor | None = None  # (S,) document of each segment; None = one each

    def to(self, device) -> "ClassifyBatch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return ClassifyBatch(move(self.ids), move(self.labels), move(self.bigrams), move(self.doc_index))


class DocumentEncoder:
    """Text -> segments of token ids (and aligned bigram ids), following the data config.

    Our tokenizers: `[<cls>] tokens` (the `<cls>` only for cls pooling). A BERT tokenizer:
    `[CLS] tokens [SEP]` with its own ids, as the checkpoint was trained (so `max_len - 2`
    tokens of text per segment)."""

    def __init__(self, tokenizer, dc: ClassifyDataConfig, cls_token: bool, bigram_buckets: int):
        self.tok, self.dc, self.bigram_buckets = tokenizer, dc, bigram_buckets
        self.bigrams = bigram_buckets > 0
        self.bert = isinstance(tokenizer, BertTokenizer)
        self.prefix = [(tokenizer.cls_id, 0)] if self.bert else [(CLS_ID, 0)] if cls_token else []
        self.suffix = [(tokenizer.sep_id, 0)] if self.bert else []

    def __call__(self, text: str) -> list[list[tuple[int, int]]]:
        if self.bert:
            ids, bis = self.tok.encode(text, add_special_tokens=False), None
        else:
            ids, bis = encode_with_bigrams(self.tok, text, self.bigram_buckets)
        pairs = list(zip(ids, bis or [0] * len(ids)))
        room = self.dc.max_len - len(self.prefix) - len(self.suffix)
        if self.dc.long_mode == "truncate":
            segs = [truncate(pairs, room, keep=self.dc.truncate_keep)]
        else:
            segs = segment(pairs, room, max_segments=self.dc.max_segments) or [[]]
        return [self.prefix + s + self.suffix for s in segs]


def collate(docs: Sequence[list[list[tuple[int, int]]]], labels: Sequence[int], bigrams: bool) -> ClassifyBatch:
    segs = [s for d in docs for s in d]
    ids, _ = pad_sequences([[i for i, _ in s] for s in segs], PAD_ID)  # (S, T)
    bi = pad_sequences([[b for _, b in s] for s in segs], 0)[0] if bigrams else None
    doc_index = None
    if len(segs) != len(docs):
        doc_index = torch.tensor([d for d, doc in enumerate(docs) for _ in doc])
    return ClassifyBatch(ids, torch.tensor(list(labels)), bi, doc_index)


class ClassificationTask:
    """The Trainer's view of classification (see docs/contracts.md)."""

    def __init__(self, model: EncoderClassifier, recipe: ClassifyRecipe, tokenizer: Tokenizer,
                 labels: list[str]):
        self.model, self.recipe, self.tokenizer, self.labels = model, recipe, tokenizer, labels

    def logits(self, b: ClassifyBatch) -> torch.Tensor:
        return self.model(b.ids, b.bigrams, b.doc_index, len(b.labels))

    def count(self, b: ClassifyBatch) -> int:
        return len(b.labels)

    def batch_tokens(self, b: ClassifyBatch) -> int:
        return int((b.ids != PAD_ID).sum())

    def loss_sum(self, b: ClassifyBatch):
        logits = self.logits(b).float()
        loss = F.cross_entropy(logits, b.labels, reduction="sum",
                               label_smoothing=self.recipe.data.label_smoothing)
        return loss, {"accuracy": float((logits.argmax(-1) == b.labels).sum())}

    def predictions(self, batches) -> tuple[np.ndarray, np.ndarray, float]:
        preds, gold, loss = [], [], 0.0
        for b in batches:
            logits = self.logits(b).float()
            loss += float(F.cross_entropy(logits, b.labels, reduction="sum"))
            preds.append(logits.argmax(-1).cpu().numpy())
            gold.append(b.labels.cpu().numpy())
        preds, gold = np.concatenate(preds), np.concatenate(gold)
        return preds, gold, loss / max(len(gold), 1)

    def evaluate(self, batches) -> dict[str, float]:
        preds, gold, loss = self.predictions(batches)
        rep = M.report(M.confusion_matrix(gold, preds, len(self.labels)), self.labels)
        return {"loss": loss, "accuracy": rep["accuracy"], "macro_f1": rep["macro_f1"]}

    def save(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        self.recipe.save_json(run_dir / "config.json")
        save_tokenizer(self.tokenizer, run_dir)
        (run_dir / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False, indent=1), encoding="utf-8")


class EncodedSplit:
    """One split, encoded once: documents as segments, labels as ids, batches on demand."""

    def __init__(self, pairs, encode: DocumentEncoder, label_ids: dict[str, int], dc: ClassifyDataConfig,
                 shuffle: bool, seed: int = 0):
        self.docs = [encode(t) for t, _ in pairs]
        self.labels = [label_ids[lab] for _, lab in pairs]
        self.bigrams = encode.bigrams
        lengths = [sum(len(s) for s in d) for d in self.docs]
        self.sampler = LengthBucketSampler(lengths, batch_size=None if dc.max_tokens else dc.batch_size,
                                           max_tokens=dc.max_tokens, shuffle=shuffle, seed=seed)
        self.padding_fraction = self.sampler.padding_fraction(self.sampler.epoch_batches(0))

    def __len__(self) -> int:
        return len(self.docs)

    def batches(self, epoch: int = 0) -> list[ClassifyBatch]:
        return [collate([self.docs[i] for i in idx], [self.labels[i] for i in idx], self.bigrams)
                for idx in self.sampler.epoch_batches(epoch)]


def save_tokenizer(tok, run_dir: Path) -> None:
    """`tokenizer.json` in the run directory: ours (with a "type"), or a BERT checkpoint's
    tokenizer files (tokenizer.json in the HF format, vocab.txt, tokenizer_config.json)."""
    if isinstance(tok, BertTokenizer):
        tok.save(run_dir)
    else:
        tok.save(Path(run_dir) / "tokenizer.json")


def load_tokenizer(run_dir: Path, model_cfg: ClassifierConfig):
    """The tokenizer a run was trained with; a BERT backbone means a BERT tokenizer."""
    if model_cfg.bert is not None:
        return BertTokenizer.from_dir(run_dir, max_positions=model_cfg.bert.max_position_embeddings)
    return Tokenizer.load(Path(run_dir) / "tokenizer.json")


def build_tokenizer_for(dc: ClassifyDataConfig, texts: list[str], bigram_buckets: int) -> Tokenizer:
    """A fresh tokenizer; with bigram_buckets, the char tokenizer hashes character bigrams
    (any other kind gets hashed token-id bigrams from the DocumentEncoder)."""
    kind = auto_kind(texts) if dc.tokenizer == "auto" else dc.tokenizer
    if kind == "char":
        return build_tokenizer("char", texts, min_freq=dc.min_freq, lowercase=dc.lowercase, bigram_buckets=bigram_buckets)
    if kind == "word":
        return build_tokenizer("word", texts, min_freq=dc.min_freq, lowercase=dc.lowercase)
    return build_tokenizer(kind, texts, vocab_size=dc.vocab_size)


def _encoder_for(recipe: ClassifyRecipe, tok) -> DocumentEncoder:
    return DocumentEncoder(tok, recipe.data, recipe.model.pooling == "cls", recipe.model.bigram_buckets)


# --------------------------------------------------------------------------- --init


@dataclass
class InitSource:
    """A pretrained backbone for `train classify --init`: its tokenizer, the weights under the
    classifier's parameter names, and the architecture the classifier must take to hold them.

    One path for both layouts: a `pretrain mlm` run of ours (`embed.*`, `encoder.*`) and a
    Hugging Face BERT checkpoint ('minilm' or a folder; `bert.*`)."""

    name: str
    kind: str  # "mlm" | "bert"
    tokenizer: Any
    state: dict[str, torch.Tensor]
    vocab_size: int
    bigram_buckets: int
    encoder: Any  # TransformerConfig (mlm) or BertConfig (bert)

    def configure(self, m: ClassifierConfig) -> None:
        """Give `m` the checkpoint's architecture; dropout stays the recipe's own
        (`model.encoder.dropout`, `model.encoder.attn_dropout`)."""
        m.init, m.vocab_size = self.name, self.vocab_size
        if self.kind == "bert":
            m.bert = self.encoder.replace(add_pooler=False, hidden_dropout_prob=m.encoder.dropout,
                                          attention_probs_dropout_prob=m.encoder.attn_dropout)
            m.encoder = m.bert.to_transformer_config()  # for the record: the stack BERT runs
            m.bigram_buckets = 0
        else:
            m.encoder = self.encoder.replace(dropout=m.encoder.dropout, attn_dropout=m.encoder.attn_dropout)
            m.bigram_buckets, m.bert = self.bigram_buckets, None

    def load_into(self, model: EncoderClassifier) -> None:
        missing, unexpected = model.load_state_dict(self.state, strict=False)
        missing = [k for k in missing if not k.startswith("head.")]
        if missing or unexpected:
            raise UserError(f"--init {self.name}: weights do not fit the classifier "
                            f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def load_init(name: str) -> InitSource:
    """`name`: a `scratchformer pretrain mlm` run directory, or a BERT checkpoint
    ('minilm', or a folder in the Hugging Face layout)."""
    run = Path(name)
    if (run / "config.json").is_file() and (run / "tokenizer.json").is_file() and \
            json.loads((run / "config.json").read_text(encoding="utf-8")).get("task") == "mlm":
        from .mlm import MLMRecipe

        if not (run / "model.safetensors").is_file():
            raise UserError(f"--init {name}: the pretraining run has no model.safetensors yet")
        from safetensors.torch import load_file

        mlm = MLMRecipe.load_json(run / "config.json")
        state = {k: v for k, v in load_file(str(run / "model.safetensors")).items()
                 if k.startswith(("embed.", "encoder."))}
        return InitSource(str(name), "mlm", Tokenizer.load(run / "tokenizer.json"), state,
                          mlm.model.vocab_size, mlm.model.bigram_buckets, mlm.model.encoder)
    if (run / "config.json").is_file() and json.loads((run / "config.json").read_text(encoding="utf-8")).get("task"):
        raise UserError(f"--init {name}: that run is not a `pretrain mlm` run (nor a BERT checkpoint)")
    from ..interop.hf_bert import load_hf_bert

    bert, tok = load_hf_bert(name)
    state = {f"bert.{k}": v for k, v in bert.state_dict().items() if not k.startswith("pooler.")}
    return InitSource(str(name), "bert", tok, state, bert.config.vocab_size, 0, bert.config)


def train_classifier(recipe: ClassifyRecipe, out_dir: str | Path, resume: bool = False,
                     log=print) -> dict[str, Any]:
    """Load data, build tokenizer and model, train, then test the best checkpoint."""
    out_dir = Path(out_dir)
    if recipe.ensemble > 1:
        return train_ensemble(recipe, out_dir, resume, log)
    dc, mc = recipe.data, recipe.model
    data = load_classification(dc)
    source = None
    if resume:  # the saved recipe already holds the architecture (and the checkpoint the weights)
        tok = load_tokenizer(out_dir, mc)
    elif mc.init:
        source = load_init(mc.init)
        source.configure(mc)
        tok = source.tokenizer
        log(f"init: {source.kind} backbone from {mc.init} (its tokenizer; data.tokenizer is not used)")
    else:
        tok = build_tokenizer_for(dc, [t for t, _ in data.train], mc.bigram_buckets)
        mc.vocab_size = tok.vocab_size
    mc.n_classes = len(data.labels)
    if mc.bert is not None and dc.max_len > mc.bert.max_position_embeddings:
        raise UserError(f"data.max_len {dc.max_len} exceeds the checkpoint's "
                        f"{mc.bert.max_position_embeddings} positions; lower it")
    label_ids = {lab: i for i, lab in enumerate(data.labels)}
    encode = _encoder_for(recipe, tok)
    seed = recipe.train.seed
    train = EncodedSplit(data.train, encode, label_ids, dc, shuffle=True, seed=seed)
    valid = EncodedSplit(data.valid, encode, label_ids, dc, shuffle=False) if data.valid else None
    test = EncodedSplit(data.test, encode, label_ids, dc, shuffle=False) if data.test else None
    log(f"data: {len(train)} train / {len(valid or [])} valid / {len(test or [])} test, "
        f"{len(data.labels)} classes, {type(tok).__name__} vocab {tok.vocab_size}, "
        f"<unk> rate on valid {tok.unk_rate([t for t, _ in data.valid[:2000]]):.2%}, "
        f"padding {train.padding_fraction:.1%} of batch tokens (length-bucketed)")
    torch.manual_seed(seed)
    model = EncoderClassifier(mc)
    if source is not None:
        source.load_into(model)
    if mc.init and mc.encoder_lr_scale != 1.0:
        model.set_encoder_lr_scale(mc.encoder_lr_scale)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    task = ClassificationTask(model, recipe, tok, data.labels)
    valid_batches = valid.batches(0) if valid else None
    trainer = Trainer(task, train.batches, (lambda: valid_batches) if valid else None, recipe.train, out_dir)
    summary = trainer.fit(resume=resume)
    result: dict[str, Any] = {"train": summary}
    if test is not None:
        load_weights(model, out_dir / "model.safetensors")
        result["test"] = evaluate_split(task, test, out_dir, "test", data.meta)
        log(f"test: accuracy {result['test']['accuracy']:.4f}, macro-F1 {result['test']['macro_f1']:.4f}")
    return result


def train_ensemble(recipe: ClassifyRecipe, out_dir: Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Train `recipe.ensemble` members into `out_dir/member<i>` (seed + i), then report the
    ensemble (mean of the members' probabilities) on valid and test. With `resume`, finished
    members are kept and an interrupted one continues where it stopped."""
    done = train_members(recipe, out_dir, resume, train_classifier, lambda res: {
        "best_valid": res["train"].get("best_metric"), "test_accuracy": res.get("test", {}).get("accuracy"),
        "test_macro_f1": res.get("test", {}).get("macro_f1")}, log)
    ens = Classifier.load(out_dir)
    (out_dir / "labels.json").write_text(json.dumps(ens.labels, ensure_ascii=False, indent=1), encoding="utf-8")
    data = load_classification(recipe.data)
    result: dict[str, Any] = {"train": {"members": done}}
    if data.valid:
        rep = ens.evaluate(data.valid, out_dir, "valid", data.meta)
        result["train"]["best_metric"] = rep.get(recipe.train.metric, rep["accuracy"])
        log(f"ensemble valid: accuracy {rep['accuracy']:.4f}, macro-F1 {rep['macro_f1']:.4f}")
    if data.test:
        result["test"] = ens.evaluate(data.test, out_dir, "test", data.meta)
        members = ", ".join(f"{m['test_accuracy']:.4f}" for m in done if m["test_accuracy"] is not None)
        log(f"ensemble test: accuracy {result['test']['accuracy']:.4f}, "
            f"macro-F1 {result['test']['macro_f1']:.4f} (members: {members})")
    return result


def report_from_probs(probs: np.ndarray, gold: np.ndarray, labels: list[str], out_dir: Path | None,
                      name: str, meta: dict | None = None, extra: dict | None = None) -> dict[str, Any]:
    """The `evaluate_split` report from probabilities `(N, K)` in the order of the split."""
    preds = probs.argmax(-1)
    cm = M.confusion_matrix(gold, preds, len(labels))
    rep = M.report(cm, labels)
    rep["loss"] = float(-np.log(np.clip(probs[np.arange(len(gold)), gold], 1e-12, None)).mean()) if len(gold) else 0.0
    rep["n"] = int(len(gold))
    overlap = (meta or {}).get(f"{name}_in_train")
    if overlap:
        keep = np.ones(len(gold), bool)
        keep[np.asarray(overlap)] = False
        rep["accuracy_without_train_overlap"] = float((preds[keep] == gold[keep]).mean())
    rep.update(extra or {})
    if out_dir is not None:
        out_dir = Path(out_dir)
        (out_dir / f"{name}_metrics.json").write_text(json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
        M.plot_confusion(cm, labels, out_dir / f"confusion_{name}.png",
                         f"{name}: accuracy {rep['accuracy']:.3f}, macro-F1 {rep['macro_f1']:.3f}")
    return rep


def evaluate_split(task: ClassificationTask, split: EncodedSplit, out_dir: Path | None, name: str,
                   meta: dict | None = None) -> dict[str, Any]:
    """Full report on one split; writes `<name>_metrics.json` and `confusion_<name>.png`."""
    model = task.model
    was_training = model.training
    model.eval()
    with torch.no_grad():
        preds, gold, loss = task.predictions(split.batches(0))
    model.train(was_training)
    cm = M.confusion_matrix(gold, preds, len(task.labels))
    rep = M.report(cm, task.labels)
    rep["loss"] = loss
    rep["n"] = int(len(gold))
    overlap = (meta or {}).get(f"{name}_in_train")
    if overlap:  # e.g. rotten-tomatoes: test snippets whose text also occurs in train
        keep = np.ones(len(gold), bool)
        keep[np.asarray(overlap)] = False
        # EncodedSplit batches are length-sorted, so map back through the sampler's order
        order = np.concatenate([np.asarray(b) for b in split.sampler.epoch_batches(0)])
        kept = keep[order]
        rep["accuracy_without_train_overlap"] = float((preds[kept] == gold[kept]).mean())
    if out_dir is not None:
        out_dir = Path(out_dir)
        (out_dir / f"{name}_metrics.json").write_text(json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
        M.plot_confusion(cm, task.labels, out_dir / f"confusion_{name}.png",
                         f"{name}: accuracy {rep['accuracy']:.3f}, macro-F1 {rep['macro_f1']:.3f}")
    return rep


class Classifier:
    """A trained classifier, loaded from its run directory.

    >>> clf = Classifier.load("runs/thucnews")
    >>> clf.predict(["火箭队击败湖人队"])[0]["label"]
    'sports'
    """

    def __init__(self, model: EncoderClassifier, tokenizer, labels: list[str], recipe: ClassifyRecipe):
        self.model, self.tokenizer, self.labels, self.recipe = model.eval(), tokenizer, labels, recipe
        self.task = ClassificationTask(model, recipe, tokenizer, labels)
        self._encode = _encoder_for(recipe, tokenizer)

    @classmethod
    def load(cls, run_dir: str | Path) -> "Classifier":
        """A finished run directory; an ensemble run gives an `EnsembleClassifier`."""
        run_dir = Path(run_dir)
        if (run_dir / MEMBERS).exists() and (run_dir / "config.json").exists():
            recipe = ClassifyRecipe.load_json(run_dir / "config.json")
            members = [cls.load(run_dir / f"member{i}") for i in range(recipe.ensemble)]
            return EnsembleClassifier(members, recipe)
        recipe = load_run_recipe(run_dir, ClassifyRecipe, "classify",
                                 ("tokenizer.json", "labels.json", "model.safetensors"), "classification")
        model = EncoderClassifier(recipe.model)
        load_weights(model, run_dir / "model.safetensors")
        labels = json.loads((run_dir / "labels.json").read_text(encoding="utf-8"))
        return cls(model, load_tokenizer(run_dir, recipe.model), labels, recipe)

    def _batch(self, texts: Sequence[str]) -> ClassifyBatch:
        docs = []
        for i, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise UserError(f"text {i + 1} is empty: there is nothing to classify")
            docs.append(self._encode(text))
        return collate(docs, [0] * len(docs), self._encode.bigrams)

    @torch.no_grad()
    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """`(N, n_classes)` probabilities."""
        if isinstance(texts, str):
            texts = [texts]
        out = []
        for i in range(0, len(texts), batch_size):
            logits = self.task.logits(self._batch(texts[i : i + batch_size]))
            out.append(torch.softmax(logits.float(), -1).numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.labels)))

    def predict(self, texts: Sequence[str], batch_size: int = 64) -> list[dict[str, Any]]:
        """One dict per text: `label`, its `score`, and `probs` for every label."""
        probs = self.predict_proba(texts, batch_size)
        return [{"label": self.labels[int(p.argmax())], "score": float(p.max()),
                 "probs": {lab: float(x) for lab, x in zip(self.labels, p)}} for p in probs]

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", meta: dict | None = None) -> dict[str, Any]:
        _check_labels(pairs, self.labels)
        split = EncodedSplit(pairs, self._encode, {lab: i for i, lab in enumerate(self.labels)},
                             self.recipe.data, shuffle=False)
        return evaluate_split(self.task, split, Path(out_dir) if out_dir else None, name, meta)

    @torch.no_grad()
    def split_proba(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """`(N, n_classes)` probabilities for labelled pairs, in their order (empty texts allowed,
        as in evaluation)."""
        split = EncodedSplit(pairs, self._encode, {lab: i for i, lab in enumerate(self.labels)},
                             self.recipe.data, shuffle=False)
        out = np.zeros((len(pairs), len(self.labels)))
        for idx, b in zip(split.sampler.epoch_batches(0), split.batches(0)):
            out[np.asarray(idx)] = torch.softmax(self.task.logits(b).float(), -1).numpy()
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
    unknown = sorted({lab for _, lab in pairs} - set(labels))
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

    def predict_proba(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.mean([m.predict_proba(texts, batch_size) for m in self.members], axis=0)

    predict = Classifier.predict

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", meta: dict | None = None) -> dict[str, Any]:
        _check_labels(pairs, self.labels)
        probs = np.mean([m.split_proba(pairs) for m in self.members], axis=0)
        gold = np.asarray([self.labels.index(lab) for _, lab in pairs], dtype=np.int64)
        return report_from_probs(probs, gold, self.labels, Path(out_dir) if out_dir else None, name, meta,
                                 {"members": len(self.members)})

    def attention(self, text: str):
        return self.members[0].attention(text)
