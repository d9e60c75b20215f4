"""`train classify --init`: start from a pretrained backbone (a `pretrain mlm` run of ours, a
Hugging Face BERT checkpoint such as 'minilm', or multilingual-e5-small: 'e5')."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...data.bert_tokenizer import XLMRTokenizer
from ...data.tokenizers import Tokenizer
from ...errors import UserError
from ...models.classifier import ClassifierConfig, EncoderClassifier
from ..runs import RunDir


PRUNE_ABOVE = 100_000  # pieces: e5's 250k are pruned by default, MiniLM's 30k WordPieces are not


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
        if m.init_layers is not None:
            have = self.encoder.num_hidden_layers if self.kind == "bert" else self.encoder.n_layers
            if m.init_layers > have:
                raise UserError(f"model.init_layers={m.init_layers}, but --init {self.name} has {have} layers")
        if self.kind == "bert":
            m.bert = self.encoder.replace(add_pooler=False, hidden_dropout_prob=m.encoder.dropout,
                                          attention_probs_dropout_prob=m.encoder.attn_dropout,
                                          num_hidden_layers=m.init_layers or self.encoder.num_hidden_layers)
            m.encoder = m.bert.to_transformer_config()  # for the record: the stack BERT runs
            m.bigram_buckets = 0
        else:
            m.encoder = self.encoder.replace(dropout=m.encoder.dropout, attn_dropout=m.encoder.attn_dropout,
                                             n_layers=m.init_layers or self.encoder.n_layers)
            m.bigram_buckets, m.bert = self.bigram_buckets, None

    def for_texts(self, texts: list[str], m: ClassifierConfig, log=print) -> "InitSource":
        """This source with its vocabulary pruned to `texts` (+ `m.vocab_margin` pieces) when
        `m.prune_vocab` says so (None: a Unigram vocabulary of over PRUNE_ABOVE pieces)."""
        unigram = isinstance(self.tokenizer, XLMRTokenizer)
        prune = m.prune_vocab if m.prune_vocab is not None else unigram and self.tokenizer.vocab_size > PRUNE_ABOVE
        if not prune:
            return self
        if not unigram:
            raise UserError(f"model.prune_vocab: --init {self.name} has a WordPiece vocabulary; pruning "
                            "works on SentencePiece (Unigram) vocabularies such as e5's: set model.prune_vocab=false")
        tok, p = self.tokenizer.pruned(texts, m.vocab_margin)
        key = "bert.embeddings.word.weight"
        state = dict(self.state)
        state[key] = state[key][torch.tensor(p.kept)].clone()  # (kept, C): row i = old row kept[i]
        log(f"init: {p.line(self.tokenizer.vocab_size)}; {state[key].numel() / 1e6:.1f}M word-embedding "
            f"parameters instead of {self.state[key].numel() / 1e6:.1f}M")
        return InitSource(self.name, self.kind, tok, state, len(p.kept), self.bigram_buckets,
                          self.encoder.replace(vocab_size=len(p.kept)))

    def load_into(self, model: EncoderClassifier) -> None:
        n = model.cfg.init_layers
        state = self.state if n is None else {k: v for k, v in self.state.items() if _layer(k) < n}
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("head.")]
        if missing or unexpected:
            raise UserError(f"--init {self.name}: weights do not fit the classifier "
                            f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def _layer(key: str) -> int:
    """The layer index of a state-dict key (`...encoder.layers.3.ffn...` -> 3); -1 outside the layers."""
    parts = key.split(".")
    for a, b in zip(parts, parts[1:]):
        if a == "layers" and b.isdigit():
            return int(b)
    return -1


def load_init(name: str) -> InitSource:
    """`name`: a `scratchformer pretrain mlm` run directory, or a BERT checkpoint
    ('minilm', or a folder in the Hugging Face layout)."""
    run = Path(name)
    task = None
    if (run / "config.json").is_file() and not (run / "tokenizer_config.json").is_file():  # a Hugging Face
        task = RunDir(run).task_name()  # folder (tokenizer_config.json beside config.json) is not a run
    if task == "mlm" and (run / "tokenizer.json").is_file():
        from ..mlm import MLMRecipe

        if not (run / "model.safetensors").is_file():
            raise UserError(f"--init {name}: the pretraining run has no model.safetensors yet")
        from safetensors.torch import load_file

        mlm = MLMRecipe.load_json(run / "config.json")
        state = {k: v for k, v in load_file(str(run / "model.safetensors")).items()
                 if k.startswith(("embed.", "encoder."))}
        return InitSource(str(name), "mlm", Tokenizer.load(run / "tokenizer.json"), state,
                          mlm.model.vocab_size, mlm.model.bigram_buckets, mlm.model.encoder)
    if task:
        raise UserError(f"--init {name}: that run is not a `pretrain mlm` run (nor a BERT checkpoint)")
    from ...interop.hf_bert import load_hf_bert
    from ...interop.zoo import symmetric_prefix

    bert, tok = load_hf_bert(name)
    if symmetric_prefix(name):  # the model card's prefix for classification-like (symmetric) tasks
        tok = tok.with_prefix(symmetric_prefix(name))
    state = {f"bert.{k}": v for k, v in bert.state_dict().items() if not k.startswith("pooler.")}
    return InitSource(str(name), "bert", tok, state, bert.config.vocab_size, 0, bert.config)
