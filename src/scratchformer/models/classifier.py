"""Encoder classifier: embeddings -> encoder -> pooling -> linear head.

Two backbones, one head:
  - ours (default): `Embeddings` (+ optional hashed bigram embeddings) -> our `Encoder`,
    trained from scratch or started from a `scratchformer pretrain mlm` run;
  - BERT (`cfg.bert` set): a `BertEncoder` started from a Hugging Face checkpoint such as
    all-MiniLM-L6-v2 (`--init minilm`).

Long documents are split into segments upstream; each segment is encoded on its own and
the segment vectors of a document are pooled into one (`doc_index` says which segment
belongs to which document).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import UserError
from ..config import JsonConfig, check_buckets, check_count, check_table
from ..nn import Encoder, Linear, TransformerConfig
from ..nn.static_encoder import static_encode
from .bert import BertConfig, BertEncoder
from .embedding import Embeddings, token_dropout
from .pooling import POOLINGS, masked_pool, pool_segments
from .your_model import YourModelConfig, build_yours



KINDS = ("transformer", "lstm", "yours")


@dataclass
class ClassifierConfig(JsonConfig):
    kind: str = "transformer"  # or "lstm": the recurrent baseline (models/rnn.py), sized by `encoder`
    vocab_size: int = 0
    n_classes: int = 2
    encoder: TransformerConfig = field(default_factory=TransformerConfig)
    pooling: str = "mean"  # over real tokens; "cls" reads position 0 (the tokenizer adds <cls>)
    segment_pooling: str = "mean"  # how segment vectors of one long document are combined
    bigram_buckets: int = 0  # hashed bigram embeddings (0 = off)
    trigram_buckets: int = 0  # hashed character trigram embeddings (0 = off; char tokenizer, needs bigrams)
    head_dropout: float = 0.1
    token_dropout: float = 0.0  # training only: this share of input tokens becomes <unk>
    init: str | None = None  # start from: 'minilm', 'e5', a HF BERT folder, or a `pretrain mlm` run
    # keep only the pieces the training texts need (+ vocab_margin) of a SentencePiece (Unigram)
    # checkpoint such as e5 (data/vocab_prune.py). None: prune vocabularies of over 100k pieces
    prune_vocab: bool | None = None
    vocab_margin: int = 20000
    encoder_lr_scale: float = 1.0  # lr of the pretrained part = train.lr * this (with init)
    # layer-wise lr decay (with init): the top block at encoder_lr_scale, each block below at this
    # times the one above, the embeddings at this ** n_layers (1 = one rate for the whole backbone)
    layer_lr_decay: float = 1.0
    # keep only the checkpoint's lowest N layers (None: all): a smaller, faster backbone
    init_layers: int | None = None
    bert: BertConfig | None = None  # set (from the checkpoint) when the backbone is BERT
    # kind "yours": the learner's own model file (`train classify --model FILE.py`, models/your_model.py)
    yours: YourModelConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.bert, dict):  # from JSON: get_type_hints sees `BertConfig | None`
            self.bert = BertConfig.from_dict(self.bert)
        if isinstance(self.yours, dict):
            self.yours = YourModelConfig.from_dict(self.yours, "model.yours")
        if (self.kind == "yours") != (self.yours is not None) and self.yours is not None:
            raise UserError("model.yours is set by --model FILE.py (with model.kind=yours); do not set it by hand")
        if self.kind not in KINDS:
            raise UserError(f"model.kind {self.kind!r} is unknown; choose one of {', '.join(KINDS)}")
        if self.kind == "lstm" and (self.init or self.bert is not None):
            raise UserError("model.init loads a pretrained Transformer; an LSTM (model.kind=lstm) trains "
                            "from scratch: drop --init or set model.kind=transformer")
        if self.kind == "lstm" and self.encoder.d_model % 2:
            raise UserError(f"model.kind=lstm splits model.encoder.d_model between two directions: "
                            f"make it even (got {self.encoder.d_model})")
        if self.pooling not in POOLINGS or self.segment_pooling not in ("mean", "max"):
            raise UserError(f"pooling must be one of {POOLINGS}, segment_pooling mean or max")
        if self.n_classes < 2:
            raise UserError(f"a classifier needs at least 2 classes, got {self.n_classes}")
        if not 0.0 <= self.token_dropout < 1.0:
            raise UserError(f"token_dropout must be in [0, 1), got {self.token_dropout}")
        if not self.encoder_lr_scale > 0:
            raise UserError(f"encoder_lr_scale must be > 0, got {self.encoder_lr_scale}")
        if not 0 < self.layer_lr_decay <= 1:
            raise UserError(f"model.layer_lr_decay must be in (0, 1] (1 = off; e.g. 0.85), got {self.layer_lr_decay}")
        if self.layer_lr_decay != 1 and not self.init:
            raise UserError("model.layer_lr_decay scales the layers of a pretrained backbone: set model.init "
                            "(e.g. e5) or leave layer_lr_decay at 1")
        if self.init_layers is not None and (isinstance(self.init_layers, bool) or not isinstance(self.init_layers, int)
                                             or self.init_layers < 1):
            raise UserError(f"model.init_layers must be a whole number >= 1 (or null: all), got {self.init_layers!r}")
        check_count("model.vocab_size", self.vocab_size, least=0, hint=" (0: the tokenizer's)")
        check_count("model.vocab_margin", self.vocab_margin, least=0)
        check_buckets("model.bigram_buckets", self.bigram_buckets)
        check_buckets("model.trigram_buckets", self.trigram_buckets)
        if self.trigram_buckets and not self.bigram_buckets:
            raise UserError("model.trigram_buckets needs model.bigram_buckets (each position's id packs both)")
        for knob in ("bigram_buckets", "trigram_buckets"):  # each a table of d_model columns; the vocabulary
            check_table(f"model.{knob}", getattr(self, knob), self.d_model)  # comes from the tokenizer (weighed
        # with the whole model before training, `check_model_memory`, and against the weights on load)
        if self.bert is not None and (self.bigram_buckets or self.token_dropout):
            raise UserError("a BERT backbone uses its own vocabulary: set model.bigram_buckets=0 "
                            "and model.token_dropout=0")

    @property
    def pad_id(self) -> int:
        """The padding id: ours is 0 (also BERT's [PAD]); XLM-R's <pad> is 1 (its <s> is 0)."""
        return self.bert.pad_token_id if self.bert is not None else 0

    @property
    def d_model(self) -> int:
        return self.bert.hidden_size if self.bert is not None else self.encoder.d_model


class EncoderClassifier(nn.Module):
    def __init__(self, cfg: ClassifierConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.bert is not None:
            self.bert = BertEncoder(cfg.bert)  # cfg.bert.add_pooler is off: we pool ourselves
        else:
            self.embed = Embeddings(cfg.vocab_size, cfg.encoder, cfg.bigram_buckets,
                                    trigram_buckets=cfg.trigram_buckets)
            self.encoder = Encoder(cfg.encoder)
        if cfg.bert is not None:
            # pooling is masked, so padded rows are never read: skip computing them (~1.5x
            # faster, see benchmarks/results); real rows are unchanged
            self.bert.encoder.set_padding_packing(True)
        self.head = nn.Sequential(nn.Dropout(cfg.head_dropout), Linear(cfg.d_model, cfg.n_classes))
        # opt-in: inference through the compiled static encoder (nn/static_encoder.py) where it
        # serves the input size; off by default, since each new shape bucket costs a compile
        self.static_encoder = False

    def backbone(self) -> list[nn.Module]:
        """The modules a pretrained checkpoint fills (everything but the head)."""
        return [self.bert] if self.cfg.bert is not None else [self.embed, self.encoder]

    def set_encoder_lr_scale(self, scale: float, layer_decay: float = 1.0) -> None:
        """Train the backbone at `scale` times the head's learning rate (the Trainer reads
        each parameter's `lr_scale`). With `layer_decay` < 1 (layer-wise learning-rate decay, as
        in ELECTRA / ULMFiT): the top block keeps `scale`, block i of L gets `scale * layer_decay **
        (L - 1 - i)` and the embeddings `scale * layer_decay ** L`, so the lower, more general
        layers move less."""
        for module in self.backbone():
            for p in module.parameters():
                p.lr_scale = scale
        if layer_decay == 1.0:
            return
        embeddings, encoder = (self.bert.embeddings, self.bert.encoder) if self.cfg.bert is not None \
            else (self.embed, self.encoder)
        depth = len(encoder.layers)
        for i, block in enumerate(encoder.layers):
            for p in block.parameters():
                p.lr_scale = scale * layer_decay ** (depth - 1 - i)
        for p in embeddings.parameters():
            p.lr_scale = scale * layer_decay ** depth

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        (self.bert if self.cfg.bert is not None else self.encoder).set_gradient_checkpointing(enabled)

    def features(self, ids, bigrams=None, need_weights=False):
        """ids `(S, T)` -> pooled `(S, C)` (and per-layer attention weights on request)."""
        mask = ids != self.cfg.pad_id  # (S, T) True = real token
        if self.training and self.cfg.token_dropout > 0:  # word dropout: real tokens -> <unk>
            ids, bigrams = token_dropout(ids, self.cfg.token_dropout, bigrams)
        if self.cfg.bert is not None:
            out = self.bert(ids, attention_mask=mask, need_weights=need_weights)
        elif self.static_encoder and not need_weights and not self.training:
            out = static_encode(self.encoder, self.embed(ids, bigrams), mask)  # padded rows: not read
        else:
            out = self.encoder(self.embed(ids, bigrams), mask, need_weights=need_weights)
        h, weights = out if need_weights else (out, None)
        pooled = masked_pool(h, mask, self.cfg.pooling)
        return (pooled, weights) if need_weights else pooled

    def forward(self, ids: torch.Tensor, bigrams: torch.Tensor | None = None,
                doc_index: torch.Tensor | None = None, n_docs: int | None = None) -> torch.Tensor:
        """ids `(S, T)` segments; doc_index `(S,)` document of each segment (None: one segment
        per document). Returns logits `(n_docs, n_classes)`."""
        seg = self.features(ids, bigrams)  # (S, C)
        if doc_index is not None:
            seg = pool_segments(seg, doc_index, n_docs, self.cfg.segment_pooling)  # (n_docs, C)
        return self.head(seg)


def build_classifier(cfg: ClassifierConfig, folder=None) -> nn.Module:
    """The model `cfg.kind` names: our Transformer encoder (or BERT), the LSTM baseline, or the learner's own
    (kind yours: built from the copy of their file in the run `folder`)."""
    if cfg.kind == "yours":
        if cfg.yours is None or folder is None:
            raise UserError("model.kind=yours is set by --model FILE.py; it needs the run folder that holds the copy")
        return build_yours(cfg.yours, folder, False, cfg.vocab_size, cfg.n_classes, cfg.pad_id)
    if cfg.kind == "lstm":
        from .rnn import LSTMClassifier

        return LSTMClassifier(cfg)
    return EncoderClassifier(cfg)
