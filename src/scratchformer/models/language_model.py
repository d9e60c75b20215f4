"""Decoder-only language model (GPT): token embedding -> causal `Encoder` -> tied output head.

The stack is our `Encoder` run with `is_causal=True` (Pre-LN blocks, a final norm), so a
`KVCache` per layer turns it into an incremental decoder: the prompt is pre-filled once, then
each new token costs one position's worth of work instead of a forward over the whole text.

Two choices that differ from the encoder models, and why:
  - No sqrt(d_model) scaling of the token embedding. The scaling exists to balance the
    embeddings against fixed sinusoids; GPT-2 does not scale, and with tied weights the same
    table is also the output projection, where a sqrt(d) factor would only rescale the logits.
  - GPT-2's initialisation: every weight N(0, 0.02), and the projections that write into the
    residual stream (attention `out_proj`, FFN `linear_out`) N(0, 0.02 / sqrt(2 * n_layers)),
    so the residual stream's variance does not grow with depth at the start of training.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..config import JsonConfig, check_count
from ..nn import Encoder, KVCache, Linear, TransformerConfig
from ..nn.fast_linear import projection
from ..nn.lean import CausalStackStep, lean_blocker
from .embedding import Embeddings
from .your_model import YourModelConfig, build_yours


def _gpt_stack() -> TransformerConfig:
    # nanoGPT's CPU shakespeare size; RoPE by default (no hard length limit, no position table)
    return TransformerConfig(d_model=128, n_heads=4, d_ff=512, n_layers=4, dropout=0.0,
                             activation="gelu", norm_first=True, position="rope", max_len=256)


@dataclass
class LMConfig(JsonConfig):
    """A GPT: `transformer.position` picks rope (default) / learned / sinusoidal / alibi / none;
    for `learned`, `transformer.max_len` is the hard limit on the context the model can see.
    (`transformer` was called `encoder` before; recipes and `--set` keys using that name
    still work.)"""

    RENAMED = {"encoder": "transformer"}

    vocab_size: int = 0
    transformer: TransformerConfig = field(default_factory=_gpt_stack)
    tie_embeddings: bool = True  # output head = token embedding matrix (transposed)
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model) (see module doc)
    init_std: float = 0.02  # GPT-2 initialisation; 0 keeps torch's default initialisation
    # the learner's own model file (`train lm --model FILE.py`, models/your_model.py); None: ours
    yours: YourModelConfig | None = None

    def __post_init__(self) -> None:
        if isinstance(self.yours, dict):
            self.yours = YourModelConfig.from_dict(self.yours, "model.yours")
        if not self.transformer.norm_first:
            raise UserError("the language model is Pre-LN; set model.transformer.norm_first=true")
        if self.init_std < 0:
            raise UserError("model.init_std must be >= 0 (0 keeps torch's default initialisation)")
        check_count("model.vocab_size", self.vocab_size, least=0, hint=" (0: the tokenizer's)")


class DecoderLM(nn.Module):
    """ids `(B, T)` -> next-token logits `(B, T, vocab)`.

    With `caches` (one `KVCache` per layer, see `new_caches`), `ids` are the positions that
    follow the cached ones: positions `caches[0].length ...`. The logits equal those of a full
    forward over the whole sequence (tested).
    """

    def __init__(self, cfg: LMConfig):
        super().__init__()
        if cfg.vocab_size <= 0:
            raise UserError("model.vocab_size is not set (it comes from the tokenizer)")
        self.cfg = cfg
        ec = cfg.transformer
        self.embed = Embeddings(cfg.vocab_size, ec, scale=cfg.embed_scale)
        self.encoder = Encoder(ec)
        self.head = Linear(ec.d_model, cfg.vocab_size, bias=False)
        if cfg.init_std > 0:
            self._init_gpt2(cfg.init_std)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.tokens.weight  # one Parameter, two uses

    def _init_gpt2(self, std: float) -> None:
        residual_std = std / math.sqrt(2 * max(self.cfg.transformer.n_layers, 1))
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                is_residual = name.endswith("self_attn.out_proj") or name.endswith("ffn.linear_out")
                nn.init.normal_(m.weight, 0.0, residual_std if is_residual else std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, std)
                if m.padding_idx is not None:
                    with torch.no_grad():
                        m.weight[m.padding_idx].zero_()

    @property
    def max_positions(self) -> int | None:
        """Hard limit on positions (learned table), or None (rope / sinusoidal / alibi / none)."""
        return self.cfg.transformer.max_len if self.cfg.transformer.position == "learned" else None

    def new_caches(self, capacity: int | None = None) -> list[KVCache]:
        """One cache per layer: a `RollingKVCache` (constant memory) when attention is windowed,
        else a `KVCache` (preallocated to `capacity` positions when given)."""
        return self.encoder.new_caches(capacity)

    def lean_blocker(self) -> str | None:
        """Why `lean_step` cannot serve this model (None when it can)."""
        return lean_blocker(self.encoder)

    def lean_step(self, caches: list[KVCache]) -> "LMStep":
        """The one-token step with every per-decode decision made once (`nn/lean.py`) over
        `caches` (usually filled by a prefill `self(ids, caches)`); tested equal to `self(ids, caches)`."""
        return LMStep(self, caches)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.encoder.set_gradient_checkpointing(enabled)

    def forward(self, ids: torch.Tensor, caches: list[KVCache] | None = None) -> torch.Tensor:
        """ids `(B, T)` -> logits `(B, T, V)`."""
        offset = caches[0].length if caches else 0
        x = self.embed(ids, offset=offset)  # (B, T, C), absolute positions from `offset`
        # One new position may attend to every key there is (the lower-right causal mask of a
        # single query is all True), so skip building a mask for the common decoding step.
        h = self.encoder(x, is_causal=ids.shape[1] > 1, caches=caches)  # (B, T, C), final norm applied
        return self.head(h)  # (B, T, V)


class LMStep:
    """`step(tokens (N,)) -> logits (N, V)` of the next position through `nn.lean.CausalStackStep`."""

    def __init__(self, model: DecoderLM, caches: list[KVCache]):
        emb = model.embed
        self.caches = caches
        self.table, self.scale = emb.tokens.weight, emb.scale
        self.position = emb.position  # absolute positions (rare in a GPT): the module, per step
        sample, rows = self.table, self.caches[0]._k.shape[0] if caches and caches[0]._k is not None else 1
        self.stack = CausalStackStep(model.encoder, caches, sample, rows)
        self.head = projection(model.head, sample, rows)

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        x = F.embedding(tokens, self.table)  # (N, C): the step keeps one position per row, 2-D
        if self.scale != 1.0:
            x = x * self.scale
        if self.position is not None:  # the module adds positions to (N, T, C)
            x = self.position(x[:, None], self.caches[0].length)[:, 0]
        return self.head(self.stack(x))  # (N, V)


def build_lm(cfg: LMConfig, folder=None) -> nn.Module:
    """Our GPT, or the learner's own (`cfg.yours`: built from the copy of their file in the run `folder`)."""
    if cfg.yours is not None:
        if folder is None:
            raise UserError("model.yours is set by --model FILE.py; it needs the run folder that holds the copy")
        return build_yours(cfg.yours, folder, True, cfg.vocab_size)
    return DecoderLM(cfg)
