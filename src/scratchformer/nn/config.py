"""`TransformerConfig`: everything that shapes an encoder, a decoder or both.

The config mechanism itself (`JsonConfig`: JSON round trip, typed values, typed `--set`,
freezing) lives in `scratchformer.config`, below every layer, because `nn`, `train` and
`tasks` all use it; it is re-exported here for `from scratchformer.nn import JsonConfig`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import JsonConfig, check_count
from ..errors import UserError

__all__ = ["JsonConfig", "TransformerConfig"]


ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "none")
WINDOW_IMPLS = ("blocked", "band")


@dataclass
class TransformerConfig(JsonConfig):
    """Everything that shapes an encoder, a decoder or both.

    Absolute positions (`sinusoidal`, `learned`) are added to the embeddings by the model
    (see `scratchformer.models`); relative ones (`rope`, `alibi`) live inside attention,
    so the `Encoder`/`Decoder` stacks build them from this config.
    """

    d_model: int = 256
    n_heads: int = 8
    n_kv_heads: int | None = None  # grouped-query attention when < n_heads
    d_ff: int = 1024
    n_layers: int = 4  # encoder layers (or decoder layers of a decoder-only model)
    n_decoder_layers: int | None = None  # defaults to n_layers
    dropout: float = 0.1  # residual and FFN dropout, placed as in the paper
    attn_dropout: float = 0.0  # on attention probabilities; >0 forces SDPA's slow math kernel
    activation: str = "relu"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_first: bool = True  # Pre-LN (True) or Post-LN (False, as in the paper)
    final_norm: bool | None = None  # a norm after the stack; default: same as norm_first
    bias: bool = True
    position: str = "sinusoidal"
    max_len: int = 512
    rope_base: float = 10000.0
    window: int | None = None  # local attention: each query sees keys within this distance
    window_sink: int = 0  # with a window: the first keys stay visible to all (StreamingLLM sinks)
    window_impl: str = "blocked"  # blocked: O(T·window) (nn/window.py); band: T×T band mask (reference)
    # Ablations: each removes one piece of the Transformer, for experiments that test what the
    # piece is for (issue 15, `experiment ablations`). Off by default; not for real models.
    # (No positional encoding is `position="none"`.)
    ablate_residual: bool = False  # no residual connections: a block outputs the sublayer path only
    ablate_scale: bool = False  # no 1/√d_k: the attention scores are Q Kᵀ
    ablate_norm: bool = False  # no LayerNorm/RMSNorm anywhere in the stacks (identity norms)

    def __post_init__(self) -> None:
        if self.d_model <= 0 or self.n_heads <= 0 or self.n_layers < 0 or self.d_ff <= 0:
            raise UserError("d_model, n_heads, d_ff must be positive and n_layers >= 0")
        if self.d_model % self.n_heads:
            raise UserError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                "pick n_heads that divides d_model"
            )
        kv = self.kv_heads
        if kv <= 0 or self.n_heads % kv:
            raise UserError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={kv}")
        if self.activation not in ACTIVATIONS:
            raise UserError(f"activation {self.activation!r} unknown; choose one of {ACTIVATIONS}")
        if self.norm not in NORMS:
            raise UserError(f"norm {self.norm!r} unknown; choose one of {NORMS}")
        if self.position not in POSITIONS:
            raise UserError(f"position {self.position!r} unknown; choose one of {POSITIONS}")
        if not (0.0 <= self.dropout < 1.0 and 0.0 <= self.attn_dropout < 1.0):
            raise UserError("dropout and attn_dropout must be in [0, 1)")
        if self.position == "rope" and self.head_dim % 2:
            raise UserError(f"RoPE needs an even head dimension, got {self.head_dim}")
        if self.window is not None and self.window < 0:
            raise UserError("window must be >= 0")
        if self.window_sink < 0:
            raise UserError("window_sink must be >= 0")
        check_count("max_len (the longest sequence the position table covers)", self.max_len)
        if self.n_decoder_layers is not None:
            check_count("n_decoder_layers", self.n_decoder_layers, least=0, hint=" (or null: n_layers)")
        if self.window_impl not in WINDOW_IMPLS:
            raise UserError(f"window_impl {self.window_impl!r} unknown; choose one of {WINDOW_IMPLS}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def decoder_layers(self) -> int:
        return self.n_layers if self.n_decoder_layers is None else self.n_decoder_layers

    @property
    def use_final_norm(self) -> bool:
        return self.norm_first if self.final_norm is None else self.final_norm
