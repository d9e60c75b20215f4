"""Attention: math path == fused path == torch's SDPA; masks; no NaN; gradcheck; GQA."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from scratchformer.nn import (MultiHeadAttention, causal_mask, local_window_mask, merge_masks, padding_mask,
                              padding_mask_from_ids, path_reasons, scaled_dot_product_attention)

shapes = st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9),
                   st.sampled_from([4, 8, 16]))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16), kind=st.sampled_from(["none", "bool", "float", "causal"]))
def test_math_equals_fused_equals_torch(shape, seed, kind):
    B, H, Tq, Tk, D = shape
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for T in (Tq, Tk, Tk))
    mask, is_causal = None, False
    if kind == "bool":
        mask = torch.rand(B, 1, Tq, Tk, generator=g) > 0.3
        mask[..., 0] = True  # keep every row attendable so torch's reference has no NaN
    elif kind == "float":
        mask = torch.randn(B, H, Tq, Tk, generator=g)
    elif kind == "causal":
        is_causal = True
    math_out, w = scaled_dot_product_attention(q, k, v, mask, is_causal, need_weights=True)
    fused_out, none = scaled_dot_product_attention(q, k, v, mask, is_causal)
    assert none is None and w.shape == (B, H, Tq, Tk)
    ref_mask = causal_mask(Tq, Tk) if is_causal else mask
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=ref_mask)
    if is_causal and Tq > Tk:  # lower-right: the first Tq-Tk queries see no key at all
        ref = torch.where(ref_mask.any(-1)[:, None], ref, torch.zeros(()))
    assert (math_out - fused_out).abs().max() < 1e-5
    assert (fused_out - ref).abs().max() < 1e-5
    assert torch.allclose(w.sum(-1)[..., -1], torch.ones(()), atol=1e-5)  # last row always attends


def test_explicit_formula():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    out, w = scaled_dot_product_attention(q, k, v, need_weights=True)
    expected_w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    assert torch.allclose(w, expected_w, atol=1e-6)
    assert torch.allclose(out, expected_w @ v, atol=1e-6)


@pytest.mark.parametrize("impl", ["math", "fused"])
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_fully_masked_rows_give_zeros_not_nan(impl, mask_kind):
    torch.manual_seed(0)
    q = torch.randn(2, 2, 3, 4, requires_grad=True)
    k = torch.randn(2, 2, 5, 4, requires_grad=True)
    v = torch.randn(2, 2, 5, 4, requires_grad=True)
    keep = padding_mask(torch.tensor([5, 0]), 5)[:, None, None, :]  # second sequence: all padding
    mask = keep if mask_kind == "bool" else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    out, _ = scaled_dot_product_attention(q, k, v, mask, impl=impl)
    assert torch.isfinite(out).all() and out[1].abs().max() == 0
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert v.grad[1].abs().max() == 0


def test_gradcheck_float64():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, T, 3, dtype=torch.float64, requires_grad=True) for T in (3, 4, 4))
    mask = torch.tensor([True, True, False, True])[None, None, None, :]
    for impl in ("math", "fused"):
        f = lambda q, k, v: scaled_dot_product_attention(q, k, v, mask, impl=impl)[0]  # noqa: E731
        assert torch.autograd.gradcheck(f, (q, k, v))
    f = lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True, impl="math")[0]  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v))


def test_masks():
    assert padding_mask(torch.tensor([2, 0, 3]), 3).tolist() == [
        [True, True, False], [False, False, False], [True, True, True]]
    assert padding_mask_from_ids(torch.tensor([[5, 0, 0]])).tolist() == [[True, False, False]]
    # lower-right: one query over 3 keys (cached decoding) sees everything
    assert causal_mask(1, 3).tolist() == [[True, True, True]]
    assert causal_mask(2, 3).tolist() == [[True, True, False], [True, True, True]]
    assert local_window_mask(4, 4, 1).int().tolist() == [
        [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    assert local_window_mask(3, 3, 1, causal=True).int().tolist() == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    m = merge_masks(torch.tensor([[True, False]]), causal_mask(2))
    assert m.shape == (1, 1, 2, 2) and m.int().tolist() == [[[[1, 0], [1, 0]]]]


def test_grouped_query_attention_equals_repeated_heads():
    torch.manual_seed(0)
    gqa = MultiHeadAttention(32, n_heads=8, n_kv_heads=2)
    x = torch.randn(2, 5, 32)
    out, _ = gqa(x)
    # the same computation done by hand: each kv head serves 4 query heads
    q, k, v = gqa.qkv_proj(x).split([32, 8, 8], -1)
    q = q.view(2, 5, 8, 4).transpose(1, 2)
    k = k.view(2, 5, 2, 4).transpose(1, 2).repeat_interleave(4, 1)
    v = v.view(2, 5, 2, 4).transpose(1, 2).repeat_interleave(4, 1)
    ref = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 5, 32)
    assert (out - gqa.out_proj(ref)).abs().max() < 1e-6
    assert gqa.qkv_proj.weight.shape == (32 + 2 * 8, 32)


def test_fast_path_reason_is_reported():
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(1, 3, 16)
    with path_reasons() as why:
        mha(x)
        mha(x, need_weights=True)
    assert why.of(mha)[0] is None and "need_weights" in why.of(mha)[1] and len(why.fused) == 2
    with pytest.raises(ValueError, match="cannot return attention weights"):
        scaled_dot_product_attention(x[:, None], x[:, None], x[:, None], need_weights=True, impl="fused")


def test_bf16_on_cpu_takes_the_math_path_for_short_keys_and_matches_fused():
    torch.manual_seed(0)
    mha = MultiHeadAttention(64, 4).eval()
    for T, expect_math in ((20, True), (300, False)):
        x = torch.randn(2, T, 64)
        mask = torch.ones(2, T, dtype=torch.bool)
        mask[1, T // 2:] = False
        with torch.autocast("cpu", dtype=torch.bfloat16), path_reasons() as why:
            auto, _ = mha(x, padding_mask=mask, is_causal=True)
            reason = why.of(mha)[0]
            mha.impl = "fused"
            fused, _ = mha(x, padding_mask=mask, is_causal=True)
            mha.impl = "auto"
        assert (reason is not None and "bfloat16" in reason) == expect_math, reason
        assert (auto.float() - fused.float()).abs().max() < 3e-2  # bf16 rounding of two kernels
    with path_reasons() as why:
        assert mha(torch.randn(2, 20, 64))[0].dtype == torch.float32
    assert why.of(mha) == [None]  # fp32: fused
