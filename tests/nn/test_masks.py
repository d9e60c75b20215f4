"""One mask vocabulary (padding_mask / attn_mask) at every level; W_Q, W_K, W_V by name."""
import math

import pytest
import torch

from scratchformer.nn import (Decoder, Encoder, MultiHeadAttention, TransformerConfig, causal_mask,
                              padding_mask, split_mask)


def test_projections_by_name_are_views_of_the_fused_weight():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, n_heads=4, n_kv_heads=2)
    w = mha.qkv_proj.weight
    assert torch.equal(torch.cat([mha.W_Q, mha.W_K, mha.W_V]), w)
    assert torch.equal(mha.W_KV, torch.cat([mha.W_K, mha.W_V]))
    assert mha.W_Q.data_ptr() == w.data_ptr()  # a view: training the fused weight trains W_Q
    assert set(mha.state_dict()) == {"qkv_proj.weight", "qkv_proj.bias", "out_proj.weight", "out_proj.bias"}


def test_cross_attention_is_the_papers_formula_with_named_projections():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, n_heads=1, bias=False)
    x, ctx = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    out, _ = mha(x, context=ctx)
    q, k, v = x @ mha.W_Q.T, ctx @ mha.W_K.T, ctx @ mha.W_V.T
    ref = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1) @ v @ mha.out_proj.weight.T
    assert (out - ref).abs().max() < 1e-6


def test_stack_shorthand_mask_equals_the_named_masks():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)
    enc, dec = Encoder(cfg).eval(), Decoder(cfg).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    pad = padding_mask(torch.tensor([5, 3]), 5)
    full = (pad[:, None, None, :] & causal_mask(5))  # (2, 1, 5, 5)
    assert torch.equal(enc(x, pad), enc(x, padding_mask=pad))
    assert torch.equal(enc(x, full), enc(x, attn_mask=full))
    assert torch.equal(dec(x, mem, self_mask=pad), dec(x, mem, padding_mask=pad))
    assert torch.equal(dec(x, mem, self_mask=full), dec(x, mem, attn_mask=full))
    assert split_mask(None, pad, None) == (pad, None)
    with pytest.raises(ValueError, match="not both"):
        enc(x, pad, padding_mask=pad)


def test_blocks_take_masks_by_keyword_only():
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0)
    block = Encoder(cfg).layers[0]
    with pytest.raises(TypeError):
        block(torch.randn(1, 3, 16), torch.ones(1, 3, dtype=torch.bool))
