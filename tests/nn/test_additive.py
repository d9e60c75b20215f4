"""Additive (Bahdanau) attention against a hand computation (d2l 11.3): score = w_vᵀ tanh(W_q q + W_k k)."""
import math

import pytest
import torch

from scratchformer.nn import AdditiveAttention, MaskError


def tiny() -> AdditiveAttention:
    """query and key of size 1, hidden size 2: W_q = [1, -1]ᵀ, W_k = [0.5, 1]ᵀ, w_v = [1, 2]."""
    att = AdditiveAttention(query_dim=1, key_dim=1, hidden_dim=2)
    with torch.no_grad():
        att.W_q.weight.copy_(torch.tensor([[1.0], [-1.0]]))
        att.W_k.weight.copy_(torch.tensor([[0.5], [1.0]]))
        att.w_v.weight.copy_(torch.tensor([[1.0, 2.0]]))
    return att


def test_additive_attention_equals_the_hand_computation():
    # one query q = 1, keys 0 and 1, values 10 and 20
    q, k, v = torch.tensor([[[1.0]]]), torch.tensor([[[0.0], [1.0]]]), torch.tensor([[[10.0], [20.0]]])
    s0 = 1 * math.tanh(1 * 1 + 0.5 * 0) + 2 * math.tanh(-1 * 1 + 1 * 0)  # = tanh(1) - 2 tanh(1) = -0.7616
    s1 = 1 * math.tanh(1 * 1 + 0.5 * 1) + 2 * math.tanh(-1 * 1 + 1 * 1)  # = tanh(1.5) + 0 = 0.9051
    w1 = math.exp(s1) / (math.exp(s0) + math.exp(s1))  # 0.8411
    with torch.no_grad():
        out, weights = tiny()(q, k, v)
    assert torch.allclose(tiny().scores(q, k), torch.tensor([[[s0, s1]]]), atol=1e-6)
    assert abs(s0 - -0.761594) < 1e-6 and abs(s1 - 0.905148) < 1e-6 and abs(w1 - 0.841141) < 1e-6
    assert torch.allclose(weights, torch.tensor([[[1 - w1, w1]]]), atol=1e-6)
    assert abs(float(out) - (10 * (1 - w1) + 20 * w1)) < 1e-5  # 18.411


def test_masks_true_means_may_attend_and_an_empty_row_is_zero():
    att = tiny().requires_grad_(False)
    q = torch.tensor([[[1.0], [2.0]]])  # two queries
    k, v = torch.tensor([[[0.0], [1.0]]]), torch.tensor([[[10.0], [20.0]]])
    out, w = att(q, k, v, padding_mask=torch.tensor([[True, False]]))
    assert torch.equal(w, torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])) and torch.equal(out, torch.full((1, 2, 1), 10.0))
    out, w = att(q, k, v, attn_mask=torch.tensor([[True, True], [False, False]]))  # query 2 sees nothing
    assert torch.equal(w[0, 1], torch.zeros(2)) and float(out[0, 1]) == 0.0 and not out.isnan().any()
    assert abs(float(w[0, 0].sum()) - 1.0) < 1e-6
    with pytest.raises(MaskError, match=r"padding_mask has dtype torch.int64, but attention reads only bool"):
        att(q, k, v, padding_mask=torch.tensor([[1, 0]]))


def test_queries_and_keys_may_differ_in_size():
    att = AdditiveAttention(query_dim=3, key_dim=5, hidden_dim=4)
    out, w = att(torch.randn(2, 4, 3), torch.randn(2, 6, 5), torch.randn(2, 6, 7))
    assert out.shape == (2, 4, 7) and w.shape == (2, 4, 6)
    assert torch.allclose(w.sum(-1), torch.ones(2, 4), atol=1e-6)
