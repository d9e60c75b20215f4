"""The inspect slot of translation: what `attention` and `doctor` need from a translation run
(encoder self-, decoder self- and cross-attention; the protocol: `tasks/inspection.py`)."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from ...data.specials import BOS_ID, EOS_ID, NUM_SPECIALS, PAD_ID, UNK_ID
from ..inspection import (CROSS, DEC, ENC, AttentionBatch, AttentionResult, AttentionView, EmbeddingTable, Subject,
                          attention_modules, attention_of, chunks, encoder_views, initial_copy, pad, sample,
                          seen_counts, special_kinds)
from ..runs import split_of
from .data import EncodedSplit, load_translation, read_parallel_spec
from .inference import FINAL, Translator, _final_weights

TASK = "translate"


def load(run_dir: Path) -> "TranslateInspector":
    return TranslateInspector(Path(run_dir))


class TranslateInspector:
    task = TASK

    def __init__(self, run_dir: Path):
        self.run_dir, self.notes = run_dir, []
        self.tr = Translator.load(run_dir)
        self.model = getattr(self.tr.model, "members", [self.tr.model])[0]
        if hasattr(self.tr.model, "members"):
            self.notes.append("an ensemble: member 0 is examined")
        if self.model.cfg.kind == "lstm":
            from ...errors import UserError
            from ...models.rnn_seq2seq import NO_ATTENTION

            raise UserError(f"{run_dir}: {NO_ATTENTION}")

    def _forward(self, src: torch.Tensor, tgt_in: torch.Tensor):
        """Logits and the three kinds of attention."""
        m = self.model
        with attention_of(m.transformer.encoder) as enc:
            memory, src_mask = m.encode(src)
        enc_w = enc.weights
        logits, dec = m.decode(tgt_in, memory, src_mask, need_weights=True)
        return logits, enc_w, [s for s, _ in dec], [c for _, c in dec]

    def attention(self, text: str) -> AttentionResult:
        tr = self.tr
        src_ids = tr.encode([text], tr.decode_config())[0]
        hyp = tr.hypotheses([text])[0]
        out_ids = hyp.tokens + [EOS_ID]
        with torch.no_grad():
            _, enc, dec, cross = self._forward(torch.tensor([src_ids]), torch.tensor([[BOS_ID] + out_ids[:-1]]))
        show = lambda tok, i: tok.decode([i], skip_special=False).strip() or tok.id_to_token(i)  # noqa: E731
        src = [show(tr.src_tok, i) for i in src_ids]
        tgt_in = [show(tr.tgt_tok, i) for i in [BOS_ID] + out_ids[:-1]]
        out = [show(tr.tgt_tok, i) for i in out_ids]
        views = [AttentionView(ENC, src, src, [w[0] for w in enc], note="source over source"),
                 AttentionView(DEC, tgt_in, tgt_in, [w[0] for w in dec], note="decoder input over earlier decoder input"),
                 AttentionView(CROSS, out, src, [w[0] for w in cross], note="rows: output tokens, columns: source tokens")]
        return AttentionResult(text, views, output=tr.tgt_tok.decode(hyp.tokens), task=self.task)

    def _pairs(self, data: str | None, split: str):
        if data:
            return read_parallel_spec(data), Path(data).name
        return split_of(load_translation(self.tr.recipe.data), split, self.run_dir), f"the {split} split"

    def _encode_pair(self, s: str, t: str) -> tuple[list[int], list[int], list[int]]:
        y = self.tr.tgt_tok.encode(t)
        return self.tr.src_tok.encode(s) + [EOS_ID], [BOS_ID] + y, y + [EOS_ID]

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        recipe, tr = self.tr.recipe, self.tr
        pairs, name = self._pairs(data, split)
        batches = []
        for part in chunks([self._encode_pair(s, t) for s, t in sample(pairs, n)]):
            batches.append(tuple(pad([p[i] for p in part]) for i in range(3)))  # src, tgt_in, tgt_out

        def loss(b):
            logits = self.model(b[0], b[1]).float()
            return F.cross_entropy(logits.flatten(0, 1), b[2].flatten(), ignore_index=PAD_ID)

        specials = {BOS_ID: "<bos>", EOS_ID: "<eos>"}

        def attention(b):
            src, tgt_in, _ = b
            _, enc, dec, cross = self._forward(src, tgt_in)
            s_real, t_real = src != PAD_ID, tgt_in != PAD_ID
            return [encoder_views(enc, s_real, special_kinds(src, specials)),
                    encoder_views(dec, t_real, special_kinds(tgt_in, specials), DEC, causal=True),
                    AttentionBatch(CROSS, cross, t_real, s_real, special_kinds(src, specials), self_attention=False)]

        m = self.model
        return Subject(self.run_dir, self.task, m, batches, loss, attention, lambda b: [b[0], b[1]],
                       attention_modules(m), self._embeddings(), PAD_ID, UNK_ID, sum(len(b[0]) for b in batches),
                       name, self.notes)

    def _embeddings(self) -> list[EmbeddingTable]:
        recipe, tr, m = self.tr.recipe, self.tr, self.model
        fresh = initial_copy(m, recipe.model, recipe.train.seed)
        dc = recipe.data
        data = load_translation(dc)
        # the pairs as the pipeline batched them (same tokenizers, length limit and seed)
        train = EncodedSplit(data.train, tr.src_tok, tr.tgt_tok, dc, shuffle=True, seed=recipe.train.seed,
                             max_len=dc.max_len)
        shared = m.cfg.share_embeddings
        sizes = [m.cfg.src_vocab_size] + ([] if shared else [m.cfg.tgt_vocab_size])
        final = self.run_dir / FINAL
        weights = self.run_dir / (_final_weights(final) if final.exists() else "model.safetensors")

        def ids_of(b):  # a shared table sees source and target ids alike
            return [torch.cat([b.src.flatten(), b.tgt_in.flatten()])] if shared else [b.src, b.tgt_in]

        def whole():
            src = torch.tensor([i for s, _ in data.train for i in tr.src_tok.encode(s)])
            tgt = torch.tensor([i for _, t in data.train for i in tr.tgt_tok.encode(t)])
            return [src] if shared else [src, tgt]

        seen = seen_counts(weights, train.batches, ids_of, sizes, whole, self.notes)
        if m.src_embed is None:  # a pretrained encoder (model.init): its table is not ours to diagnose
            self.notes.append(f"the source side is the pretrained encoder {m.cfg.init}: only the target embedding is examined")
            tables = []
        else:
            tables = [EmbeddingTable("source embedding", m.src_embed.tokens.weight, fresh.src_embed.tokens.weight,
                                     seen.counts[0], tr.src_tok.id_to_token, set(range(NUM_SPECIALS)),
                                     data_counts=seen.data[0], saved_step=seen.step,
                                     token_dropout=getattr(m.cfg, "src_token_dropout", 0.0))]
        if not shared:
            tables.append(EmbeddingTable("target embedding", m.tgt_embed.tokens.weight, fresh.tgt_embed.tokens.weight,
                                         seen.counts[1], tr.tgt_tok.id_to_token, set(range(NUM_SPECIALS)),
                                         data_counts=seen.data[1], saved_step=seen.step,
                                         token_dropout=getattr(m.cfg, "tgt_token_dropout", 0.0)))
        return tables
