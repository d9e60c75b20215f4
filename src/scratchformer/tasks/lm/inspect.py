"""The inspect slot of language models: what `attention` and `doctor` need from an LM run (the
protocol: `tasks/inspection.py`)."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ...data.specials import BOS_ID, EOS_ID, NUM_SPECIALS, PAD_ID, UNK_ID
from ...errors import UserError
from ..inspection import (ENC, AttentionResult, AttentionView, EmbeddingTable, Subject, attention_modules,
                          attention_of, chunks, encoder_views, initial_copy, sample, seen_counts, special_kinds)
from .data import EncodedSplit, encode_text, load_lm_text
from .inference import LanguageModel

TASK = "lm"
VIEW = "causal self-attention"


def load(run_dir: Path) -> "LMInspector":
    return LMInspector(Path(run_dir))


class LMInspector:
    task = TASK

    def __init__(self, run_dir: Path):
        from ..your_model import check_notes

        self.run_dir, self.notes = run_dir, check_notes(run_dir)
        self.lm = LanguageModel.load(run_dir)

    def _weights(self, ids: torch.Tensor):
        if getattr(self.lm.model, "cfg", None) is not None and hasattr(self.lm.model, "net"):  # the learner's own
            return self.lm.model(ids, need_weights=True)[1]  # read from what it computes (models/your_attention.py)
        with attention_of(self.lm.model.encoder) as got:
            self.lm.model(ids)
        return got.weights

    def attention(self, text: str) -> AttentionResult:
        ids, _ = self.lm.encode_prompt(text)
        ids = ids[-self.lm.recipe.data.context:]
        with torch.no_grad():
            w = self._weights(torch.tensor([ids]))
        tokens = [self.lm.tokenizer.id_to_token(i) for i in ids]
        return AttentionResult(text, [AttentionView(VIEW, tokens, tokens, [x[0] for x in w],
                                                    note="rows: queries, columns: keys; a token sees only earlier ones")],
                               task=self.task)

    def _ids(self, text: str) -> list[int]:
        return self.lm.tokenizer.encode(text)

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        recipe, model = self.lm.recipe, self.lm.model
        if split == "test" and not data:
            raise UserError("a language-model run has a train and a valid text, no test split: use --split valid or --data FILE")
        text = load_lm_text(recipe.data)  # the run's text, split as in training
        if data:
            sample_text, name = Path(data).read_text(encoding="utf-8"), Path(data).name
        else:
            sample_text, name = (text.train if split == "train" else text.valid), f"the {split} text"
        ids, ctx = self._ids(sample_text), recipe.data.context
        if len(ids) < ctx + 1:
            raise UserError(f"{name} has {len(ids)} tokens, fewer than one window of {ctx + 1}")
        starts = sample(list(range(0, len(ids) - ctx, max(1, ctx // 2))), n)
        batches = [torch.tensor([ids[s:s + ctx + 1] for s in part]) for part in chunks(sorted(starts))]
        loss = lambda b: F.cross_entropy(model(b[:, :-1]).flatten(0, 1).float(), b[:, 1:].flatten())  # noqa: E731

        def attention(b):
            x = b[:, :-1]
            return [encoder_views(self._weights(x), x != PAD_ID, special_kinds(x, {BOS_ID: "<bos>", EOS_ID: "<eos>"}),
                                  VIEW, causal=True)]

        ours = attention_modules(model).get(ENC, [])
        heads = {VIEW: ours} if ours else {}  # a learner's model: its heads are not ours to switch off
        if recipe.model.yours is not None:  # their embedding is their own: no table of ours to compare
            self.notes.append("embedding rows not compared: the model is your own (--model)")
            return Subject(self.run_dir, self.task, model, batches, loss, attention, lambda b: [b],
                           heads, [], PAD_ID, UNK_ID, sum(len(b) for b in batches), name, self.notes)
        fresh = initial_copy(model, recipe.model, recipe.train.seed)
        dc = recipe.data
        train_ids = encode_text(self.lm.tokenizer, text.train)
        train = EncodedSplit(train_ids, dc.context, dc.batch_size, recipe.train.seed,
                             dc.min_length if dc.random_length else None)  # the windows the pipeline trained on
        seen = seen_counts(self.run_dir / "model.safetensors", train.batches, lambda b: [b.ids],
                             [model.cfg.vocab_size], lambda: [torch.as_tensor(train_ids, dtype=torch.long)], self.notes)
        table = EmbeddingTable("token embedding (tied with the output layer)", model.embed.tokens.weight,
                               fresh.embed.tokens.weight, seen.counts[0], self.lm.tokenizer.id_to_token,
                               set(range(NUM_SPECIALS)), data_counts=seen.data[0], saved_step=seen.step)
        return Subject(self.run_dir, self.task, model, batches, loss, attention, lambda b: [b],
                       heads, [table], PAD_ID, UNK_ID, sum(len(b) for b in batches), name, self.notes)
