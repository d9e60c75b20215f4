"""The inspect slot of classification: what `attention` and `doctor` need from a classifier run
(the protocol: `tasks/inspection.py`)."""
from __future__ import annotations

from pathlib import Path

import torch

from ...data.specials import BOS_ID, CLS_ID, EOS_ID, NUM_SPECIALS, PAD_ID, UNK_ID
from ...errors import UserError
from ..inspection import (ENC, AttentionResult, AttentionView, EmbeddingTable, Subject, attention_modules, chunks,
                          encoder_views, initial_copy, sample, seen_counts, special_kinds)
from ..runs import split_of
from .data import EncodedSplit, load_classification, without_holdout_fold
from .inference import Classifier

TASK = "classify"


def load(run_dir: Path) -> "ClassifyInspector":
    return ClassifyInspector(Path(run_dir))


class ClassifyInspector:
    task = TASK

    def __init__(self, run_dir: Path):
        from ..your_model import check_notes

        self.run_dir, self.notes = run_dir, check_notes(run_dir)
        clf = Classifier.load(run_dir, blend=False)  # the Transformer, not its blend with TF-IDF
        if hasattr(clf, "members"):  # an ensemble run: look at its first member
            self.notes.append("an ensemble run: member 0 is examined")
            clf, self.run_dir = clf.members[0], run_dir / "member0"
        if clf.recipe.model.kind == "lstm":
            from ...models.rnn import NO_ATTENTION

            raise UserError(f"{run_dir}: {NO_ATTENTION}")
        self.clf = clf
        tok = clf.tokenizer
        if hasattr(tok, "cls_id"):  # a BERT tokenizer: the checkpoint's own ids
            self.pad_id, self.unk_id = tok.pad_id, tok.unk_id
            self.specials = {tok.cls_id: "[CLS]", tok.sep_id: "[SEP]"}
        else:
            self.pad_id, self.unk_id = PAD_ID, UNK_ID
            self.specials = {CLS_ID: "<cls>", BOS_ID: "<bos>", EOS_ID: "<eos>"}

    def attention(self, text: str) -> AttentionResult:
        tokens, weights = self.clf.attention(text)
        return AttentionResult(text, [AttentionView(ENC, tokens, tokens, weights)], task=self.task)

    def _pairs(self, data: str | None, split: str) -> tuple[list[tuple[str, str]], str]:
        dc = self.clf.recipe.data
        if data:
            from ...data.readers import read_labeled_file

            return read_labeled_file(data, dc.text_col, dc.label_col), Path(data).name
        return split_of(load_classification(dc), split, self.run_dir), f"the {split} split"

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        clf = self.clf
        pairs, name = self._pairs(data, split)
        unknown = sorted({lab for _, lab in pairs} - set(clf.labels))
        if unknown:
            raise UserError(f"labels {unknown[:5]} were not seen in training; known labels: {clf.labels}")
        batches = []
        for part in chunks(sample(pairs, n)):
            b = clf._batch([t for t, _ in part])
            b.labels = torch.tensor([clf.labels.index(lab) for _, lab in part])
            batches.append(b)

        def attention(b):
            _, weights = clf.model.features(b.ids, b.bigrams, need_weights=True)
            return [encoder_views(weights, b.ids != self.pad_id, special_kinds(b.ids, self.specials))]

        return Subject(self.run_dir, self.task, clf.model, batches,
                       loss=lambda b: clf.task.loss_sum(b)[0] / len(b.labels), attention=attention,
                       input_ids=lambda b: [b.ids], heads=attention_modules(clf.model),
                       embeddings=self._embeddings(), pad_id=self.pad_id, unk_id=self.unk_id,
                       n_samples=sum(len(b.labels) for b in batches), data_name=name, notes=self.notes)

    def _embeddings(self) -> list[EmbeddingTable]:
        clf, recipe = self.clf, self.clf.recipe
        if recipe.model.kind == "yours":
            self.notes.append("embedding rows not compared: the model is your own (--model)")
            return []
        if recipe.model.init or not hasattr(clf.model, "embed"):
            self.notes.append("embedding rows not compared: the run started from pretrained weights")
            return []
        fresh = initial_copy(clf.model, recipe.model, recipe.train.seed)
        emb, emb0 = clf.model.embed, fresh.embed
        sizes = [emb.tokens.num_embeddings] + ([emb.bigrams.num_embeddings] if emb.bigrams is not None else [])
        data, _ = without_holdout_fold(load_classification(recipe.data), recipe.data)
        # the training split as the pipeline encoded and batched it (same encoder, same seed)
        train = EncodedSplit(data.train, clf._encode, {lab: i for i, lab in enumerate(data.labels)}, recipe.data,
                             shuffle=True, seed=recipe.train.seed)

        def ids_of(b):
            return [b.ids] + ([b.bigrams] if b.bigrams is not None else [])

        def whole():
            segs = [s for d in train.docs for s in d]
            return [torch.tensor([i for s in segs for i, _ in s])] + (
                [torch.tensor([g for s in segs for _, g in s])] if emb.bigrams is not None else [])

        seen = seen_counts(self.run_dir / "model.safetensors", train.batches, ids_of, sizes, whole, self.notes)
        tables = [EmbeddingTable("token embedding", emb.tokens.weight, emb0.tokens.weight, seen.counts[0],
                                 clf.tokenizer.id_to_token, set(range(NUM_SPECIALS)), data_counts=seen.data[0],
                                 saved_step=seen.step, token_dropout=clf.recipe.model.token_dropout)]
        if emb.bigrams is not None:
            tables.append(EmbeddingTable("bigram embedding", emb.bigrams.weight, emb0.bigrams.weight, seen.counts[1],
                                         str, {0}, hashed=True, data_counts=seen.data[1], saved_step=seen.step))
        return tables
