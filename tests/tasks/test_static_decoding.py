"""The static decoding step (nn/static.py: fixed shape buckets, K/V buffers written in place,
compiled ahead of time by AOTInductor) gives the readable search's hypotheses: identical tokens and
`finished` flags, scores within 1e-4, greedy and beam 4, batch 1 and ragged batches, Post-LN and
Pre-LN, both stopping rules. The logic is tested on the eager static step (seconds); one test
compiles it (AOTInductor: ~10-30 s a bucket on 2 cores), checks the same equalities, and that
its packages are stored whole, loaded by another process and by decode.static=auto."""
import copy
import shutil
import warnings

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny ops: see tests/conftest.py

from scratchformer.nn import static
from scratchformer.tasks.translate import decoding
from scratchformer.errors import UserError
from scratchformer.tasks.translate.decoding import DecodeConfig, decode
from scratchformer.tasks.translate.static_step import _StaticStepper, static_path

from test_lean_decoding import _model, _sources  # the same tiny models and ragged sources

# Scores are sums of up to ~10 float32 log-probs; the static step sums attention and products
# in other orders (and over padded slots), so they agree to float32 rounding, not bit for bit.
SCORE_TOL = 1e-4


def _same(a, b) -> None:
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.finished for h in a] == [h.finished for h in b]
    assert max(abs(x.score - y.score) for x, y in zip(a, b)) < SCORE_TOL
    assert max(abs(x.normalized - y.normalized) for x, y in zip(a, b)) < SCORE_TOL


@pytest.fixture
def eager_static():
    previous = static.use_compiler(False)
    yield
    static.use_compiler(previous)


@pytest.mark.usefixtures("eager_static")
@pytest.mark.parametrize("norm_first,seed,boost", [(False, 1, 2.0), (True, 0, 1.5)])
@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("batch", [1, 6])
@pytest.mark.parametrize("early_stop,lp,offset", [(True, 1.0, 4), (False, -0.5, 4), (True, 0.0, 1)])
def test_static_step_search_equals_readable_search(norm_first, seed, boost, beam, batch, early_stop, lp, offset):
    model, src = _model(norm_first, seed, boost), _sources(batch)
    cfg = DecodeConfig(beam=beam, early_stop=early_stop, length_penalty=lp, max_len_ratio=1.0,
                       max_len_offset=offset)
    with torch.no_grad():
        state = _StaticStepper.make(model, src, 12, expand=beam)
        assert state is not None and state.shapes[0] == static.bucket(batch * beam)  # the static step runs
        _same(decode(model, src, cfg.replace(static=True)), decode(model, src, cfg.replace(lean=False)))


def test_buckets_are_powers_of_two_with_a_floor():
    assert [static.bucket(n) for n in (1, 2, 3, 5, 16, 17)] == [1, 2, 4, 8, 16, 32]
    assert static.bucket(3, 16) == 16 and static.bucket(40, 16) == 64


@pytest.mark.usefixtures("eager_static")
def test_weight_only_int8_step_stays_close_to_float():
    model, src = _model(False, 1, 2.0), _sources(6)
    with torch.no_grad():
        fp = _StaticStepper(model, src, 8)
        q = _StaticStepper(model, src, 8, int8=True)
        prefix = torch.full((6, 1), 2)
        a, b = fp.step(prefix), q.step(prefix)
    assert q.compiled.module.layers[0]["qkv"][0].dtype == torch.int8  # (out, in) int8 weights
    finite = torch.isfinite(a)
    assert torch.equal(finite, torch.isfinite(b))
    err = float((a[finite] - b[finite]).abs().max())
    assert 0 < err < 0.05, err  # per-channel int8 weights: a few hundredths of a nat


def test_a_failing_compiler_falls_back_to_the_lean_step_with_one_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler found\nmore detail")

    monkeypatch.setattr(static, "_disabled", [])
    monkeypatch.setattr(static, "_COMPILED", {})
    monkeypatch.setattr(static, "build_package", broken)  # the decoding step (AOTInductor)
    monkeypatch.setattr(torch, "compile", lambda *a, **k: broken)  # the encoder: torch.compile(...)(x) fails
    monkeypatch.setattr(static, "_use_compiler", [True])
    model, src = _model(False, 1, 2.0), _sources(6)
    cfg = DecodeConfig(beam=1, static=True)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = decode(model, src, cfg)
        again = decode(model, src, cfg)  # no second warning: the fallback is remembered
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    # the static path encodes first, through the compiled encoder (nn/static_encoder.py): its
    # failure is the one line, and it turns the compiled decoding step off too (one `_disabled`)
    assert msgs == ["the compiled encoder is off (torch.compile failed: RuntimeError: no C++ compiler found); "
                    "the eager encoder runs (and a translation's decoding the lean step)"]
    _same(got, decode(model, src, cfg.replace(static=False)))
    _same(again, got)


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="no C++ compiler: Inductor cannot build the compiled step here")
def test_compiled_static_step_equals_readable_search_and_is_stored_whole(monkeypatch, tmp_path):
    from scratchformer.folders import check_whole

    monkeypatch.setenv("SCRATCHFORMER_STEP_CACHE", str(tmp_path / "static-steps"))
    monkeypatch.setattr(static, "_COMPILED", {})
    model, src = _model(False, 1, 2.0), _sources(3)
    if static.compile_disabled():
        pytest.skip(f"the compiler failed earlier in this process: {static.compile_disabled()}")
    with torch.no_grad():
        for beam in (1, 4):
            cfg = DecodeConfig(beam=beam, max_len_ratio=1.0, max_len_offset=4)
            state = _StaticStepper.make(model, src, 14, expand=beam)
            assert state is not None and state.compiled.compiled, static.compile_disabled()
            _same(decode(model, src, cfg.replace(static=True)), decode(model, src, cfg.replace(lean=False)))
            assert all(s > 0 for s in state.compiled.compile_seconds.values())
            assert not any(state.compiled.loaded.values())  # built here
        folders = sorted((tmp_path / "static-steps").glob("*/*"))
        assert sorted(f.name.split("-")[-1] for f in folders) == ["greedy", "logp"]
        assert all(check_whole(f, "package.json") is None for f in folders)
        # another process (a fresh in-process cache) loads the stored packages instead of compiling
        monkeypatch.setattr(static, "_COMPILED", {})
        state = _StaticStepper.make(model, src, 14, expand=1)
        assert state is not None and list(state.compiled.loaded.values()) == [True]
        cfg = DecodeConfig(beam=1, max_len_ratio=1.0, max_len_offset=4)
        _same(decode(model, src, cfg.replace(static=True)), decode(model, src, cfg.replace(lean=False)))
        # decode.static=auto takes a stored package (and only then): no compile in a one-off command
        monkeypatch.setattr(static, "_COMPILED", {})
        auto = decode(model, src, cfg.replace(static="auto"))
        (entry,) = static._COMPILED.values()
        assert list(entry.loaded.values()) == [True]
        _same(auto, decode(model, src, cfg.replace(static="off")))
        # a package changed on disk is not loaded: its recorded sha256 no longer matches
        package = folders[0] / "step.pt2"
        data = bytearray(package.read_bytes())
        data[len(data) // 2] ^= 0xFF
        package.write_bytes(bytes(data))
        assert "sha256" in check_whole(folders[0], "package.json")


@pytest.mark.usefixtures("eager_static")
def test_a_new_model_never_gets_a_freed_models_step(monkeypatch):
    monkeypatch.setattr(static, "_COMPILED", {})
    src = _sources(1)
    with torch.no_grad():
        first = _StaticStepper(_model(False, 1, 2.0), src, 8).compiled
        model = _model(False, 2, 2.0)  # may reuse the freed model's id, with the same weight versions
        second = _StaticStepper(model, src, 8).compiled
        assert second is not first and second.owner() is model
        assert _StaticStepper(model, src, 8).compiled is second  # the same model: reused
        with torch.no_grad():
            model.out_proj.weight.mul_(2)  # an in-place update: the frozen step is stale
        assert _StaticStepper(model, src, 8).compiled is not second


def test_auto_without_a_stored_package_runs_the_lean_step_and_encodes_once(monkeypatch, tmp_path):
    monkeypatch.setenv("SCRATCHFORMER_STEP_CACHE", str(tmp_path))
    monkeypatch.setattr(static, "_COMPILED", {})
    monkeypatch.setattr(static, "_use_compiler", [True])
    built = []
    monkeypatch.setattr(static, "build_package", lambda *a, **k: built.append(a))
    model, src = _model(False, 1, 2.0), _sources(1)
    calls = []
    encode = model.encode
    monkeypatch.setattr(model, "encode", lambda *a, **k: calls.append(1) or encode(*a, **k))
    cfg = DecodeConfig(beam=1, max_len_ratio=1.0, max_len_offset=4)
    assert cfg.static == "auto"
    with torch.no_grad():
        got = decode(model, src, cfg)
    assert calls == [1] and built == [] and not list(tmp_path.rglob("*.pt2"))
    _same(got, decode(model, src, cfg.replace(static=False)))


def test_static_setting_and_why_a_decode_does_not_take_it():
    model = _model(False, 1, 2.0)
    assert DecodeConfig(static=True).static == "on" and DecodeConfig(static=False).static == "off"
    with pytest.raises(UserError, match="decode static must be 'on', 'off' or 'auto'"):
        DecodeConfig(static="fast")
    auto = DecodeConfig()
    assert static_path(model, auto) is None and static_path(model, auto.replace(static="on")) is None
    assert static_path(model, auto.replace(static="off")) == "decode.static is off"
    assert "readable path" in static_path(model, auto.replace(lean=False))
    assert "float32" in static_path(copy.deepcopy(model).to(torch.bfloat16), auto)
    assert static_path(copy.deepcopy(model).to(torch.bfloat16), auto.replace(static="on")) is None
