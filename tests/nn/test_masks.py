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


# ----------------------------------------------------------------------------- mask dtypes (issue 14)

from scratchformer.errors import UserError  # noqa: E402
from scratchformer.nn import MaskError, scaled_dot_product_attention  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("need_weights", [False, True])
def test_integer_masks_are_refused_on_both_paths(dtype, need_weights):
    """An int 0/1 mask used to be *added* to the scores on the math path (padding kept ~18% of
    the attention) and raised a raw torch error on the fused path; now one line on both."""
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0)
    enc = Encoder(cfg).eval()
    x = torch.randn(2, 4, 16)
    ones = padding_mask(torch.tensor([4, 2]), 4).to(dtype)
    for call in (lambda: enc(x, ones, need_weights=need_weights),
                 lambda: enc(x, attn_mask=ones[:, None, None, :], need_weights=need_weights),
                 lambda: enc.layers[0].self_attn(x, padding_mask=ones, need_weights=need_weights),
                 lambda: scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], ones[:, None, None, :],
                                                      need_weights=need_weights)):
        with pytest.raises(MaskError, match=r"dtype torch\.(int|uint).*\.bool\(\)") as e:
            call()
        assert isinstance(e.value, UserError) and isinstance(e.value, TypeError)
        assert "\n" not in str(e.value)


def test_padding_mask_must_be_boolean():
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(MaskError, match="padding_mask.*bool"):
        scaled_dot_product_attention(q, q, q, padding_mask=torch.zeros(1, 3))


@pytest.mark.parametrize("need_weights", [False, True])
def test_float_additive_mask_equals_boolean_mask(need_weights):
    """Documented float masks: 0 = attend, -inf = blocked; padding then gets exactly 0 weight."""
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    keep = padding_mask(torch.tensor([5, 2]), 5)[:, None, None, :]
    additive = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    a, wa = scaled_dot_product_attention(q, k, v, keep, need_weights=need_weights)
    b, wb = scaled_dot_product_attention(q, k, v, additive, need_weights=need_weights)
    assert (a - b).abs().max() == 0
    if need_weights:
        assert torch.equal(wa, wb) and wa[1, ..., 2:].abs().max() == 0  # no attention on padding
    # a float attn_mask combines with a boolean padding_mask (padding -> -inf)
    c, _ = scaled_dot_product_attention(q, k, v, torch.zeros(3, 5), padding_mask=keep[:, 0, 0])
    assert (a - c).abs().max() < 1e-6
