"""Blocked sliding-window attention == the band mask (forward, backward, fp32, bf16); rolling KV
cache == uncached windowed forward, token for token, with constant memory."""
import itertools

import pytest
import torch
from torch import nn

from scratchformer.nn import (Encoder, LearnedPositionalEmbedding, Transformer, TransformerConfig, local_window_mask,
                              padding_mask, path_reasons, scaled_dot_product_attention)
from scratchformer.nn.cache import KVCache, RollingKVCache
from scratchformer.nn.window import blocked_window_attention


def _band(q, k, v, window, causal, pad, sink):
    Tq, Tk = q.shape[2], k.shape[2]
    band = local_window_mask(Tq, Tk, window, causal=causal, sink=sink)
    return scaled_dot_product_attention(q, k, v, band, padding_mask=pad)[0]


def _grads(f, q, k, v):
    out = f(q, k, v)
    g = torch.autograd.grad((out.float() * torch.linspace(-1, 1, out.shape[-1])).sum(), (q, k, v))
    return out, g


GRID = list(itertools.product([False, True], [(7, 7), (16, 16), (33, 33), (5, 12), (9, 30)], [0, 2, 8],
                              [0, 2]))


@pytest.mark.parametrize("causal,lengths,window,sink", GRID)
def test_blocked_window_equals_band_mask_fp32(causal, lengths, window, sink):
    Tq, Tk = lengths
    g = torch.Generator().manual_seed(Tq * 100 + window)
    q = torch.randn(3, 4, Tq, 8, generator=g, requires_grad=True)
    k, v = (torch.randn(3, 2, Tk, 8, generator=g, requires_grad=True) for _ in range(2))  # GQA 4 -> 2
    pad = padding_mask(torch.tensor([Tk, Tk // 2, 0]), Tk)  # one full, one half, one all padding
    ref, g_ref = _grads(lambda *t: _band(*t, window, causal, pad, sink), q, k, v)
    out, g_out = _grads(lambda *t: blocked_window_attention(*t, window, causal, pad, sink), q, k, v)
    assert (out - ref).abs().max() < 1e-5
    for a, b in zip(g_out, g_ref):
        assert (a - b).abs().max() < 1e-5


@pytest.mark.parametrize("causal", [False, True])
def test_blocked_window_in_bf16_is_as_accurate_as_the_band_mask(causal):
    """bf16: both paths round differently; each is compared with the fp32 result on the same
    (bf16-valued) inputs, and the blocked path must be as close as the band mask is."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 70, 16, generator=g).bfloat16().requires_grad_() for _ in range(3))
    pad = padding_mask(torch.tensor([70, 41]), 70)
    exact = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref, g_ref = _grads(lambda *t: _band(*t, 16, causal, pad, 0), *exact)
    results = {"band": _grads(lambda *t: _band(*t, 16, causal, pad, 0), q, k, v),
               "blocked": _grads(lambda *t: blocked_window_attention(*t, 16, causal, pad), q, k, v)}
    err = {}
    for name, (out, grads) in results.items():
        assert out.dtype == torch.bfloat16
        err[name] = max([float((out.float() - ref).abs().max().detach())]
                        + [float((a.float() - b).abs().max() / b.abs().max()) for a, b in zip(grads, g_ref)])
    assert err["blocked"] < 3e-2 and err["blocked"] <= 1.5 * err["band"] + 1e-3, err


def _pair(**kw):
    cfg = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, window=5, **kw)
    torch.manual_seed(0)
    blocked = Encoder(cfg)
    band = Encoder(cfg.replace(window_impl="band"))
    band.load_state_dict(blocked.state_dict())
    return blocked, band


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("position", ["sinusoidal", "rope"])
def test_encoder_window_blocked_equals_band_forward_and_backward(causal, position):
    blocked, band = _pair(position=position, n_kv_heads=2)
    x = torch.randn(3, 23, 32)
    m = padding_mask(torch.tensor([23, 11, 2]), 23)
    blocked.set_gradient_checkpointing(True)  # the long-input setting: recompute in backward
    outs = []
    for enc in (blocked, band):
        y = enc(x, m, is_causal=causal)
        grads = torch.autograd.grad((y * m[..., None]).square().sum(), list(enc.parameters()))
        outs.append((y, grads))
    (a, ga), (b, gb) = outs
    assert (a[m] - b[m]).abs().max() < 1e-5
    assert max(float((u - w).abs().max()) for u, w in zip(ga, gb)) < 1e-4
    attn = blocked.layers[0].self_attn
    with path_reasons() as why:
        blocked(x, m, is_causal=causal)
        band(x, m, is_causal=causal)
    assert why.of(attn, "window") == [None]  # the blocked path ran
    assert "band" in why.of(band.layers[0].self_attn, "window")[0]


def test_window_falls_back_to_the_band_mask_and_says_why():
    blocked, _ = _pair()
    attn = blocked.layers[0].self_attn
    with path_reasons() as why:
        blocked(torch.randn(1, 23, 32), need_weights=True)
        blocked(torch.randn(1, 4, 32))
        blocked(torch.randn(1, 23, 32), attn_mask=torch.ones(23, 23, dtype=torch.bool))
    first, short, masked = why.of(attn, "window")
    assert "need_weights" in first and "one block" in short and "attn_mask" in masked


class TinyLM(nn.Module):
    """A decoder-only stack from nn blocks (what models/language_model.py builds)."""

    def __init__(self, position, window, sink):
        super().__init__()
        self.cfg = TransformerConfig(d_model=32, n_heads=4, n_kv_heads=2, d_ff=64, n_layers=2, dropout=0.0,
                                     position=position, window=window, window_sink=sink, max_len=256)
        self.emb = nn.Embedding(20, 32)
        self.pos = LearnedPositionalEmbedding(256, 32) if position == "learned" else None
        self.stack = Encoder(self.cfg)
        self.head = nn.Linear(32, 20)

    def forward(self, ids, caches=None):
        offset = caches[0].length if caches else 0
        x = self.emb(ids)
        if self.pos is not None:
            x = self.pos(x, offset)
        return self.head(self.stack(x, is_causal=ids.shape[1] > 1, caches=caches))


@pytest.mark.parametrize("position,sink", [("rope", 0), ("rope", 2), ("learned", 0), ("alibi", 2)])
def test_rolling_cache_equals_uncached_window_at_every_step(position, sink):
    torch.manual_seed(0)
    model = TinyLM(position, window=4, sink=sink).eval()
    ids = torch.randint(0, 20, (2, 40))
    full = model(ids)
    caches = model.stack.new_caches()
    assert all(isinstance(c, RollingKVCache) for c in caches)
    steps = [model(ids[:, :9], caches)]  # prefill longer than the window: blocked path, then trim
    for t in range(9, 25):
        steps.append(model(ids[:, t : t + 1], caches))
        assert caches[0].kept <= 4 + sink  # constant memory
    for t in range(25, 40, 3):  # chunks after the window rolled: the band mask at absolute positions
        steps.append(model(ids[:, t : t + 3], caches))
    assert caches[0].length == 40 and caches[0].kept <= 4 + sink
    assert (torch.cat(steps, 1) - full).abs().max() < 1e-5


def test_rolling_cache_greedy_tokens_equal_uncached():
    torch.manual_seed(1)
    model = TinyLM("rope", window=6, sink=1).eval()
    seq_a = seq_b = [3, 7, 1]
    caches = model.stack.new_caches()
    logits = model(torch.tensor([seq_b]), caches)[:, -1]
    for _ in range(30):
        nxt_a = int(model(torch.tensor([seq_a]))[0, -1].argmax())  # uncached: whole text, same window
        nxt_b = int(logits.argmax())
        seq_a, seq_b = seq_a + [nxt_a], seq_b + [nxt_b]
        logits = model(torch.tensor([[nxt_b]]), caches)[:, -1]
    assert seq_a == seq_b and len(set(seq_a)) > 3
    assert caches[0].kept == 6 + 1


def test_rolling_cache_keeps_sinks_and_the_last_window():
    c = RollingKVCache(window=3, sink=2)
    for t in range(10):
        x = torch.full((1, 1, 1, 1), float(t))
        k, _ = c.update(x, x)
        assert k[0, 0, :, 0].tolist() == c.positions().float().tolist()  # values = positions
    assert c.positions().tolist() == [0, 1, 6, 7, 8, 9] and c.kept == 5 and not c.contiguous
    assert KVCache().contiguous


def test_windowed_decoder_cache_equals_full_forward():
    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, window=3)
    model = Transformer(cfg).eval()
    src, tgt = torch.randn(2, 6, 32), torch.randn(2, 12, 32)
    memory = model.encoder(src)
    full = model.decoder(tgt, memory)
    cache = model.decoder.new_cache()
    assert isinstance(cache.self_attn[0], RollingKVCache)
    steps = [model.decoder(tgt[:, t : t + 1], memory, cache=cache) for t in range(12)]
    assert (torch.cat(steps, 1) - full).abs().max() < 1e-5
