"""Move weights between `torch.nn` Transformer modules and ours, both ways.

`from_torch(module)` returns our equivalent module holding the same weights, so a test can
feed both the same input and compare. Supported (all with `batch_first=True`):
`nn.MultiheadAttention`, `nn.TransformerEncoderLayer`, `nn.TransformerDecoderLayer`,
`nn.TransformerEncoder`, `nn.TransformerDecoder`, `nn.Transformer`.
Masks differ at this boundary: torch's `*_key_padding_mask` is True = ignore, ours is
True = real token, so pass `~key_padding_mask`.
"""
from __future__ import annotations

import re

import torch
from torch import nn

from ..errors import UserError
from ..nn import Decoder, DecoderBlock, Encoder, EncoderBlock, MultiHeadAttention, Transformer
from ..nn import TransformerConfig

# torch parameter names -> ours (inside one layer)
_TO_OURS = [
    (r"self_attn\.in_proj_", "self_attn.qkv_proj."),
    (r"multihead_attn\.in_proj_", "cross_attn.qkv_proj."),
    (r"multihead_attn\.out_proj\.", "cross_attn.out_proj."),
    (r"linear1\.", "ffn.linear_in."),
    (r"linear2\.", "ffn.linear_out."),
]
_TO_TORCH = [
    (r"self_attn\.qkv_proj\.", "self_attn.in_proj_"),
    (r"cross_attn\.qkv_proj\.", "multihead_attn.in_proj_"),
    (r"cross_attn\.out_proj\.", "multihead_attn.out_proj."),
    (r"ffn\.linear_in\.", "linear1."),
    (r"ffn\.linear_out\.", "linear2."),
]


def _rename(state: dict, rules) -> dict:
    out = {}
    for name, tensor in state.items():
        for pattern, repl in rules:
            name = re.sub(pattern, repl, name)
        out[name] = tensor
    return out


def _activation_name(layer) -> str:
    code = getattr(layer, "activation_relu_or_gelu", 0)
    if code == 1:
        return "relu"
    if code == 2:
        return "gelu"
    act = layer.activation
    if act is torch.nn.functional.relu:
        return "relu"
    if act is torch.nn.functional.gelu:
        return "gelu"
    if isinstance(act, nn.ReLU):
        return "relu"
    if isinstance(act, nn.GELU):
        return "gelu" if act.approximate == "none" else "gelu_tanh"
    raise UserError(f"activation {act!r} has no scratchformer equivalent (relu, gelu supported)")


def _check_mha(mha: nn.MultiheadAttention) -> None:
    if not mha.batch_first:
        raise UserError("from_torch needs batch_first=True modules (scratchformer is batch-first)")
    if not mha._qkv_same_embed_dim:
        raise UserError("from_torch needs kdim == vdim == embed_dim (a single in_proj_weight)")


def _layer_config(layer, n_layers: int = 1, n_decoder_layers: int | None = None,
                  final_norm: bool = False) -> TransformerConfig:
    _check_mha(layer.self_attn)
    return TransformerConfig(
        d_model=layer.linear1.in_features, n_heads=layer.self_attn.num_heads,
        d_ff=layer.linear1.out_features, n_layers=n_layers, n_decoder_layers=n_decoder_layers,
        dropout=layer.dropout.p, attn_dropout=layer.self_attn.dropout,
        activation=_activation_name(layer), norm_eps=layer.norm1.eps, norm_first=layer.norm_first,
        final_norm=final_norm, bias=layer.linear1.bias is not None, position="none",
    )


def _load(ours: nn.Module, theirs: nn.Module) -> nn.Module:
    state = _rename(theirs.state_dict(), _TO_OURS)
    ours.load_state_dict(state, strict=True)
    return ours.train(theirs.training)


def from_torch(module: nn.Module) -> nn.Module:
    """Our module equivalent to a `torch.nn` Transformer module, with its weights copied."""
    if isinstance(module, nn.MultiheadAttention):
        _check_mha(module)
        ours = MultiHeadAttention(module.embed_dim, module.num_heads, dropout=module.dropout,
                                  bias=module.in_proj_bias is not None)
        ours.qkv_proj.weight.data.copy_(module.in_proj_weight.data)
        ours.out_proj.weight.data.copy_(module.out_proj.weight.data)
        if module.in_proj_bias is not None:
            ours.qkv_proj.bias.data.copy_(module.in_proj_bias.data)
            ours.out_proj.bias.data.copy_(module.out_proj.bias.data)
        return ours.train(module.training)
    if isinstance(module, nn.TransformerEncoderLayer):
        return _load(EncoderBlock(_layer_config(module)), module)
    if isinstance(module, nn.TransformerDecoderLayer):
        return _load(DecoderBlock(_layer_config(module)), module)
    if isinstance(module, nn.TransformerEncoder):
        cfg = _layer_config(module.layers[0], len(module.layers), final_norm=module.norm is not None)
        return _load(Encoder(cfg), module)
    if isinstance(module, nn.TransformerDecoder):
        cfg = _layer_config(module.layers[0], len(module.layers), final_norm=module.norm is not None)
        return _load(Decoder(cfg), module)
    if isinstance(module, nn.Transformer):
        enc, dec = module.encoder, module.decoder
        if (enc.norm is None) != (dec.norm is None):
            raise UserError("from_torch needs both or neither of encoder.norm / decoder.norm")
        cfg = _layer_config(enc.layers[0], len(enc.layers), len(dec.layers), enc.norm is not None)
        return _load(Transformer(cfg), module)
    raise UserError(f"from_torch does not know {type(module).__name__}")


def _torch_layer_kwargs(cfg: TransformerConfig) -> dict:
    if cfg.activation not in ("relu", "gelu") or cfg.norm != "layernorm" or cfg.n_kv_heads not in (None, cfg.n_heads):
        raise UserError("to_torch needs relu/gelu, LayerNorm and no grouped-query attention")
    if cfg.position in ("rope", "alibi") or cfg.window is not None:
        raise UserError(f"torch.nn has no equivalent of position={cfg.position!r} / window")
    ablated = [f for f in ("ablate_residual", "ablate_scale", "ablate_norm") if getattr(cfg, f)]
    if ablated:  # torch.nn would compute the full blocks: an export would be silently wrong
        raise UserError(f"to_torch: {', '.join(ablated)} is on; torch.nn has no such switch (turn it off)")
    return dict(d_model=cfg.d_model, nhead=cfg.n_heads, dim_feedforward=cfg.d_ff,
                dropout=cfg.dropout, activation=cfg.activation, layer_norm_eps=cfg.norm_eps,
                batch_first=True, norm_first=cfg.norm_first, bias=cfg.bias)


def to_torch(module: nn.Module) -> nn.Module:
    """The `torch.nn` module equivalent to ours (where one exists), weights copied."""
    if isinstance(module, MultiHeadAttention):
        if module.n_kv_heads != module.n_heads:
            raise UserError("nn.MultiheadAttention has no grouped-query attention")
        d = module.out_proj.out_features
        theirs = nn.MultiheadAttention(d, module.n_heads, dropout=module.dropout,
                                       bias=module.qkv_proj.bias is not None, batch_first=True)
        theirs.in_proj_weight.data.copy_(module.qkv_proj.weight.data)
        theirs.out_proj.weight.data.copy_(module.out_proj.weight.data)
        if module.qkv_proj.bias is not None:
            theirs.in_proj_bias.data.copy_(module.qkv_proj.bias.data)
            theirs.out_proj.bias.data.copy_(module.out_proj.bias.data)
        return theirs.train(module.training)
    cfg = getattr(module, "cfg", None)
    if isinstance(module, (Encoder, Decoder, Transformer)):
        kw = _torch_layer_kwargs(cfg)
        norm = lambda: nn.LayerNorm(cfg.d_model, cfg.norm_eps, bias=cfg.bias)  # noqa: E731
        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**kw), cfg.n_layers,
                                    norm=norm() if cfg.use_final_norm else None,
                                    enable_nested_tensor=False)
        dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), cfg.decoder_layers,
                                    norm=norm() if cfg.use_final_norm else None)
        if isinstance(module, Encoder):
            theirs = enc
        elif isinstance(module, Decoder):
            theirs = dec
        else:
            if not cfg.use_final_norm:
                raise UserError("nn.Transformer always has final norms; set final_norm=True")
            theirs = nn.Transformer(custom_encoder=enc, custom_decoder=dec, batch_first=True,
                                    d_model=cfg.d_model, nhead=cfg.n_heads)
        state = _rename(module.state_dict(), _TO_TORCH)
        theirs.load_state_dict(state, strict=True)
        return theirs.train(module.training)
    raise UserError(f"to_torch does not know {type(module).__name__}")
