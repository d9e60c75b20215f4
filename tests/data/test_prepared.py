"""Prepared data (data/prepared.py): the same ids, splits, batches and errors as the in-memory
path, cached by content and tokenizer, never reused half-written."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from scratchformer.data import prepared
from scratchformer.data.prepared import LazyPairs, id_dtype, labeled_rows
from scratchformer.data.prepared_tokens import token_shards, vocab_tokenizer
from scratchformer.data.prepared_lm import char_lm_stream
from scratchformer.data.readers import read_labeled_file, read_text_file
from scratchformer.data.tokenizers import build_tokenizer
from scratchformer.errors import UserError
from scratchformer.tasks.classify.data import (EncodedSplit, PreparedSplit, encoder_for, load_classification,
                                               tokenizer_for_split)
from scratchformer.tasks.classify.recipe import ClassifyRecipe

from toy_data import headlines

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prepared, "CHUNK_BYTES", 256)  # many chunks even for a tiny file
    monkeypatch.setattr(prepared, "PARALLEL_MIN_BYTES", 0)  # and worker processes when asked for
    return tmp_path / "cache"


def _messy_tsv(path: Path, n=300, seed=0) -> None:
    """label<TAB>text rows (no header) with a BOM, CRLF and lone-CR line ends, blank lines and
    texts with spaces to strip: every way `read_labeled_file` splits and trims a file."""
    rows = headlines(n, seed)
    parts = []
    for i, (t, lab) in enumerate(rows):
        end = "\r\n" if i % 7 == 0 else "\r" if i % 11 == 0 else "\n"
        parts.append(f"{lab}\t {t}  {end}" + ("\n" if i % 13 == 0 else ""))
    path.write_bytes(b"\xef\xbb\xbf" + "".join(parts).encode("utf-8"))


def _recipe(path, **data) -> ClassifyRecipe:
    r = ClassifyRecipe()
    r.data.dataset = str(path)
    for k, v in data.items():
        setattr(r.data, k, v)
    r.model.bigram_buckets = data.pop("buckets", 0) if "buckets" in data else r.model.bigram_buckets
    return r


def test_rows_equal_read_labeled_file_on_a_messy_file(tmp_path):
    f = tmp_path / "messy.tsv"
    _messy_tsv(f)
    rows = labeled_rows(f, workers=1)
    assert list(LazyPairs(rows, np.arange(len(rows)))) == read_labeled_file(f)
    assert len(prepared.chunks_of(f, 256)) > 10


@pytest.mark.parametrize("kind,buckets,keep", [("char", 0, "head"), ("char", 512, "tail"), ("word", 0, "head+tail"),
                                               ("word", 64, "head"), ("bpe", 0, "tail"),
                                               ("char", (70_000, 90_000), "head")])  # + trigrams: packed ids > 2**32
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_prepared_ids_and_batches_equal_the_in_memory_ones(tmp_path, monkeypatch, kind, buckets, keep, pooling):
    f = tmp_path / "messy.tsv"
    _messy_tsv(f)
    r = _recipe(f, tokenizer=kind, vocab_size=300, truncate_keep=keep, max_len=9)
    buckets, trigrams = buckets if isinstance(buckets, tuple) else (buckets, 0)
    r.model.bigram_buckets, r.model.trigram_buckets = buckets, trigrams
    r.model.pooling = pooling
    lazy = load_classification(r.data)
    monkeypatch.setenv("SCRATCHFORMER_PREPARED", "0")
    plain = load_classification(r.data)
    assert [list(s) for s in (lazy.train, lazy.valid, lazy.test)] == [plain.train, plain.valid, plain.test]
    assert lazy.labels == plain.labels
    from scratchformer.tasks.classify.data import build_tokenizer_for

    tok = tokenizer_for_split(r.data, lazy.train, buckets, trigrams)
    ref = build_tokenizer_for(r.data, [t for t, _ in plain.train], buckets, trigrams)
    assert tok.__class__ is ref.__class__ and [tok.id_to_token(i) for i in range(tok.vocab_size)] == \
        [ref.id_to_token(i) for i in range(ref.vocab_size)]
    enc = encoder_for(r, tok)
    label_ids = {lab: i for i, lab in enumerate(plain.labels)}
    shards = token_shards(lazy.train.rows, tok, enc.bigram_buckets, workers=2)
    if trigrams:
        assert shards.meta["bigram_dtype"] == "uint64" and int(shards.bigrams[:].max()) > 1 << 32
    for pairs_lazy, pairs, shuffle in ((lazy.train, plain.train, True), (lazy.test, plain.test, False)):
        a = PreparedSplit(pairs_lazy, shards, enc, label_ids, r.data, shuffle, seed=3)
        b = EncodedSplit(pairs, enc, label_ids, r.data, shuffle, seed=3)
        assert [a.doc(i) for i in range(len(a))] == b.docs
        for epoch in (0, 1):
            for x, y in zip(a.batches(epoch), b.batches(epoch), strict=True):
                assert torch.equal(x.ids, y.ids) and torch.equal(x.labels, y.labels) and x.doc_index is y.doc_index
                assert x.ids.dtype == y.ids.dtype and x.labels.dtype == y.labels.dtype
                assert (x.bigrams is None) == (y.bigrams is None)
                assert x.bigrams is None or torch.equal(x.bigrams, y.bigrams)


def test_segments_lengths_equal_the_segments(tmp_path):
    f = tmp_path / "messy.tsv"
    _messy_tsv(f)
    r = _recipe(f, tokenizer="char", long_mode="segments", max_len=4, max_segments=3)
    data = load_classification(r.data)
    tok = tokenizer_for_split(r.data, data.train, 0)
    enc = encoder_for(r, tok)
    docs = [enc(t) for t, _ in data.train]
    want = [sum(len(s) for s in d) for d in docs]
    got = enc.lengths([len(tok.encode(t)) for t, _ in data.train])
    assert got.tolist() == want


def test_cache_is_reused_and_invalidated_by_content_and_tokenizer(tmp_path, cache):
    f = tmp_path / "a.tsv"
    _messy_tsv(f, 100)
    rows = labeled_rows(f)
    tok = build_tokenizer("char", [t for t, _ in read_labeled_file(f)])
    s1 = token_shards(rows, tok)
    assert labeled_rows(f).folder == rows.folder and token_shards(rows, tok).folder == s1.folder
    before = (s1.folder / ".complete").stat().st_mtime_ns
    token_shards(rows, tok)
    assert (s1.folder / ".complete").stat().st_mtime_ns == before  # reused, not rebuilt
    other_tok = build_tokenizer("char", [t for t, _ in read_labeled_file(f)], min_freq=40)
    assert other_tok.vocab_size < tok.vocab_size
    assert token_shards(rows, other_tok).folder != s1.folder
    copy = tmp_path / "copy.tsv"  # the same bytes elsewhere: the same index, read from the copy
    copy.write_bytes(f.read_bytes())
    f.rename(tmp_path / "gone.tsv")
    again = labeled_rows(copy)
    assert again.folder == rows.folder and list(LazyPairs(again, np.arange(len(again)))) == read_labeled_file(copy)
    (tmp_path / "gone.tsv").rename(f)
    _messy_tsv(f, 101)  # the content changed: a new index, new shards
    rows2 = labeled_rows(f)
    assert rows2.folder != rows.folder and len(rows2) == len(read_labeled_file(f))
    assert token_shards(rows2, tok).folder != s1.folder


def test_a_half_written_folder_is_rebuilt_never_read(tmp_path, cache):
    f = tmp_path / "a.tsv"
    _messy_tsv(f, 100)
    rows = labeled_rows(f)
    tok = build_tokenizer("char", [t for t, _ in read_labeled_file(f)])
    good = token_shards(rows, tok)
    ids = good.ids.tolist()
    ids_file = good.folder / good.meta["ids_file"]
    data = ids_file.read_bytes()
    ids_file.write_bytes(data[: len(data) // 2])  # cut in half: the record's size no longer matches
    again = token_shards(rows, tok)
    assert again.ids.tolist() == ids
    (again.folder / ".complete").unlink()  # no completion record: as if killed before the end
    assert token_shards(rows, tok).ids.tolist() == ids
    assert prepared.verify(again.folder) == []


def test_a_killed_prepare_leaves_nothing_that_is_reused(tmp_path, cache):
    f = tmp_path / "a.tsv"
    _messy_tsv(f, 200)
    code = (
        "import os, signal\n"
        "from scratchformer.data import prepared\n"
        "prepared.CHUNK_BYTES = 256\n"
        "n = [0]\n"
        "real = prepared.write_data\n"
        "def dying(f, data):\n"
        "    n[0] += 1\n"
        "    if n[0] == 5: os.kill(os.getpid(), signal.SIGKILL)\n"
        "    real(f, data)\n"
        "prepared.write_data = dying\n"
        f"prepared.labeled_rows({str(f)!r}, workers=1)\n")
    env = {**os.environ, "PYTHONPATH": SRC, "SCRATCHFORMER_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    root = prepared.prepared_dir()
    assert not [p for p in root.iterdir() if not p.name.startswith(".")]  # only a hidden staging folder
    rows = labeled_rows(f)
    assert list(LazyPairs(rows, np.arange(len(rows)))) == read_labeled_file(f)


def test_malformed_line_names_file_and_line(tmp_path):
    f = tmp_path / "bad.tsv"
    lines = [f"{lab}\t{t}" for t, lab in headlines(80, 1)]
    lines[57] = "体育\tone\ttoo many"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UserError) as exc:
        labeled_rows(f, workers=2)
    with pytest.raises(UserError) as ref:
        read_labeled_file(f)
    assert str(exc.value) == str(ref.value) and f"{f}:58:" in str(exc.value)
    g = tmp_path / "bytes.tsv"
    g.write_bytes(b"a\tb\n" * 40 + b"a\t\xff\n")
    with pytest.raises(UserError) as exc:
        labeled_rows(g)
    with pytest.raises(UserError) as ref:
        read_labeled_file(g)
    assert str(exc.value) == str(ref.value) and "bytes.tsv:41: not valid UTF-8 at byte offset 162" in str(exc.value)
    assert not [p for p in prepared.prepared_dir().iterdir() if not p.name.startswith(".")]


def test_uint16_when_the_vocabulary_fits_else_uint32(tmp_path):
    assert id_dtype(65536) == np.uint16 and id_dtype(65537) == np.uint32
    f = tmp_path / "wide.tsv"
    chars = [chr(c) for c in range(0x20000, 0x20000 + 66000)]  # more distinct characters than uint16 holds
    texts = ["".join(chars[i:i + 100]) for i in range(0, len(chars), 100)]
    f.write_text("".join(f"{'ab'[i % 2]}\t{t}\n" for i, t in enumerate(texts)), encoding="utf-8")
    rows = labeled_rows(f)
    tok = vocab_tokenizer("char", LazyPairs(rows, np.arange(len(rows))))
    assert tok.vocab_size > 65536
    shards = token_shards(rows, tok)
    assert shards.dtype == np.uint32 and shards.meta["ids_file"] == "ids.u32"
    assert shards.row(3)[0] == tok.encode(texts[3])
    small = labeled_rows(_small(tmp_path))
    tok2 = vocab_tokenizer("char", LazyPairs(small, np.arange(len(small))))
    assert token_shards(small, tok2).dtype == np.uint16


def _small(tmp_path):
    f = tmp_path / "small.tsv"
    f.write_text("".join(f"{lab}\t{t}\n" for t, lab in headlines(50, 2)), encoding="utf-8")
    return f


def test_char_lm_stream_equals_the_in_memory_encoding(tmp_path):
    f = tmp_path / "t.txt"
    f.write_bytes(b"\xef\xbb\xbf" + ("hello world\r\nsecond line\rthird\n\n" * 40 + "end 终").encode("utf-8"))
    from scratchformer.data.datasets import split_text
    from scratchformer.tasks.lm.data import encode_text

    text = read_text_file(f)
    train, _ = split_text(text, 0.1)
    ref = build_tokenizer("char", [train], min_freq=2)
    tok, stream, cut = char_lm_stream(f, 0.1, min_freq=2, workers=2)
    assert tok.itos == ref.itos and cut == len(train)
    assert stream.ids.tolist() == encode_text(ref, text).tolist() and stream.ids.dtype == np.uint16


def test_resume_mid_epoch_from_the_index_gives_the_uninterrupted_batches(tmp_path):
    """The prepared split's epochs are a function of (seed, epoch): a run stopped at step 3 and
    resumed ends with the weights of the run that never stopped."""
    from scratchformer.cli import main

    f = tmp_path / "d.tsv"
    f.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in headlines(240, 4)), encoding="utf-8")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"data": {"dataset": str(f), "tokenizer": "char", "batch_size": 16},
                               "model": {"encoder": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}},
                               "train": {"epochs": 2, "eval_every": 100, "log_every": 100, "save_every": 3}}))
    assert main(["train", "classify", "--config", str(cfg), "--out", str(tmp_path / "whole"), "--no-baseline"]) == 0
    from scratchformer.train import trainer as trainer_mod

    real, calls = trainer_mod.Trainer._train_step, [0]

    def stop_at_the_8th_step(self, micro):
        calls[0] += 1
        if calls[0] == 8:  # the last checkpoint holds step 6, mid-epoch (15 batches an epoch)
            raise KeyboardInterrupt
        return real(self, micro)

    trainer_mod.Trainer._train_step = stop_at_the_8th_step
    try:
        try:
            rc = main(["train", "classify", "--config", str(cfg), "--out", str(tmp_path / "cut"), "--no-baseline"])
        except KeyboardInterrupt:
            rc = 130
        assert rc != 0
    finally:
        trainer_mod.Trainer._train_step = real
    assert main(["train", "classify", "--config", str(cfg), "--out", str(tmp_path / "cut"), "--no-baseline",
                 "--resume"]) == 0
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_char_lm_trains_to_the_same_weights_from_the_prepared_stream(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from scratchformer.cli import main

    f = tmp_path / "t.txt"
    f.write_text("to be or not to be, that is the question.\n" * 30, encoding="utf-8")
    args = ["train", "lm", "--data", str(f)]
    for s in ("train.max_steps=4", "train.eval_every=2", "data.context=16", "model.transformer.d_model=16",
              "model.transformer.n_layers=1", "model.transformer.n_heads=2", "model.transformer.d_ff=32"):
        args += ["--set", s]
    assert main(args + ["--out", str(tmp_path / "prep")]) == 0
    assert any(p.name.startswith("lm-") for p in prepared.prepared_dir().iterdir())
    monkeypatch.setenv("SCRATCHFORMER_PREPARED", "0")
    assert main(args + ["--out", str(tmp_path / "mem")]) == 0
    a, b = load_file(tmp_path / "prep" / "model.safetensors"), load_file(tmp_path / "mem" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    va = json.loads((tmp_path / "prep" / "valid_metrics.json").read_text())
    vb = json.loads((tmp_path / "mem" / "valid_metrics.json").read_text())
    assert va["loss"] == vb["loss"] and va["tokens"] == vb["tokens"]


def test_evaluate_data_and_predict_file_stream_with_the_numbers_of_the_in_memory_path(tmp_path, monkeypatch, capsys):
    from scratchformer.cli import main
    from scratchformer.commands import classify as classify_cmd
    from scratchformer.commands.common import read_inputs
    from scratchformer.tasks.classify import Classifier

    f = tmp_path / "d.tsv"
    f.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in headlines(300, 5)), encoding="utf-8")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"data": {"dataset": str(f), "tokenizer": "char", "batch_size": 16},
                               "model": {"encoder": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}},
                               "train": {"max_steps": 3, "eval_every": 3}}))
    run = tmp_path / "run"
    assert main(["train", "classify", "--config", str(cfg), "--out", str(run), "--no-baseline"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--data", str(f), "--json", "--no-baseline"]) == 0
    streamed = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("SCRATCHFORMER_PREPARED", "0")
    assert main(["evaluate", str(run), "--data", str(f), "--json", "--no-baseline"]) == 0
    assert streamed == json.loads(capsys.readouterr().out)
    assert sum(c["support"] for c in streamed["per_class"].values()) == 300
    lines = tmp_path / "texts.txt"
    lines.write_bytes(b"\xef\xbb\xbf" + "".join(f"{t}\r\n" + ("\n" if i % 9 == 0 else "")
                                              for i, (t, _) in enumerate(headlines(200, 6))).encode("utf-8"))
    monkeypatch.setattr(classify_cmd, "STREAM_BLOCK", 64)
    assert main(["predict", str(run), "--file", str(lines), "--json"]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    texts = read_inputs([], str(lines))
    want = Classifier.load(run).predict(texts)
    assert [g["text"] for g in got] == texts and [{k: g[k] for k in ("label", "score", "probs")} for g in got] == want
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nfine\n\xffno\n")
    assert main(["predict", str(run), "--file", str(bad)]) == 2  # a UserError: one line
    assert f"{bad}:3: not valid UTF-8 at byte offset 8" in capsys.readouterr().err


@pytest.mark.parametrize("kw", [dict(batch_size=7), dict(max_tokens=40), dict(batch_size=5, max_tokens=30)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_epoch_arrays_are_the_epoch_batches(kw, shuffle):
    from scratchformer.data.batching import LengthBucketSampler

    lengths = np.random.default_rng(0).integers(0, 20, size=503)
    s = LengthBucketSampler(lengths, shuffle=shuffle, seed=2, bucket_size_multiplier=3, **kw)
    for epoch in (0, 1):
        assert [a.tolist() for a in s.epoch_arrays(epoch)] == s.epoch_batches(epoch)


def test_prepare_verb_builds_what_train_then_reuses(tmp_path, capsys):
    from scratchformer.cli import main

    f = tmp_path / "d.tsv"
    f.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in headlines(200, 7)), encoding="utf-8")
    sets = ["--set", "data.tokenizer=char", "--set", "data.batch_size=16"]
    assert main(["prepare", "classify", "--data", str(f), "--json"] + sets) == 0
    out = capsys.readouterr()
    built = json.loads(out.out)
    assert built["splits"] == {"train": 160, "valid": 20, "test": 20} and built["tokenizer"] == "char"
    assert built["files"][0]["rows"] == 200 and built["files"][0]["dtype"] == "uint16"
    assert "indexed" in out.err and "char tokens" in out.err
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"data": {"dataset": str(f), "tokenizer": "char", "batch_size": 16},
                               "model": {"encoder": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}},
                               "train": {"max_steps": 2, "eval_every": 2}}))
    assert main(["prepare", "classify", "--config", str(cfg), "--data", str(f)]) == 0
    assert "prepared: " not in capsys.readouterr().err  # all of it found in the cache
    assert main(["train", "classify", "--config", str(cfg), "--out", str(tmp_path / "run"), "--no-baseline"]) == 0
    assert "prepared: " not in capsys.readouterr().err
    assert main(["prepare", "classify", "--data", str(tmp_path / "x.csv")]) == 2
    capsys.readouterr()
    g = tmp_path / "x.csv"
    g.write_text("text,label\na,b\nc,d\n")
    assert main(["prepare", "classify", "--config", str(cfg), "--data", str(g)]) == 2
    assert "tab-separated" in capsys.readouterr().err


@pytest.mark.parametrize("scan", [True, False])
def test_file_array_reads_what_indexing_the_array_gives(tmp_path, monkeypatch, scan):
    """`FileArray` (os.pread, nothing mapped) gives what the array in memory gives: items, slices
    and integer arrays in any order and shape, with repeats and negatives, read front to back in
    pieces (`scan`) or sorted in runs of nearby items, over many blocks and passes."""
    fa_cls = prepared.FileArray
    monkeypatch.setattr(fa_cls, "PAGE", 1 << 30 if scan else 4)  # every index is dense / sparse
    monkeypatch.setattr(fa_cls, "SCAN", 160)  # many pieces of the file
    monkeypatch.setattr(fa_cls, "BLOCK", 48)  # a few items a block: many reads, many groups
    monkeypatch.setattr(fa_cls, "CHUNK", 50)  # and an index in many passes
    rng = np.random.default_rng(0)
    for arr in (rng.integers(0, 1 << 40, size=(997, 2)), rng.integers(0, 60000, size=1001).astype(np.uint16)):
        f = tmp_path / f"a{arr.ndim}.bin"
        arr.tofile(f)
        fa = prepared.FileArray(f, arr.dtype, arr.shape)
        assert len(fa) == len(arr) and np.array_equal(np.asarray(fa), arr) and fa.tolist() == arr.tolist()
        for key in (0, -1, 500, slice(3, 40), slice(None, 10), slice(-5, None), slice(10, 3), slice(1, 100, 7)):
            assert np.array_equal(fa[key], arr[key])
        for idx in (rng.integers(0, len(arr), 300), np.sort(rng.permutation(len(arr))[:400]),
                    np.array([5, 5, -2, 0]), rng.integers(0, len(arr), (4, 6)), np.zeros(0, np.int64)):
            got = fa[idx]
            assert got.dtype == arr.dtype and got.shape == arr[idx].shape and np.array_equal(got, arr[idx])
        for bad in (len(arr), np.array([3, len(arr)]), np.array([-len(arr) - 1])):
            with pytest.raises(IndexError):
                fa[bad]


def _mapped(folder: Path) -> list[str]:
    """The files under `folder` that this process has memory-mapped now (/proc/self/maps)."""
    paths = (line.split(None, 5) for line in Path("/proc/self/maps").read_text().splitlines())
    return sorted({p[5].strip() for p in paths if len(p) == 6 and p[5].strip().startswith(str(folder))})


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the mappings of a Linux process")
def test_a_training_run_reads_the_prepared_files_without_mapping_them(tmp_path, cache, monkeypatch):
    """Issue 35: a memory map counts every page a process touches in its RSS, and batches touch
    rows all over the ids (shuffled for training, by length for evaluation): +200 MB of mapped
    ids at 3M rows. The row index, the ids and the batches are read with os.pread: at the first
    step, after the evaluation and after the test report no prepared file is mapped. (The check
    itself sees a mapped file: it cannot pass by seeing nothing.)"""
    from scratchformer.cli import main
    from scratchformer.tasks.classify.task import ClassificationTask
    from scratchformer.train import trainer as trainer_mod

    f = tmp_path / "d.tsv"
    f.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in headlines(300, 8)), encoding="utf-8")
    seen: dict[str, list[str]] = {}

    def after(name, fn):
        def wrapper(*a, **k):
            out = fn(*a, **k)
            seen[name] = _mapped(cache)
            return out
        return wrapper

    monkeypatch.setattr(trainer_mod.Trainer, "_train_step", after("step", trainer_mod.Trainer._train_step))
    monkeypatch.setattr(trainer_mod.Trainer, "_evaluate", after("evaluate", trainer_mod.Trainer._evaluate))
    monkeypatch.setattr(ClassificationTask, "report", after("report", ClassificationTask.report))
    for long_mode in ("truncate", "segments"):  # the gathered batches, and the documents one by one
        cfg = tmp_path / f"{long_mode}.json"
        cfg.write_text(json.dumps({
            "data": {"dataset": str(f), "tokenizer": "char", "batch_size": 16, "max_len": 12, "long_mode": long_mode},
            "model": {"encoder": {"d_model": 16, "n_heads": 2, "n_layers": 1, "d_ff": 32}},
            "train": {"max_steps": 3, "eval_every": 3}}))
        seen.clear()
        assert main(["train", "classify", "--config", str(cfg), "--out", str(tmp_path / long_mode), "--no-baseline"]) == 0
        assert seen == {"step": [], "evaluate": [], "report": []}, long_mode
    ids = next(prepared.prepared_dir().glob("tokens-*/ids.u16"))
    mapped = np.memmap(ids, dtype=np.uint16, mode="r")
    assert int(mapped[0]) >= 0 and _mapped(cache) == [str(ids)]
    del mapped


def test_a_prepared_split_holds_numbers_per_row_not_python_objects(tmp_path):
    """Memory flat in the rows (issue 35): a PreparedSplit of 10x the rows reaches exactly as many
    Python objects, and its arrays grow by at most 16 bytes a row (row number int64, label int32,
    length int32)."""
    import gc

    f = tmp_path / "d.tsv"
    f.write_text("".join(f"{lab}\t{t}\n" for t, lab in headlines(2000, 9)), encoding="utf-8")
    r = _recipe(f, tokenizer="char")
    rows = labeled_rows(f)
    tok = vocab_tokenizer("char", LazyPairs(rows, np.arange(len(rows))))
    enc, shards = encoder_for(r, tok), token_shards(rows, tok)
    label_ids = {lab: i for i, lab in enumerate(rows.names)}
    perm = np.random.default_rng(0).permutation(len(rows))
    small, big = (PreparedSplit(LazyPairs(rows, perm[:n].copy()), shards, enc, label_ids, r.data, shuffle=True)
                  for n in (200, 2000))

    def reach(root) -> tuple[int, int]:
        """(objects reachable from `root`, bytes of the arrays among them that own their data)."""
        todo, seen, nbytes = [root], set(), 0
        while todo:
            obj = todo.pop()
            if id(obj) in seen or isinstance(obj, (type, type(gc), type(reach))):
                continue
            seen.add(id(obj))
            if isinstance(obj, np.ndarray):  # numpy does not report an array's base to gc
                if obj.base is None:
                    nbytes += obj.nbytes
                else:
                    todo.append(obj.base)
            todo.extend(gc.get_referents(obj))
        return len(seen), nbytes

    (n_small, b_small), (n_big, b_big) = reach(small), reach(big)
    assert n_big == n_small
    assert 0 < b_big - b_small <= 16 * 1800
    assert len(list(big.batches(0))) == 2000 // r.data.batch_size + (2000 % r.data.batch_size > 0)


def test_a_batch_of_rows_reads_its_runs_not_the_stretch_between_them(tmp_path, monkeypatch):
    """64 rows of 30 ids spread over a 3.3M-id file are 64 runs: read run by run (about a page
    each), not the whole stretch they span (the old rule counted 1,920 items, each 'a page apart',
    and scanned 6.6 MB for every batch of a 100k-row data set). Same items either way."""
    ids = np.arange(3_300_000, dtype=np.uint16)
    f = tmp_path / "ids.u16"
    ids.tofile(f)
    fa = prepared.FileArray(f, np.uint16, ids.shape)
    starts = np.random.default_rng(0).choice(len(ids) - 30, size=64, replace=False)
    at = (starts[:, None] + np.arange(30)).reshape(-1)  # (64 * 30,) positions, run by run
    read = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: read.append(n) or real(fd, n, off))
    got = fa[at]
    assert np.array_equal(got, ids[at])
    assert sum(read) < 64 * 2 * prepared.FileArray.PAGE, sum(read)  # was 6.6 MB
