"""The inspect slot of masked-LM pretraining: what `attention` and `doctor` need from an MLM run
(the protocol: `tasks/inspection.py`)."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ...data.specials import BOS_ID, CLS_ID, EOS_ID, NUM_SPECIALS, PAD_ID, UNK_ID
from ...data.tokenizers import Tokenizer, encode_with_bigrams
from ...errors import UserError
from ...models.mlm import IGNORE, MaskedLM, mask_tokens
from ...train.checkpoint import load_weights
from ..inspection import (ENC, AttentionResult, AttentionView, EmbeddingTable, Subject, attention_modules,
                          attention_of, chunks, encoder_views, initial_copy, pad, sample, seen_counts, special_kinds)
from .data import pretraining_texts
from .pipeline import held_out, training_split
from .recipe import MLMRecipe

TASK = "mlm"


def load(run_dir: Path) -> "MLMInspector":
    return MLMInspector(Path(run_dir))


class MLMInspector:
    task = TASK

    def __init__(self, run_dir: Path):
        self.run_dir, self.notes = run_dir, []
        if not (run_dir / "model.safetensors").is_file():
            raise UserError(f"{run_dir} has no model.safetensors yet: the pretraining has not saved a model")
        self.recipe = MLMRecipe.load_json(run_dir / "config.json")
        self.model = MaskedLM(self.recipe.model).eval()
        load_weights(self.model, run_dir / "model.safetensors")
        self.tok = Tokenizer.load(run_dir / "tokenizer.json")
        self.specials = {CLS_ID: "<cls>", BOS_ID: "<bos>", EOS_ID: "<eos>"}

    def _encode(self, text: str) -> tuple[list[int], list[int] | None]:
        ids, bis = encode_with_bigrams(self.tok, text, self.recipe.model.bigram_buckets)
        n = self.recipe.data.max_len
        return ids[:n], None if bis is None else bis[:n]

    def _token(self, i: int) -> str:
        return "[MASK]" if i == self.recipe.model.mask_id else self.tok.id_to_token(i)

    def _weights(self, ids, bis):
        with attention_of(self.model.encoder) as got:  # no position chosen: only the encoder runs for real
            self.model(ids, torch.full_like(ids, IGNORE), bis)
        return got.weights

    def attention(self, text: str) -> AttentionResult:
        ids, bis = self._encode(text)
        if not ids:
            raise UserError("the text is empty")
        with torch.no_grad():
            w = self._weights(torch.tensor([ids]), None if bis is None else torch.tensor([bis]))
        tokens = [self._token(i) for i in ids]
        return AttentionResult(text, [AttentionView(ENC, tokens, tokens, [x[0] for x in w])], task=self.task)

    def _docs(self, data: str | None, split: str) -> tuple[list[str], list[str], str]:
        """(sample documents, training documents, name): the pipeline's seeded hold-out."""
        valid, train = held_out(pretraining_texts(self.recipe.data, log=lambda m: None), self.recipe.data,
                                self.recipe.train.seed)
        if data:
            lines = [t.strip() for t in Path(data).read_text(encoding="utf-8").split("\n") if t.strip()]
            return lines, train, Path(data).name
        if split == "test":
            raise UserError("an MLM run holds out validation documents only: use --split valid (or train) or --data FILE")
        return (valid if split == "valid" else train), train, f"the {split} documents"

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        mc, dc = self.recipe.model, self.recipe.data
        docs, train, name = self._docs(data, split)
        g = torch.Generator().manual_seed(0)
        batches = []
        for part in chunks([e for e in (self._encode(t) for t in sample(docs, n)) if e[0]]):
            ids = pad([i for i, _ in part])
            bis = pad([b for _, b in part]) if part[0][1] is not None else None
            inputs, labels = mask_tokens(ids, mc.mask_id, mc.mask_id, mc.n_specials, dc.mask_prob, dc.span, g)
            batches.append((inputs, labels, bis))

        def loss(b):
            logits, labels = self.model(*b)
            return F.cross_entropy(logits.float(), labels) if len(labels) else logits.sum() * 0

        def attention(b):
            real = b[0] != PAD_ID
            return [encoder_views(self._weights(b[0], b[2]), real, special_kinds(b[0], self.specials))]

        fresh = initial_copy(self.model, mc, self.recipe.train.seed)
        split_ = training_split(train, self.tok, self.recipe)  # the batches the pipeline trained on
        seen = seen_counts(self.run_dir / "model.safetensors", split_.batches, lambda b: [b.inputs], [mc.vocab_size],
                             lambda: [torch.tensor([i for t in train for i in self._encode(t)[0]])], self.notes)
        table = EmbeddingTable("token embedding", self.model.embed.tokens.weight, fresh.embed.tokens.weight,
                               seen.counts[0], self._token, set(range(NUM_SPECIALS)) | {mc.mask_id},
                               data_counts=seen.data[0], saved_step=seen.step)
        return Subject(self.run_dir, self.task, self.model, batches, loss, attention, lambda b: [b[0]],
                       attention_modules(self.model), [table], PAD_ID, UNK_ID, sum(len(b[0]) for b in batches),
                       name, self.notes)
