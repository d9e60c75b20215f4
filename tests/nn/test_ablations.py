"""Ablation switches (TransformerConfig.ablate_*, off by default) change the computation exactly
as stated: no residual, no 1/√d_k, no norms; and position="none" gives no order information."""
import math

import pytest
import torch
from torch import nn

from scratchformer.nn import Decoder, Encoder, TransformerConfig


def _cfg(**kw):
    base = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0, position="none")
    return TransformerConfig(**{**base, **kw})


def test_ablations_are_off_by_default_and_round_trip(tmp_path):
    cfg = TransformerConfig()
    assert not (cfg.ablate_residual or cfg.ablate_scale or cfg.ablate_norm)
    on = _cfg(ablate_residual=True, ablate_scale=True, ablate_norm=True)
    on.save_json(tmp_path / "c.json")
    assert TransformerConfig.load_json(tmp_path / "c.json") == on


@pytest.mark.parametrize("norm_first", [True, False])
def test_without_residual_an_encoder_block_outputs_the_sublayer_path_only(norm_first):
    torch.manual_seed(0)
    block = Encoder(_cfg(norm_first=norm_first, ablate_residual=True)).layers[0].eval()
    x = torch.randn(2, 5, 16)
    out, _ = block(x)
    attn = lambda h: block.self_attn(h)[0]  # noqa: E731
    if norm_first:  # x = dropout(sublayer(norm(x))), twice
        ref = block.ffn(block.norm2(attn(block.norm1(x))))
    else:  # x = norm(dropout(sublayer(x))), twice
        ref = block.norm2(block.ffn(block.norm1(attn(x))))
    assert (out - ref).abs().max() < 1e-6
    block.residual = True  # the same weights with the residual: a different computation
    assert (block(x)[0] - ref).abs().max() > 1e-2


def test_without_residual_a_decoder_block_outputs_the_sublayer_path_only():
    torch.manual_seed(0)
    block = Decoder(_cfg(ablate_residual=True)).layers[0].eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    out, _ = block(x, memory)
    a = block.self_attn(block.norm1(x), is_causal=True)[0]
    c = block.cross_attn(block.norm2(a), context=memory)[0]
    assert (out - block.ffn(block.norm3(c))).abs().max() < 1e-6


@pytest.mark.parametrize("ablate", [False, True])
def test_without_scaling_the_scores_are_qk(ablate):
    torch.manual_seed(0)
    enc = Encoder(_cfg(n_heads=1, bias=False, ablate_scale=ablate)).eval()
    attn = enc.layers[0].self_attn
    h = enc.layers[0].norm1(torch.randn(1, 6, 16) * 3)
    out, w = attn(h, need_weights=True)
    q, k = h @ attn.W_Q.T, h @ attn.W_K.T  # (1, 6, 16)
    scores = q @ k.transpose(-1, -2)
    expected = torch.softmax(scores if ablate else scores / math.sqrt(16), -1)
    assert (w[:, 0] - expected).abs().max() < 1e-5
    fused, _ = attn(h)  # the fused kernel gets the same scale
    assert (fused - out).abs().max() < 1e-5


def test_without_norms_every_norm_is_the_identity():
    torch.manual_seed(0)
    enc = Encoder(_cfg(n_layers=2, ablate_norm=True)).eval()
    norms = [m for m in enc.modules() if "Norm" in type(m).__name__]
    assert norms == [] and isinstance(enc.layers[0].norm1, nn.Identity)
    assert isinstance(enc.norm, nn.Identity)  # Pre-LN's final norm too
    block, x = enc.layers[0], torch.randn(2, 5, 16)
    a = x + block.self_attn(x)[0]
    assert (block(x)[0] - (a + block.ffn(a))).abs().max() < 1e-6


def test_without_positions_the_encoder_cannot_tell_the_order():
    """position="none" (the 'no positional encoding' ablation): permuting the tokens permutes the
    output and changes nothing else; with RoPE the order matters."""
    torch.manual_seed(0)
    x, perm = torch.randn(1, 7, 16), torch.randperm(7)
    for position, order_blind in (("none", True), ("rope", False)):
        enc = Encoder(_cfg(position=position, n_layers=2)).eval()
        diff = (enc(x)[:, perm] - enc(x[:, perm])).abs().max()
        assert (diff < 1e-5) == order_blind, (position, diff)
