"""Blocks and stacks: norms, positions, KV cache parity, config round trip, gradients."""
import math

import pytest
import torch
from torch import nn

from scratchformer.errors import UserError
from scratchformer.nn import (ALiBi, Encoder, LayerNorm, LearnedPositionalEmbedding, RMSNorm,
                              RotaryEmbedding, SinusoidalPositionalEncoding, Transformer,
                              TransformerConfig, padding_mask, sinusoidal_table)
from scratchformer.nn.attention import KVCache


def test_layernorm_equals_torch_and_textbook_does_not():
    torch.manual_seed(0)
    x = torch.randn(4, 7, 16) * 3 + 1
    ref = nn.LayerNorm(16)
    with torch.no_grad():
        ref.weight.normal_(), ref.bias.normal_()
    for fused in (True, False):
        ours = LayerNorm(16, fused=fused)
        ours.load_state_dict(ref.state_dict())
        assert (ours(x) - ref(x)).abs().max() < 1e-5
    textbook = ref.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5) + ref.bias
    assert (textbook - ref(x)).abs().max() > 1e-3  # the textbook formula is measurably different


def test_layernorm_gradcheck_float64():
    ln = LayerNorm(5, fused=False).double()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ln, (x,))


def test_rmsnorm_math_equals_fused():
    x = torch.randn(3, 8)
    a, b = RMSNorm(8, fused=True), RMSNorm(8, fused=False)
    assert (a(x) - b(x)).abs().max() < 1e-6
    assert (b(x) - x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()).abs().max() < 1e-6


def test_sinusoidal_matches_closed_form():
    table = sinusoidal_table(50, 16)
    for pos in (0, 1, 17, 49):
        for i in range(8):
            angle = pos / 10000 ** (2 * i / 16)
            assert abs(table[pos, 2 * i] - math.sin(angle)) < 1e-5
            assert abs(table[pos, 2 * i + 1] - math.cos(angle)) < 1e-5
    pe = SinusoidalPositionalEncoding(16)
    x = torch.zeros(1, 3, 16)
    assert torch.allclose(pe(x, offset=10)[0], table[10:13])
    assert sinusoidal_table(5, 7).shape == (5, 7)  # odd widths work too


def test_rope_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    rope = RotaryEmbedding(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    def score(i, j):
        return (rope.rotate(q, i) * rope.rotate(k, j)).sum()
    base = score(3, 1)
    for shift in (1, 10, 100, 1000):
        assert abs(score(3 + shift, 1 + shift) - base) < 1e-4
    assert abs(score(4, 1) - base) > 1e-3  # a different offset gives a different score
    assert torch.allclose(rope.rotate(q, 0), q)  # position 0 is the identity
    # norms are preserved (it is a rotation)
    assert torch.allclose(rope.rotate(q, 57).norm(), q.norm(), atol=1e-5)


def test_alibi_bias():
    alibi = ALiBi(8)
    assert torch.allclose(alibi.slopes, torch.tensor([2 ** -(i + 1) for i in range(8)]))
    b = alibi.bias(2, 3)
    assert b.shape == (8, 2, 3) and b[0].tolist() == [[-0.5, 0.0, -0.5], [-1.0, -0.5, 0.0]]
    assert ALiBi(6).slopes.shape == (6,)


def test_learned_positions_refuse_too_long_input():
    pos = LearnedPositionalEmbedding(4, 8)
    with pytest.raises(UserError, match="longer than max_len=4"):
        pos(torch.zeros(1, 5, 8))


class TinyCausalLM(nn.Module):
    """A decoder-only stack built only from nn blocks, to test the KV cache."""

    def __init__(self, position):
        super().__init__()
        self.cfg = TransformerConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=2,
                                     dropout=0.0, position=position, activation="swiglu", norm="rmsnorm")
        self.emb = nn.Embedding(20, 32)
        self.pos = LearnedPositionalEmbedding(64, 32) if position == "learned" else None
        self.stack = Encoder(self.cfg)

    def forward(self, ids, caches=None):
        offset = caches[0].length if caches else 0
        x = self.emb(ids)
        if self.pos is not None:
            x = self.pos(x, offset)
        return self.stack(x, is_causal=True, caches=caches)


@pytest.mark.parametrize("position", ["rope", "learned", "alibi"])
def test_kv_cache_equals_full_forward_at_every_step(position):
    torch.manual_seed(0)
    model = TinyCausalLM(position).eval()
    ids = torch.randint(0, 20, (2, 12))
    full = model(ids)
    caches = [KVCache() for _ in range(2)]
    steps = [model(ids[:, :5], caches)]  # a prompt of 5, then one token at a time
    steps += [model(ids[:, t : t + 1], caches) for t in range(5, 12)]
    cached = torch.cat(steps, dim=1)
    assert (cached - full).abs().max() < 1e-5


def test_kv_cache_reorder_follows_beams():
    c = KVCache()
    k = torch.arange(3.0)[:, None, None, None].expand(3, 1, 2, 1)
    c.update(k, k)
    c.reorder(torch.tensor([2, 2, 0]))
    assert c.get()[0][:, 0, 0, 0].tolist() == [2.0, 2.0, 0.0]


def test_decoder_cache_equals_full_forward():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, norm_first=False)
    model = Transformer(cfg).eval()
    src, tgt = torch.randn(2, 6, 32), torch.randn(2, 5, 32)
    src_mask = padding_mask(torch.tensor([6, 3]), 6)
    memory = model.encoder(src, src_mask)
    full = model.decoder(tgt, memory, memory_mask=src_mask)
    cache = model.decoder.new_cache()
    steps = [model.decoder(tgt[:, t : t + 1], memory, memory_mask=src_mask, cache=cache) for t in range(5)]
    assert (torch.cat(steps, 1) - full).abs().max() < 1e-5


def test_padded_rows_have_no_nan_in_outputs_or_gradients():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)
    enc = Encoder(cfg)
    x = torch.randn(2, 4, 16, requires_grad=True)
    out = enc(x, padding_mask(torch.tensor([4, 0]), 4))
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in enc.parameters() if p.grad is not None)
    assert torch.isfinite(x.grad).all()


def test_local_window_matches_explicit_mask():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1, dropout=0.0, window=2)
    enc = Encoder(cfg).eval()
    x = torch.randn(1, 7, 16)
    full_cfg = cfg.replace(window=None)
    ref = Encoder(full_cfg).eval()
    ref.load_state_dict(enc.state_dict())
    from scratchformer.nn import local_window_mask
    band = local_window_mask(7, 7, 2)[None, None]
    assert torch.allclose(enc(x), ref(x, band), atol=1e-6)
    assert not torch.allclose(enc(x), ref(x), atol=1e-3)


def test_weights_per_layer_and_head():
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=3, dropout=0.0)
    out, weights = Encoder(cfg)(torch.randn(2, 5, 16), need_weights=True)
    assert len(weights) == 3 and weights[0].shape == (2, 2, 5, 5)
    assert torch.allclose(weights[1].sum(-1), torch.ones(2, 2, 5))


def test_gradient_checkpointing_gives_same_gradients():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0)
    a = Encoder(cfg)
    b = Encoder(cfg)
    b.load_state_dict(a.state_dict())
    b.set_gradient_checkpointing(True)
    x = torch.randn(2, 5, 16)
    a(x).pow(2).sum().backward()
    b(x).pow(2).sum().backward()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.allclose(pa.grad, pb.grad, atol=1e-6)


def test_config_json_round_trip_and_errors(tmp_path):
    cfg = TransformerConfig(d_model=64, n_heads=4, n_kv_heads=2, position="rope", window=8)
    cfg.save_json(tmp_path / "c.json")
    assert TransformerConfig.load_json(tmp_path / "c.json") == cfg
    with pytest.raises(UserError, match="not divisible"):
        TransformerConfig(d_model=30, n_heads=4)
    with pytest.raises(UserError, match="no option"):
        TransformerConfig.from_dict({"d_modle": 3})
    with pytest.raises(UserError, match="activation"):
        TransformerConfig(activation="tanh")
