"""Our blocks hold torch.nn's weights and give torch.nn's numbers (max abs diff < 1e-5)."""
import itertools

import pytest
import torch
from torch import nn

from scratchformer.errors import UserError
from scratchformer.interop import from_torch, to_torch

TOL = 1e-5
D, H, FF = 32, 4, 64


def _inputs(B=3, S=7, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randn(B, S, D, generator=g)
    tgt = torch.randn(B, T, D, generator=g)
    src_len = torch.tensor([S, 4, 2])[:B]
    tgt_len = torch.tensor([T, 3, 5])[:B]
    src_pad = torch.arange(S)[None] >= src_len[:, None]  # torch polarity: True = ignore
    tgt_pad = torch.arange(T)[None] >= tgt_len[:, None]
    return src, tgt, src_pad, tgt_pad


def _real(x, pad):
    return x[~pad]  # compare real tokens only: torch's fast path zeroes padded rows


GRID = list(itertools.product([False, True], ["relu", "gelu"]))


@pytest.mark.parametrize("norm_first,activation", GRID)
@pytest.mark.parametrize("mode", ["train", "eval", "fastpath"])
def test_encoder_matches_torch(norm_first, activation, mode):
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation,
                                       batch_first=True, norm_first=norm_first)
    theirs = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=(mode == "fastpath"))
    theirs.train(mode == "train")
    ours = from_torch(theirs)
    src, _, src_pad, _ = _inputs()
    ctx = torch.no_grad() if mode == "fastpath" else torch.enable_grad()
    with ctx:
        expected = theirs(src, src_key_padding_mask=src_pad)
        got = ours(src, ~src_pad)
    assert (_real(got, src_pad) - _real(expected, src_pad)).abs().max() < TOL


@pytest.mark.parametrize("norm_first,activation", GRID)
def test_encoder_layer_causal_matches_torch(norm_first, activation):
    torch.manual_seed(2)
    theirs = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation=activation,
                                        batch_first=True, norm_first=norm_first).eval()
    ours = from_torch(theirs)
    src, _, src_pad, _ = _inputs()
    causal = nn.Transformer.generate_square_subsequent_mask(src.shape[1])
    expected = theirs(src, src_mask=causal, src_key_padding_mask=src_pad, is_causal=True)
    got, _ = ours(src, padding_mask=~src_pad, is_causal=True)
    assert (_real(got, src_pad) - _real(expected, src_pad)).abs().max() < TOL


@pytest.mark.parametrize("norm_first,activation", GRID)
@pytest.mark.parametrize("train", [False, True])
def test_transformer_matches_torch(norm_first, activation, train):
    torch.manual_seed(3)
    theirs = nn.Transformer(D, H, 2, 2, FF, dropout=0.0, activation=activation,
                            batch_first=True, norm_first=norm_first).train(train)
    ours = from_torch(theirs)
    src, tgt, src_pad, tgt_pad = _inputs()
    causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    expected = theirs(src, tgt, tgt_mask=causal, src_key_padding_mask=src_pad,
                      tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
    got = ours(src, tgt, src_mask=~src_pad, tgt_mask=~tgt_pad)
    assert (_real(got, tgt_pad) - _real(expected, tgt_pad)).abs().max() < TOL
    # gradients flow the same way too
    expected[~tgt_pad].sum().backward()
    got[~tgt_pad].sum().backward()
    g_theirs = theirs.decoder.layers[0].linear1.weight.grad
    g_ours = ours.decoder.layers[0].ffn.linear_in.weight.grad
    assert (g_theirs - g_ours).abs().max() < 1e-4


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_and_stack_match_torch(norm_first):
    torch.manual_seed(4)
    layer = nn.TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    src, tgt, src_pad, tgt_pad = _inputs()
    causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
    expected = layer(tgt, src, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                     memory_key_padding_mask=src_pad, tgt_is_causal=True)
    got, _ = from_torch(layer)(tgt, src, padding_mask=~tgt_pad, memory_padding_mask=~src_pad)
    assert (_real(got, tgt_pad) - _real(expected, tgt_pad)).abs().max() < TOL
    stack = nn.TransformerDecoder(layer, 2).eval()
    expected = stack(tgt, src, tgt_mask=causal, tgt_key_padding_mask=tgt_pad,
                     memory_key_padding_mask=src_pad, tgt_is_causal=True)
    got = from_torch(stack)(tgt, src, self_mask=~tgt_pad, memory_mask=~src_pad)
    assert (_real(got, tgt_pad) - _real(expected, tgt_pad)).abs().max() < TOL


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention_matches_torch(need_weights):
    torch.manual_seed(5)
    theirs = nn.MultiheadAttention(D, H, batch_first=True).eval()
    ours = from_torch(theirs)
    src, tgt, src_pad, _ = _inputs()
    exp_out, exp_w = theirs(tgt, src, src, key_padding_mask=src_pad, average_attn_weights=False)
    out, w = ours(tgt, context=src, padding_mask=~src_pad, need_weights=need_weights)
    assert (out - exp_out).abs().max() < TOL
    if need_weights:
        assert (w - exp_w).abs().max() < TOL
    # self-attention uses the fused projection: one matmul for q, k and v
    exp_out, _ = theirs(src, src, src, key_padding_mask=src_pad)
    out, _ = ours(src, padding_mask=~src_pad)
    assert (_real(out, src_pad) - _real(exp_out, src_pad)).abs().max() < TOL


def test_to_torch_round_trip():
    torch.manual_seed(6)
    theirs = nn.Transformer(D, H, 2, 1, FF, dropout=0.0, batch_first=True).eval()
    back = to_torch(from_torch(theirs)).eval()
    src, tgt, src_pad, _ = _inputs()
    a = theirs(src, tgt, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
    b = back(src, tgt, src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad)
    assert torch.equal(a, b)
    mha = nn.MultiheadAttention(D, H, batch_first=True)
    assert torch.equal(to_torch(from_torch(mha)).in_proj_weight, mha.in_proj_weight)


def test_from_torch_rejects_sequence_first():
    with pytest.raises(UserError, match="batch_first"):
        from_torch(nn.TransformerEncoderLayer(D, H, FF, batch_first=False))


def test_to_torch_refuses_ablated_configs():
    from scratchformer.errors import UserError
    from scratchformer.nn import Encoder, TransformerConfig

    for switch in ("ablate_residual", "ablate_scale", "ablate_norm"):
        enc = Encoder(TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, **{switch: True}))
        with pytest.raises(UserError, match=switch):
            to_torch(enc)
