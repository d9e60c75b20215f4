"""BERT on our own blocks: the embeddings BERT adds, then `scratchformer.nn.Encoder`.

BERT is the paper's encoder with three changes, all on the input side or at the ends:
  - learned absolute positions and a *token-type* (segment) embedding are added to the word
    embedding, with no sqrt(C) scaling, then LayerNorm and dropout;
  - the blocks are Post-LN (`norm_first=False`) with exact erf GELU and no final norm;
  - an optional *pooler* `tanh(dense(h[:, 0]))` summarises the [CLS] position.

So `BertEncoder` owns the embeddings and the pooler and hands the stack to `Encoder`
unchanged. Loading real checkpoints lives in `scratchformer.interop.hf_bert`.

Calling convention (the one Hugging Face users expect):
    hidden = model(input_ids, attention_mask=None, token_type_ids=None)   # (B, T, C)
`attention_mask` is 1 for a real token and 0 for padding, as in `transformers`; inside we
turn it into our boolean key-padding mask (True = real token).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..config import JsonConfig
from ..nn import Encoder, LayerNorm, Linear, TransformerConfig
from .pooling import mean_pool

MODEL_TYPES = ("bert", "roberta", "xlm-roberta")
ROBERTA_TYPES = ("roberta", "xlm-roberta")

# HF `hidden_act` -> our FeedForward activation. "gelu" in BERT is the exact erf GELU.
_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}


@dataclass
class BertConfig(JsonConfig):
    """The fields of a Hugging Face `config.json` (model_type "bert") that shape the network.

    Field names are HF's, so `BertConfig.from_hf(json.load(f))` and `to_hf()` are plain
    renames; `to_transformer_config()` gives the config of our `Encoder`.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    add_pooler: bool = True  # not an HF field: whether the checkpoint has pooler weights
    # "bert", or "xlm-roberta" / "roberta": the same network, with position ids counted from
    # pad_token_id + 1 (a RoBERTa convention) instead of 0
    model_type: str = "bert"

    @property
    def position_offset(self) -> int:
        """The first position id: 0 for BERT, padding_idx + 1 for (XLM-)RoBERTa."""
        return self.pad_token_id + 1 if self.model_type in ROBERTA_TYPES else 0

    @property
    def max_positions(self) -> int:
        """How many tokens (specials included) one sequence may hold."""
        return self.max_position_embeddings - self.position_offset

    def __post_init__(self) -> None:
        if self.hidden_act not in _HF_ACTIVATIONS:
            raise UserError(
                f"BERT hidden_act {self.hidden_act!r} is not supported; "
                f"supported: {', '.join(_HF_ACTIVATIONS)}"
            )
        if self.type_vocab_size < 1:
            raise UserError("BERT type_vocab_size must be >= 1")
        if self.model_type not in MODEL_TYPES:
            raise UserError(f"model_type {self.model_type!r} is not supported; supported: {', '.join(MODEL_TYPES)}")

    @classmethod
    def from_hf(cls, d: dict[str, Any], add_pooler: bool = True) -> "BertConfig":
        """Build from a parsed HF `config.json`, refusing variants our blocks do not run."""
        model_type = d.get("model_type", "bert")
        if model_type not in MODEL_TYPES:
            raise UserError(f"config.json has model_type {model_type!r}; only {', '.join(MODEL_TYPES)} "
                            "checkpoints load here")
        pos = d.get("position_embedding_type", "absolute")
        if pos != "absolute":
            raise UserError(f"BERT position_embedding_type {pos!r} is not supported (only 'absolute')")
        if d.get("is_decoder") or d.get("add_cross_attention"):
            raise UserError("decoder BERT checkpoints (is_decoder / add_cross_attention) are not supported")
        known = {f for f in cls.__dataclass_fields__ if f not in ("add_pooler", "model_type")}
        kwargs = {k: d[k] for k in known if k in d and d[k] is not None}
        return cls(**kwargs, add_pooler=add_pooler, model_type=model_type)

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` that `transformers.BertModel.from_pretrained` reads."""
        d = self.to_dict()
        d.pop("add_pooler")
        arch = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel"}
        return {
            "architectures": [arch[self.model_type]],
            **d,
            "position_embedding_type": "absolute",
            "initializer_range": 0.02,
            "use_cache": True,
        }

    def to_transformer_config(self) -> TransformerConfig:
        return TransformerConfig(
            d_model=self.hidden_size,
            n_heads=self.num_attention_heads,
            d_ff=self.intermediate_size,
            n_layers=self.num_hidden_layers,
            dropout=self.hidden_dropout_prob,
            attn_dropout=self.attention_probs_dropout_prob,
            activation=_HF_ACTIVATIONS[self.hidden_act],
            norm="layernorm",
            norm_eps=self.layer_norm_eps,
            norm_first=False,  # BERT is Post-LN
            final_norm=False,  # ... so each block already ends in a norm
            bias=True,
            position="none",  # absolute positions are added by BertEmbeddings
            max_len=self.max_position_embeddings,
        )


class BertEmbeddings(nn.Module):
    """ids `(B, T)` -> `(B, T, C)`: word + position + token-type embeddings, LayerNorm, dropout."""

    adversarial_input = True  # train.adversarial perturbs this output (train/adversarial.py)

    def __init__(self, cfg: BertConfig):
        super().__init__()
        C = cfg.hidden_size
        self.word = nn.Embedding(cfg.vocab_size, C, padding_idx=cfg.pad_token_id)
        self.position = nn.Embedding(cfg.max_position_embeddings, C)
        self.token_type = nn.Embedding(cfg.type_vocab_size, C)
        self.norm = LayerNorm(C, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.offset = cfg.position_offset  # XLM-R: position ids 2, 3, ... (BERT: 0, 1, ...)
        self.max_len = cfg.max_positions

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        T = input_ids.shape[1]
        if T > self.max_len:
            raise UserError(
                f"sequence of {T} tokens is longer than the model's {self.max_len} positions; "
                f"truncate to max_length <= {self.max_len}"
            )
        # every row counts positions from its start, padding or not: the real tokens of a
        # right-padded row get the ids transformers gives them (its padded ones differ, unread)
        positions = torch.arange(self.offset, self.offset + T, device=input_ids.device)  # (T,)
        if token_type_ids is None:
            # segment 0 everywhere, as transformers does when token_type_ids is omitted
            segment = self.token_type.weight[0]  # (C,)
        else:
            segment = self.token_type(token_type_ids)  # (B, T, C)
        # (word + segment) + position: the order transformers adds them in, so the float
        # rounding matches too
        x = self.word(input_ids) + segment + self.position(positions)  # (B, T, C)
        return self.dropout(self.norm(x))


class BertPooler(nn.Module):
    """`(B, T, C)` -> `(B, C)`: tanh(dense(hidden state of the first ([CLS]) token))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class BertEncoder(nn.Module):
    """BERT: `BertEmbeddings` -> our Post-LN `Encoder` (-> optional `BertPooler`).

    Usage:
        model, tok = scratchformer.interop.load_hf_bert("minilm")
        batch = tok.encode_batch(["a sentence", "another one"])
        hidden = model(**batch)                              # (B, T, C)
        sentence = mean_pool(hidden, batch["attention_mask"])  # (B, C)
        vectors = model.embed(["a sentence"], tok)           # (N, C), L2-normalised
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.encoder = Encoder(cfg.to_transformer_config())
        # transformers computes every position, padded ones too: so do we by default, so that
        # outputs compare one to one. Callers that mask padding (pooling, the classifier)
        # turn packing back on for speed.
        self.encoder.set_padding_packing(False)
        # BERT has no dropout between the FFN activation and its output projection (its only
        # FFN dropout is on the output, which our block applies before the residual add).
        for block in self.encoder.layers:
            block.ffn.dropout = nn.Dropout(0.0)  # (FeedForward reads its .p to skip the call)
        self.pooler = BertPooler(cfg) if cfg.add_pooler else None

    @property
    def hidden_size(self) -> int:
        return self.config.hidden_size

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.encoder.set_gradient_checkpointing(enabled)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        need_weights: bool = False,
    ):
        """
        Args:
            input_ids: `(B, T)` token ids.
            attention_mask: `(B, T)`, 1 (or True) = real token, 0 = padding; None = all real.
            token_type_ids: `(B, T)` segment ids (0 for the first text, 1 for the second).
            need_weights: also return per-layer attention probabilities `(B, H, T, T)`.
        Returns:
            last hidden states `(B, T, C)`, or `(hidden, [weights per layer])`.
        """
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, C)
        mask = None if attention_mask is None else attention_mask.bool()  # True = real token
        return self.encoder(x, mask, need_weights=need_weights)

    @torch.no_grad()
    def embed(
        self,
        texts: Sequence[str],
        tokenizer,
        batch_size: int = 32,
        max_length: int | None = None,
        normalize: bool = True,
    ) -> torch.Tensor:
        """Sentence embeddings `(N, C)`: mean of the real tokens' last hidden states, then
        L2-normalised (what sentence-transformers computes for all-MiniLM-L6-v2).

        `tokenizer` needs `encode_batch(texts, max_length=...)` (see `interop.hf_bert`);
        `max_length` defaults to the tokenizer's `sentence_max_length` (the checkpoint's
        sentence-transformers setting, 256 for MiniLM) or else its `model_max_length`.
        Texts are batched longest first, so each batch pads little; results come back in
        input order. Runs in eval mode and restores the previous mode.
        """
        if max_length is None:
            max_length = getattr(tokenizer, "sentence_max_length", None) or getattr(
                tokenizer, "model_max_length", self.config.max_positions)
        texts = list(texts)
        device = next(self.parameters()).device
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = torch.empty(len(texts), self.hidden_size, device=device)
        was_training = self.training
        self.eval()
        try:
            for start in range(0, len(texts), batch_size):
                idx = order[start:start + batch_size]
                batch = tokenizer.encode_batch([texts[i] for i in idx], max_length=max_length)
                batch = {k: v.to(device) for k, v in batch.items()}
                pooled = mean_pool(self(**batch), batch["attention_mask"]).float()  # (b, C), float32 even from bf16
                out[torch.tensor(idx, device=device)] = F.normalize(pooled, p=2, dim=-1) if normalize else pooled
        finally:
            self.train(was_training)
        bad = (~torch.isfinite(out).all(-1)).nonzero().flatten().tolist()
        if bad:  # never a NaN vector handed on (it would be printed, served or searched as a number)
            raise UserError(f"the encoder's vectors of {len(bad)} of {len(texts)} texts (the first: text {bad[0] + 1}) "
                            "are not finite (NaN or inf): its weights hold NaN or inf; a decoded model in the cache "
                            "is damaged: delete its folder there and run again")
        return out


__all__ = ["BertConfig", "BertEmbeddings", "BertPooler", "BertEncoder", "mean_pool"]
