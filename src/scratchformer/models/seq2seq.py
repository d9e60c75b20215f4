"""Encoder-decoder for translation: source/target embeddings -> our `Transformer` -> vocabulary.

    src ids (B, S) --src_embed--> (B, S, C) --encoder--> memory (B, S, C)
    tgt ids (B, T) --tgt_embed--> (B, T, C) --decoder(memory)--> (B, T, C) --out_proj--> (B, T, V)

Options (all in `Seq2SeqConfig`):
- `share_embeddings`: one table for source and target (needs a joint vocabulary);
- `tie_output`: the output projection reuses the target embedding matrix (Press & Wolf 2017,
  as in the paper). With both on, the three matrices are one ("three-way tying").

- `bert`: a pretrained encoder (`BertEncoder`, e.g. multilingual-e5-small from
  `train translate --init e5`) in place of the source embeddings and our encoder stack; the
  decoder cross-attends to its outputs (same width: `transformer.d_model` = its hidden size).
  Its source ids are its own tokenizer's (XLM-R: `<pad>` = 1), so the padding mask compares
  with `src_pad_id`, not 0. `freeze_encoder_layers` keeps its embeddings and lowest layers fixed.

Decoding goes through `encode` once and then `decode` step by step; with a `DecoderCache`
each step feeds only the newest token, its self-attention keys/values are appended to the
cache, and the cross-attention keys/values of the memory are computed on the first step only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..data.bigrams import id_bigrams_batch
from ..errors import UserError
from ..config import JsonConfig, check_buckets, check_count, check_table
from ..nn import DecoderCache, Linear, Transformer, TransformerConfig
from ..nn.fast_linear import projection
from ..nn.lean import DecoderStep, lean_blocker
from ..nn.static import StaticDecoderStep, static_blocker
from ..nn.static_encoder import static_encode
from .bert import BertConfig, BertEncoder
from .embedding import Embeddings, token_dropout


KINDS = ("transformer", "lstm")


@dataclass
class Seq2SeqConfig(JsonConfig):
    # "lstm": the recurrent translator (models/rnn_seq2seq.py: bidirectional LSTM encoder, additive
    # attention), sized by `transformer` (d_model, n_layers, n_decoder_layers, dropout)
    kind: str = "transformer"
    src_vocab_size: int = 0
    tgt_vocab_size: int = 0
    transformer: TransformerConfig = field(default_factory=lambda: TransformerConfig(
        d_model=256, n_heads=4, d_ff=1024, n_layers=3, dropout=0.3))
    share_embeddings: bool = False  # one table for both sides (joint vocabulary only)
    tie_output: bool = True  # output projection = target embedding matrix
    # training only: this share of real source / decoder-input tokens becomes <unk>
    # ("word dropout", Sennrich & Zhang 2019: a strong regulariser for small data)
    src_token_dropout: float = 0.0
    tgt_token_dropout: float = 0.0
    # hashed source bigram embeddings (0 = off): each source position also gets the embedding
    # of hash(previous id, id), so a character-level encoder sees two-character words directly
    src_bigram_buckets: int = 0
    # a pretrained encoder (`train translate --init e5`); set from the checkpoint, not by hand
    init: str | None = None
    bert: BertConfig | None = None
    encoder_lr_scale: float = 1.0  # lr of the pretrained encoder = train.lr * this (with init)
    freeze_encoder_layers: int = 0  # its embeddings and lowest N layers stay fixed (0: train all)
    prune_vocab: bool | None = None  # None: prune Unigram vocabularies of >100k pieces (e5's 250k)
    vocab_margin: int = 20000  # pieces kept beyond those the training sources use
    src_prefix: str = ""  # put before every source text (e5's "query: "; none by default)

    @property
    def src_pad_id(self) -> int:
        return self.bert.pad_token_id if self.bert is not None else 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"model.kind {self.kind!r} is unknown; choose one of {', '.join(KINDS)}")
        if self.kind == "lstm" and (self.init or self.bert is not None):
            raise UserError("model.init loads a pretrained Transformer encoder; an LSTM translator "
                            "(model.kind=lstm) trains from scratch: drop --init or set model.kind=transformer")
        if self.kind == "lstm" and self.transformer.d_model % 2:
            raise UserError(f"model.kind=lstm splits model.transformer.d_model between the encoder's two "
                            f"directions: make it even (got {self.transformer.d_model})")
        if not self.encoder_lr_scale > 0:
            raise UserError(f"model.encoder_lr_scale must be > 0, got {self.encoder_lr_scale}")
        if self.freeze_encoder_layers < 0:
            raise UserError(f"model.freeze_encoder_layers must be >= 0, got {self.freeze_encoder_layers}")
        if self.bert is not None:
            n = self.bert.num_hidden_layers
            if self.freeze_encoder_layers > n:
                raise UserError(f"model.freeze_encoder_layers={self.freeze_encoder_layers}, but the pretrained "
                                f"encoder has {n} layers; give 0..{n}")
            if self.transformer.d_model != self.bert.hidden_size:
                raise UserError(f"model.transformer.d_model={self.transformer.d_model}, but the decoder must match "
                                f"the pretrained encoder's width {self.bert.hidden_size}; drop that --set")
            if self.share_embeddings or self.src_bigram_buckets or self.src_token_dropout:
                raise UserError("with a pretrained encoder (model.init) the source side is its own: "
                                "model.share_embeddings, src_bigram_buckets and src_token_dropout must stay off")
        for name in ("src_token_dropout", "tgt_token_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UserError(f"model.{name} must be in [0, 1), got {getattr(self, name)}")
        check_buckets("model.src_bigram_buckets", self.src_bigram_buckets)
        check_count("model.vocab_margin", self.vocab_margin, least=0)
        for knob in ("src_vocab_size", "tgt_vocab_size"):  # from the tokenizers (0: not yet)
            check_count(f"model.{knob}", getattr(self, knob), least=0)
        check_table("model.src_bigram_buckets", self.src_bigram_buckets, self.transformer.d_model)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise UserError(
                f"share_embeddings needs one joint vocabulary, but the source has {self.src_vocab_size} "
                f"tokens and the target {self.tgt_vocab_size}; set data.joint_vocab=true or "
                "model.share_embeddings=false")


class Seq2Seq(nn.Module):
    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        tc = cfg.transformer
        self.src_pad_id = cfg.src_pad_id
        if cfg.bert is not None:  # a pretrained encoder; our stack keeps only its decoder
            self.bert = BertEncoder(cfg.bert.replace(add_pooler=False))
            self.bert.encoder.set_padding_packing(True)  # padded rows are never read (masked)
            self.src_embed = None
            self.tgt_embed = Embeddings(cfg.tgt_vocab_size, tc)
            self.transformer = Transformer(tc.replace(n_layers=0, n_decoder_layers=tc.decoder_layers))
            self.freeze_encoder_layers(cfg.freeze_encoder_layers)
        else:  # (this order of construction is the order of the random initialisation: kept)
            self.bert = None
            self.src_embed = Embeddings(cfg.src_vocab_size, tc, bigram_buckets=cfg.src_bigram_buckets)
            self.tgt_embed = self.src_embed if cfg.share_embeddings else Embeddings(cfg.tgt_vocab_size, tc)
            self.transformer = Transformer(tc)
        self.out_proj = Linear(tc.d_model, cfg.tgt_vocab_size, bias=False)
        if cfg.tie_output:
            self.out_proj.weight = self.tgt_embed.tokens.weight  # (V, C) both
        else:
            nn.init.normal_(self.out_proj.weight, std=tc.d_model ** -0.5)

    def freeze_encoder_layers(self, n: int) -> None:
        """Fix the pretrained encoder's embeddings and its lowest `n` layers (no gradient, no
        optimizer state: on a small CPU most of a 12-layer encoder's backward is saved)."""
        if self.bert is None:
            return
        frozen = [self.bert.embeddings, *self.bert.encoder.layers[:n]] if n else []
        for module in frozen:
            for p in module.parameters():
                p.requires_grad_(False)

    def set_encoder_lr_scale(self, scale: float) -> None:
        """Train the pretrained encoder at `scale` times the decoder's learning rate (the
        Trainer reads each parameter's `lr_scale`)."""
        for p in (self.bert.parameters() if self.bert is not None else ()):
            p.lr_scale = scale

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.transformer.set_gradient_checkpointing(enabled)
        if self.bert is not None:
            self.bert.set_gradient_checkpointing(enabled)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src `(B, S)` ids -> memory `(B, S, C)` and its padding mask `(B, S)` (True = real)."""
        src_mask = src != self.src_pad_id  # ours: <pad> = 0; XLM-R: <pad> = 1 (<s> is 0)
        if self.bert is not None:
            return self.bert(src, attention_mask=src_mask), src_mask
        return self.transformer.encoder(self._embed_src(src), src_mask), src_mask

    def _embed_src(self, src: torch.Tensor) -> torch.Tensor:
        bigrams = id_bigrams_batch(src, self.cfg.src_bigram_buckets) if self.cfg.src_bigram_buckets else None
        return self.src_embed(src, bigrams)  # (B, S, C)

    def static_encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`encode` through the compiled static encoder (`nn/static_encoder.py`) where it serves
        this model and this input size (`static_encoder_reason`), else the eager one: the real
        positions of the memory are equal (fp32, 1e-5); its padded ones are not zeros (the
        cross-attention masks them)."""
        if self.bert is not None:
            return self.encode(src)
        src_mask = src != self.src_pad_id
        return static_encode(self.transformer.encoder, self._embed_src(src), src_mask), src_mask

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
               cache: DecoderCache | None = None, need_weights: bool = False):
        """tgt `(B, T)` ids (the new positions only when `cache` is given) -> logits `(B, T, V)`
        (and `[(self_w, cross_w) per layer]` with `need_weights`)."""
        offset = cache.length if cache is not None else 0
        x = self.tgt_embed(tgt, offset=offset)  # (B, T, C), positions offset by the cache
        tgt_mask = None if cache is not None else tgt != 0  # decoding steps have no padding
        out = self.transformer.decoder(x, memory, self_mask=tgt_mask, memory_mask=src_mask,
                                       cache=cache, need_weights=need_weights)
        h, weights = out if need_weights else (out, None)
        logits = self.out_proj(h)  # (B, T, V)
        return (logits, weights) if need_weights else logits

    def new_cache(self, capacity: int | None = None) -> DecoderCache:
        return self.transformer.decoder.new_cache(capacity)

    def lean_blocker(self) -> str | None:
        """Why `lean_step` cannot serve this model (None when it can)."""
        return lean_blocker(self.transformer.decoder)

    def lean_step(self, memory: torch.Tensor, src_mask: torch.Tensor, capacity: int,
                  beams: int = 1) -> "Seq2SeqStep":
        """The decode step with every per-decode decision made once (`nn/lean.py`), for up
        to `capacity` target positions and `beams` hypotheses per sentence of `memory`
        `(n, S, C)`; tested equal to `decode` with a `DecoderCache`."""
        return Seq2SeqStep(self, memory, src_mask, capacity, beams)

    def static_blocker(self) -> str | None:
        """Why `static_step` cannot serve this model (None when it can)."""
        return static_blocker(self.transformer.decoder)

    def static_step(self, capacity: int, banned: tuple[int, ...], int8: bool = False) -> StaticDecoderStep:
        """The decode step at fixed shapes for `torch.compile` (`nn/static.py`), for up to
        `capacity` target positions, the ids `banned` never emitted (`int8`: weight-only int8
        projections); tested equal to `decode`."""
        emb = self.tgt_embed
        table = emb.tokens.weight
        pos = emb.position
        if pos is None:
            positions = None
        elif hasattr(pos, "table"):  # sinusoidal: the rows of every position this decode can reach
            positions = pos.table(capacity, table.device).to(table.dtype)  # (capacity, C)
        else:  # learned
            positions = pos.embedding.weight
        out = self.out_proj
        return StaticDecoderStep(self.transformer.decoder, table, emb.scale, positions, out.weight,
                                 getattr(out, "bias", None), banned, int8)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: src `(B, S)`, tgt_in `(B, T)` = <bos> y_1 .. y_{T-1} -> `(B, T, V)`."""
        if self.training:
            src, _ = token_dropout(src, self.cfg.src_token_dropout)
            tgt_in, _ = token_dropout(tgt_in, self.cfg.tgt_token_dropout)
        memory, src_mask = self.encode(src)
        return self.decode(tgt_in, memory, src_mask)


class Seq2SeqStep:
    """`step(tokens (N,)) -> logits (N, V)` of the next position: the target embedding at the
    cache's position, `nn.lean.DecoderStep`, the output projection. `select(index, sentences)`
    keeps rows (see `DecoderStep.select`)."""

    def __init__(self, model: Seq2Seq, memory: torch.Tensor, src_mask: torch.Tensor, capacity: int,
                 beams: int = 1):
        self.cache = model.new_cache(capacity)
        self.decoder = DecoderStep(model.transformer.decoder, self.cache, memory, src_mask, beams)
        emb = model.tgt_embed
        self.table, self.scale = emb.tokens.weight, emb.scale
        pos = emb.position
        if pos is None:
            self.positions = None
        elif hasattr(pos, "table"):  # sinusoidal: the rows of every position this decode can reach
            self.positions = pos.table(capacity, memory.device).to(self.table.dtype)  # (capacity, C), the model's dtype
        else:  # learned
            self.positions = pos.embedding.weight
        self.out = projection(model.out_proj, memory, memory.shape[0] * beams)

    def select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        self.decoder.select(index, sentences)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        x = F.embedding(tokens, self.table)  # (N, C): the step keeps one position per row, 2-D
        if self.positions is None:
            x = x * self.scale
        else:  # position + scale * embedding, one call
            x = torch.add(self.positions[self.cache.length], x, alpha=self.scale)
        return self.out(self.decoder(x))  # (N, V)


def build_seq2seq(cfg: Seq2SeqConfig) -> nn.Module:
    """The translator `cfg.kind` names: our Transformer (`Seq2Seq`) or the LSTM with additive
    attention (`LSTMSeq2Seq`); both offer encode / decode / new_cache to the one search."""
    if cfg.kind == "lstm":
        from .rnn_seq2seq import LSTMSeq2Seq

        return LSTMSeq2Seq(cfg)
    return Seq2Seq(cfg)


class Seq2SeqEnsemble(nn.Module):
    """Several `Seq2Seq` models over the same vocabularies, decoded as one: at every step the
    decoder (`scratchformer.tasks.translate.decoding`) averages the members' next-token probabilities,
    log(mean_i p_i), the ensemble of the Transformer paper's WMT systems and of fairseq.
    Members may differ in size and depth; they are usually the same recipe with other seeds."""

    def __init__(self, members: list[Seq2Seq]):
        super().__init__()
        if not members:
            raise UserError("an ensemble needs at least one model")
        sizes = {(m.cfg.src_vocab_size, m.cfg.tgt_vocab_size) for m in members}
        if len(sizes) > 1:
            raise UserError(f"ensemble members have different vocabulary sizes {sorted(sizes)}; "
                            "they must be trained with the same tokenizers")
        self.members = nn.ModuleList(members)
        self.src_pad_id = members[0].src_pad_id
