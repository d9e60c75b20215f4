"""The Transformer, written from scratch on tensors (imports only torch, and the dependency-free
`scratchformer.errors` for one-line user errors).

Conventions: batch-first `(B, T, C)`; boolean masks mean True = may attend / real token.
"""
from .additive import AdditiveAttention
from .attention import KVCache, plain_attention, scaled_dot_product_attention
from .blocks import Decoder, DecoderBlock, DecoderCache, Encoder, EncoderBlock, Transformer
from .cache import RollingKVCache
from .config import JsonConfig, TransformerConfig
from .ffn import FeedForward
from .fast_linear import Linear, linear, onednn_blocker, use_onednn
from .masks import (MaskError, causal_mask, local_window_mask, merge_masks, padding_mask,
                    padding_mask_from_ids, split_mask)
from .multihead import MultiHeadAttention
from .norm import LayerNorm, RMSNorm
from .position import (
    ALiBi,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_table,
)
from .reasons import PathReasons, path_reasons

from . import attention as _attention

# moved from nn/attention.py to nn/multihead.py (the old address warns; CHANGELOG.md)
_attention.MOVED["MultiHeadAttention"] = (MultiHeadAttention, "scratchformer.nn (or scratchformer.nn.multihead)")

__all__ = [
    "ALiBi", "AdditiveAttention", "Decoder", "DecoderBlock", "DecoderCache", "Encoder", "EncoderBlock", "FeedForward",
    "JsonConfig", "KVCache", "LayerNorm", "LearnedPositionalEmbedding", "Linear", "MaskError",
    "MultiHeadAttention", "PathReasons", "RMSNorm", "RollingKVCache", "RotaryEmbedding", "SinusoidalPositionalEncoding", "Transformer",
    "TransformerConfig", "causal_mask", "linear", "local_window_mask", "merge_masks", "onednn_blocker",
    "padding_mask", "padding_mask_from_ids", "path_reasons", "plain_attention", "scaled_dot_product_attention",
    "sinusoidal_table", "split_mask", "use_onednn",
]
