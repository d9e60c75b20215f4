"""`train translate --init e5`: a pretrained XLM-R-type encoder (multilingual-e5-small, or a
folder in the Hugging Face layout) as the encoder of a translation run.

The source side becomes the encoder's own tokenizer (`XLMRSourceTokenizer`: XLM-R ids, `<pad>`
= 1, `<s> .. </s>`), its 250k-piece vocabulary pruned to the training sources plus a margin as
in classification (`data/vocab_prune.py`); the target side keeps the recipe's tokenizer. The
decoder is ours, at the encoder's width (no projection between them)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...data.bert_tokenizer import XLMRTokenizer
from ...data.tokenizers import XLMRSourceTokenizer
from ...errors import UserError
from ...models.bert import BertConfig
from ...models.seq2seq import Seq2Seq, Seq2SeqConfig

PRUNE_ABOVE = 100_000  # pieces: e5's 250k are pruned by default


@dataclass
class PretrainedEncoder:
    """The source tokenizer, the weights under `Seq2Seq`'s names (`bert.*`) and the config."""

    name: str
    tokenizer: XLMRSourceTokenizer
    state: dict[str, torch.Tensor]
    config: BertConfig

    def configure(self, m: Seq2SeqConfig) -> None:
        """Give the recipe's model the encoder's architecture; the decoder takes its width."""
        m.bert, m.src_vocab_size = self.config, self.tokenizer.vocab_size
        d = self.config.hidden_size
        if d % m.transformer.n_heads:
            raise UserError(f"the decoder must be {d} wide like the pretrained encoder, which "
                            f"model.transformer.n_heads={m.transformer.n_heads} does not divide; try n_heads=6")
        m.transformer = m.transformer.replace(d_model=d)

    def load_into(self, model: Seq2Seq) -> None:
        model.bert.load_state_dict({k[len("bert."):]: v for k, v in self.state.items()}, strict=True)


def load_encoder(m: Seq2SeqConfig, sources: list[str], log=print) -> PretrainedEncoder:
    """`m.init`: 'e5' (multilingual-e5-small; aliases multilingual-e5-small,
    intfloat/multilingual-e5-small) or an XLM-R checkpoint folder. `sources`: the training
    source texts, for pruning the vocabulary (`m.prune_vocab`, `m.vocab_margin`)."""
    from ...interop.hf_bert import load_hf_bert

    bert, tok = load_hf_bert(m.init)
    if not isinstance(tok, XLMRTokenizer):
        raise UserError(f"--init {m.init}: a translation encoder must be XLM-R-type (a SentencePiece vocabulary "
                        "covering the source language, e.g. --init e5); this one is a WordPiece BERT")
    tok = tok.with_prefix(m.src_prefix)
    state = {f"bert.{k}": v for k, v in bert.state_dict().items() if not k.startswith("pooler.")}
    cfg = bert.config.replace(add_pooler=False)
    prune = m.prune_vocab if m.prune_vocab is not None else tok.vocab_size > PRUNE_ABOVE
    if prune:
        small, p = tok.pruned(sources, m.vocab_margin)
        key = "bert.embeddings.word.weight"
        full = state[key]
        state[key] = full[torch.tensor(p.kept)].clone()  # (kept, C): row i = old row kept[i]
        log(f"init: {p.line(tok.vocab_size)}; {state[key].numel() / 1e6:.1f}M word-embedding parameters "
            f"instead of {full.numel() / 1e6:.1f}M")
        tok, cfg = small, cfg.replace(vocab_size=len(p.kept))
    return PretrainedEncoder(str(m.init), XLMRSourceTokenizer(tok), state, cfg)
