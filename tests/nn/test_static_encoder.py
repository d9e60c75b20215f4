"""The static encoder (nn/static_encoder.py: inputs padded to shape buckets, the padding masked,
one torch.compile'd graph per bucket) gives the eager `Encoder`'s outputs at every real position
(fp32, atol 1e-5), Post-LN and Pre-LN, with ragged padding and sizes off the bucket edges. The
logic is tested on the eager static encoder (`static.use_compiler(False)`: the same module, the
same packed oneDNN products, no compile); one test compiles it (Inductor's C++ wrapper)."""
import shutil
import warnings

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny ops: see tests/conftest.py

from scratchformer.nn import Encoder, TransformerConfig, static, static_encoder
from scratchformer.nn.quant import Int8Linear
from scratchformer.nn.static_encoder import StaticEncoder, static_encode, static_encoder_reason

TOL = 1e-5


def _encoder(seed: int = 0, **kw) -> Encoder:
    torch.manual_seed(seed)
    cfg = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.1) | kw
    return Encoder(TransformerConfig(**cfg)).eval()


def _inputs(rows: int, length: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`(rows, length, 32)` inputs and a ragged padding mask (True = real): row i keeps
    `length - 2 i` positions (at least 1)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, length, 32, generator=g)
    keep = torch.arange(length)[None, :] < torch.tensor([max(1, length - 2 * i) for i in range(rows)])[:, None]
    return x, keep


def _max_diff_on_real(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> float:
    return float((a - b)[keep].abs().max())


@pytest.fixture
def eager_static(monkeypatch):
    monkeypatch.setattr(static_encoder, "_COMPILED", {})
    previous = static.use_compiler(False)
    yield
    static.use_compiler(previous)


@pytest.mark.usefixtures("eager_static")
@pytest.mark.parametrize("norm_first,final_norm", [(False, False), (True, True)])
@pytest.mark.parametrize("rows,length", [(1, 5), (3, 11), (5, 17)])
@pytest.mark.parametrize("pack_min", [0, None])  # every projection through oneDNN packed, or (d32) none
def test_static_encoder_equals_eager_encoder_on_real_positions(norm_first, final_norm, rows, length, pack_min,
                                                                monkeypatch):
    if pack_min is not None:
        monkeypatch.setattr(static_encoder, "PACK_MIN", pack_min)
    enc = _encoder(1, norm_first=norm_first, final_norm=final_norm)
    x, keep = _inputs(rows, length)
    with torch.no_grad():
        want = enc(x, padding_mask=keep)
        got = static_encode(enc, x, keep)
    assert got.shape == want.shape
    assert _max_diff_on_real(got, want, keep) < TOL
    entry = next(iter(static_encoder._COMPILED.values()))
    packed = pack_min is not None and torch.backends.mkldnn.is_available()
    assert len(entry.module.packed) == (4 * len(enc.layers) if packed else 0)  # which products ran
    assert static_encoder._COMPILED and next(iter(static_encoder._COMPILED))[2] == \
        (static.bucket(rows), static.bucket(length, 8))  # padded up to the bucket


@pytest.mark.usefixtures("eager_static")
@pytest.mark.parametrize("kw", [dict(activation="gelu"), dict(activation="swiglu", bias=False),
                                dict(norm="rmsnorm", norm_first=True, final_norm=True)])
def test_static_encoder_equals_eager_for_other_activations_and_norms(kw):
    enc = _encoder(2, **kw)
    x, keep = _inputs(3, 9, seed=1)
    with torch.no_grad():
        assert _max_diff_on_real(static_encode(enc, x, keep), enc(x, padding_mask=keep), keep) < TOL


@pytest.mark.usefixtures("eager_static")
def test_padded_positions_never_change_the_real_ones():
    """Whatever sits at the padded positions (and in the bucket's filler row), the real
    positions' outputs are the same, bit for bit; and nothing is NaN, not even a row that is all
    padding."""
    enc = _encoder(3)
    x, keep = _inputs(3, 11)
    keep[2] = False  # a row of padding only
    noisy = x.clone()
    noisy[~keep] = 1e3 * torch.randn(int((~keep).sum()), 32)
    module = StaticEncoder(enc, 4 * 16)
    xb = torch.zeros(4, 16, 32)
    kb = torch.zeros(4, 16, dtype=torch.bool)
    kb[:3, :11] = keep
    with torch.no_grad():
        xb[:3, :11] = x
        a = module(xb, kb)
        xb[:3, :11] = noisy
        xb[3] = 7.0  # the filler row
        b = module(xb, kb)
    assert torch.equal(a[:3, :11][keep], b[:3, :11][keep])
    assert torch.isfinite(a).all() and torch.isfinite(b).all()


@pytest.mark.usefixtures("eager_static")
def test_without_a_mask_every_position_is_real():
    enc = _encoder(4)
    x, _ = _inputs(2, 8)  # exactly a bucket: no padding added
    with torch.no_grad():
        assert float((static_encode(enc, x) - enc(x)).abs().max()) < TOL


def test_reasons_for_the_eager_encoder():
    enc = _encoder(5)
    assert static_encoder_reason(enc, 1, 32) is None
    assert static_encoder_reason(enc, 32, 128) == (
        f"32 x 128 pads to 4096 tokens, above static_encoder.MAX_TOKENS ({static_encoder.MAX_TOKENS})")
    assert static_encoder_reason(enc.train(), 1, 8) == \
        "the stack is in training mode (dropout is on): the lean step is for inference"
    assert static_encoder_reason(_encoder(5, position="rope"), 1, 8) == "rotary positions: the eager encoder serves them"
    assert static_encoder_reason(_encoder(5, n_kv_heads=2), 1, 8) == \
        "grouped-query attention: the eager encoder serves it"
    q = _encoder(5)
    q.layers[1].ffn.linear_in = Int8Linear.from_linear(q.layers[1].ffn.linear_in)
    assert static_encoder_reason(q, 1, 8) == "int8 projections: the eager encoder serves them"
    x, keep = _inputs(2, 6)
    with torch.no_grad():  # a model it cannot serve: the eager encoder's output, padded rows zeros
        assert torch.equal(static_encode(q, x, keep), q(x, padding_mask=keep))


@pytest.mark.usefixtures("eager_static")
def test_one_entry_per_model_bucket_and_weights():
    enc = _encoder(6)
    x, keep = _inputs(3, 11)
    with torch.no_grad():
        static_encode(enc, x, keep)
        static_encode(enc, x[:, :9], keep[:, :9])  # the same (4, 16) bucket
        assert len(static_encoder._COMPILED) == 1
        static_encode(enc, x[:1], keep[:1])  # (1, 16)
        assert len(static_encoder._COMPILED) == 2
        enc.layers[0].ffn.linear_out.weight.mul_(2)  # an in-place update: the frozen graph is stale
        got = static_encode(enc, x, keep)
        assert len(static_encoder._COMPILED) == 3
        assert _max_diff_on_real(got, enc(x, padding_mask=keep), keep) < TOL


def test_a_failing_compiler_falls_back_to_the_eager_encoder_with_one_warning(monkeypatch):
    def broken(*args, **kwargs):
        def fn(*a, **k):
            raise RuntimeError("no C++ compiler found\nmore detail")
        return fn

    monkeypatch.setattr(static, "_disabled", [])
    monkeypatch.setattr(static_encoder, "_COMPILED", {})
    monkeypatch.setattr(torch, "compile", broken)
    previous = static.use_compiler(True)
    try:
        enc = _encoder(7)
        x, keep = _inputs(3, 11)
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = static_encode(enc, x, keep)
            again = static_encode(enc, x[:1], keep[:1])  # no second warning: the fallback is remembered
            want = enc(x, padding_mask=keep)
    finally:
        static.use_compiler(previous)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert msgs == ["the compiled encoder is off (torch.compile failed: RuntimeError: no C++ compiler found); "
                    "the eager encoder runs (and a translation's decoding the lean step)"]
    assert torch.equal(got, want) and torch.equal(again, want[:1])
    assert static_encoder_reason(enc, 1, 8) == \
        "the compiler failed in this process (RuntimeError: no C++ compiler found)"


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="no C++ compiler: Inductor cannot build the compiled encoder here")
@pytest.mark.parametrize("norm_first", [False, True])
def test_compiled_static_encoder_equals_eager_encoder(norm_first, monkeypatch):
    monkeypatch.setattr(static_encoder, "_COMPILED", {})
    if not norm_first:  # the packed oneDNN products in the graph (d32 weights are below PACK_MIN)
        monkeypatch.setattr(static_encoder, "PACK_MIN", 0)
    if static.compile_disabled():
        pytest.skip(f"the compiler failed earlier in this process: {static.compile_disabled()}")
    enc = _encoder(8, norm_first=norm_first, final_norm=norm_first)
    x, keep = _inputs(3, 11)
    with torch.no_grad():
        got = static_encode(enc, x, keep)
        again = static_encode(enc, x, keep)  # the compiled graph, called again
        want = enc(x, padding_mask=keep)
    (entry,) = static_encoder._COMPILED.values()
    assert entry.compiled and entry.compile_seconds > 0, static.compile_disabled()
    assert len(entry.module.packed) == (0 if norm_first or not torch.backends.mkldnn.is_available() else 8)
    assert _max_diff_on_real(got, want, keep) < TOL
    assert torch.equal(got, again)
    if norm_first:
        return
    with torch.no_grad():  # an in-place update: a new entry, whose graph has the new weights frozen in
        enc.layers[0].ffn.linear_in.weight.mul_(2)
        got = static_encode(enc, x, keep)
        want = enc(x, padding_mask=keep)
    assert len(static_encoder._COMPILED) == 2
    assert _max_diff_on_real(got, want, keep) < TOL
