"""Weights round trip (with tied tensors), clear errors, atomic writes, trainer state."""

import os

import pytest
import torch
from safetensors import safe_open
from torch import nn

from scratchformer.errors import UserError
from scratchformer.train import checkpoint
from scratchformer.train.checkpoint import atomic_write, load_state, load_weights, save_state, save_weights


class Tied(nn.Module):
    def __init__(self, vocab=11, dim=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied
        self.register_buffer("scale", torch.tensor([2.0, 3.0]))


def _randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in model.state_dict().values():
            t.copy_(torch.randn(t.shape, generator=g))


def test_round_trip_keeps_values_and_ties(tmp_path):
    a, b = Tied(), Tied()
    _randomize(a, 1)
    _randomize(b, 2)
    path = tmp_path / "m.safetensors"
    save_weights(a, path)
    with safe_open(str(path), "pt") as f:  # the tied matrix is stored once
        assert sorted(f.keys()) == ["emb.weight", "norm.bias", "norm.weight", "scale"]
    missing, unexpected = load_weights(b, path)
    assert missing == [] and unexpected == []
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    assert b.head.weight is b.emb.weight  # the tie survives loading


def test_shared_partial_views_are_cloned(tmp_path):
    class Views(nn.Module):
        def __init__(self):
            super().__init__()
            base = torch.arange(12.0)
            self.register_buffer("first", base[:6].view(2, 3))
            self.register_buffer("second", base[6:].view(2, 3))

    m = Views()
    save_weights(m, tmp_path / "v.safetensors")  # safetensors would refuse shared storage
    n = Views()
    n.first.zero_()
    n.second.zero_()
    load_weights(n, tmp_path / "v.safetensors")
    assert torch.equal(n.second, torch.arange(6.0, 12.0).view(2, 3))


def test_wrong_shape_and_keys_give_one_clear_line(tmp_path):
    path = tmp_path / "m.safetensors"
    save_weights(Tied(vocab=11, dim=6), path)
    with pytest.raises(UserError) as e:
        load_weights(Tied(vocab=13, dim=6), path)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"checkpoint {path} does not fit this model" in msg
    assert "emb.weight is (11, 6) in the checkpoint but (13, 6) in the model" in msg

    other = nn.Sequential(nn.Linear(6, 6))
    with pytest.raises(UserError) as e:
        load_weights(other, path)
    msg = str(e.value)
    assert "missing keys: 0.weight, 0.bias" in msg and "unexpected keys: " in msg and "emb.weight" in msg

    # strict=False tolerates missing/unexpected keys but never a shape mismatch
    partial = Tied()
    partial.extra = nn.Linear(2, 2)
    missing, unexpected = load_weights(partial, path, strict=False)
    assert missing == ["extra.weight", "extra.bias"] and unexpected == []

    with pytest.raises(UserError, match="not found"):
        load_weights(Tied(), tmp_path / "nope.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a checkpoint at all")
    with pytest.raises(UserError, match="not a readable safetensors file"):
        load_weights(Tied(), tmp_path / "junk.safetensors")


def _only_file(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir())


def test_atomic_write_leaves_no_partial_file(tmp_path):
    path = tmp_path / "data.bin"

    def half_then_crash(f):
        f.write(b"x" * 1000)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(path, half_then_crash)
    assert _only_file(tmp_path) == []  # no final file, no temp file

    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        atomic_write(path, half_then_crash)
    assert path.read_bytes() == b"old" and _only_file(tmp_path) == ["data.bin"]


def test_save_weights_failing_midway_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "model.safetensors"
    a = Tied()
    _randomize(a, 1)
    save_weights(a, path)
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError("I/O error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    b = Tied()
    _randomize(b, 2)
    with pytest.raises(OSError):
        save_weights(b, path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _only_file(tmp_path) == ["model.safetensors"]
    c = Tied()
    load_weights(c, path)
    assert torch.equal(c.emb.weight, a.emb.weight)


def test_state_round_trip_is_weights_only(tmp_path):
    state = {"step": 3, "best": None, "rng": torch.get_rng_state(), "lst": [1, 2.5, "x"], "t": (1, 2)}
    save_state(state, tmp_path / "s.pt")
    back = load_state(tmp_path / "s.pt")
    assert back["step"] == 3 and back["best"] is None and torch.equal(back["rng"], state["rng"])
    assert back["t"] == (1, 2)
    # Anything that is not tensors/primitives is refused by weights_only loading.
    torch.save({"f": os.path.join}, tmp_path / "bad.pt")
    with pytest.raises(UserError, match="cannot be loaded"):
        load_state(tmp_path / "bad.pt")
    with pytest.raises(UserError, match="nothing to resume"):
        load_state(tmp_path / "missing.pt")


def test_rng_states_survive_a_weights_only_round_trip(tmp_path):
    import random

    import numpy as np

    from scratchformer.train.rng import get_rng_state, seed_everything, set_rng_state

    seed_everything(7)
    random.gauss(0, 1)  # leaves a cached gaussian in python's state
    save_state({"rng": get_rng_state(torch.device("cpu"))}, tmp_path / "rng.pt")

    def draws():
        return random.random(), random.gauss(0, 1), float(np.random.rand()), torch.rand(3).tolist()

    expected = draws()
    set_rng_state(load_state(tmp_path / "rng.pt")["rng"], torch.device("cpu"))
    assert draws() == expected
