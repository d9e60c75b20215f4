"""Prepared data's fast paths (data/prepared_scan.py) give exactly what the plain per-line and
per-text paths give: the same index arrays, texts, ids, bigram ids, and on a bad file the same
`file:line` error, on every awkward input we could think of. And its worker pool
(data/prepared_workers.py) keeps task order and errors, is shared, and imports no __main__."""
import os
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from scratchformer.data import prepared, prepared_scan
from scratchformer.data.prepared import LazyPairs, labeled_rows
from scratchformer.data.prepared_tokens import token_shards, vocab_tokenizer
from scratchformer.data.readers import read_labeled_file
from scratchformer.data.segment import CJK
from scratchformer.data.tokenizers import SPECIAL_TOKENS, CharTokenizer, WordTokenizer, encode_with_bigrams
from scratchformer.errors import UserError

from toy_data import headlines


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(prepared, "CHUNK_BYTES", 200)  # many chunks, and chunk ends in odd places
    return tmp_path / "cache"


def test_code_point_classes_are_isspace_and_segment_cjk_over_all_of_unicode():
    cps = np.arange(0x110000, dtype=np.uint32)
    cls = prepared_scan.classes(cps)
    space = np.array([chr(c).isspace() for c in range(0x110000)])
    cjk = np.zeros(0x110000, dtype=bool)
    every = "".join(map(chr, range(0x110000)))
    cjk[[m.start() for m in CJK.finditer(every)]] = True
    assert np.array_equal((cls & prepared_scan._SPACE) != 0, space)
    assert np.array_equal((cls & prepared_scan._CJK) != 0, cjk)


# ----------------------------------------------------------------------------- the row index
ODD = ["\u3000", "\xa0", "\x85", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", "\x1f", "\u2003", "\u205f", "\u1680",
       "😀", "\U00020000", "\u3040", "\u303f", "\u30ff", "\u3400", "\u4dbf", "\u4e00", "\u9fff", "\ua000", "\uf900",
       "\ufaff", "\ufb00", "\uac00", "\ud7af", "\ud7b0", "é", "_", "\x00", "\x01", " "]


def _rows_text(rng: random.Random, n: int) -> list[str]:
    """`label<TAB>text` lines of CJK, Latin and every odd character above, some padded."""
    out = []
    for t, lab in headlines(n, rng.randint(0, 1000)):
        t = "".join(c if rng.random() > 0.15 else rng.choice(ODD) for c in t)
        pad = rng.choice(["", " ", "\u3000", " \xa0"])
        out.append(f"{lab}\t{pad}{t}x{pad}")
    return out


def _files(tmp: Path) -> dict[str, bytes]:
    rng = random.Random(7)
    lines = _rows_text(rng, 120)
    clean = ("\n".join(lines) + "\n").encode("utf-8")
    bad_fields, empty_text, empty_label = list(lines), list(lines), list(lines)
    bad_fields[70] = "体育\tone\ttoo many"
    empty_text[55] = "体育\t \u3000 "
    empty_label[80] = " \t一个标题"
    label_break, label_sep = list(lines), list(lines)
    label_break[90] = "体\x0b育\t标题"
    label_sep[33] = "体\u2028育\t标题"
    blanks = [x for i, line in enumerate(lines) for x in ([line, "", "  \t ", "\u3000"] if i % 9 == 0 else [line])]
    return {
        "clean": clean,
        "no_final_newline": clean[:-1],
        "header": ("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for lab, t in (x.split("\t") for x in lines))).encode(),
        "header_late_blank": ("\n\n  \ntext\tlabel\n" + "".join(f"{t}\t{lab}\n" for lab, t in
                                                              (x.split("\t") for x in lines))).encode(),
        "bom": b"\xef\xbb\xbf" + clean,
        "blank_lines": ("\n".join(blanks) + "\n").encode(),
        "crlf": "\r\n".join(lines).encode() + b"\r\n",
        "lone_cr": ("\n".join(lines[:50]) + "\r" + "\r".join(lines[50:]) + "\n").encode(),
        "bad_fields": ("\n".join(bad_fields) + "\n").encode(),
        "empty_text": ("\n".join(empty_text) + "\n").encode(),
        "empty_label": ("\n".join(empty_label) + "\n").encode(),
        "label_break": ("\n".join(label_break) + "\n").encode(),
        "label_sep": ("\n".join(label_sep) + "\n").encode(),
        "not_utf8": clean[:3001] + b"\xff" + clean[3001:],
        "not_utf8_split_char": clean[:2000] + "终".encode()[:2] + b"\n" + clean[2000:],
        "only_blank": b"\n \n\t\n",
    }


def _index(path: Path, fast: bool, monkeypatch, **cols):
    monkeypatch.setattr(prepared, "FAST_PATHS", fast)
    try:
        rows = labeled_rows(path, workers=1, rebuild=True, **cols)
    except UserError as e:
        return "error", str(e)
    arrays = {k: np.asarray(getattr(rows, k)).tolist() for k in ("spans", "labels", "chars")}
    return arrays, rows.names, list(LazyPairs(rows, np.arange(len(rows))))


@pytest.mark.parametrize("name", sorted(_files(Path("."))))
def test_the_row_index_by_numpy_equals_the_one_line_by_line(tmp_path, monkeypatch, name):
    path = tmp_path / f"{name}.tsv"
    path.write_bytes(_files(tmp_path)[name])
    fast = _index(path, True, monkeypatch)
    plain = _index(path, False, monkeypatch)
    assert fast == plain
    try:
        ref = read_labeled_file(path)
    except UserError as e:
        ref = ("error", str(e))
    assert (fast[0] == "error") == (ref[0] == "error") and (fast[1] == ref[1] if fast[0] == "error" else fast[2] == ref)
    if name in ("clean", "no_final_newline", "header", "bom", "blank_lines"):
        monkeypatch.setattr(prepared, "FAST_PATHS", True)
        labeled_rows(path, workers=1, rebuild=True)
        assert prepared.last_plain_chunks == []  # the fast path was taken for every chunk


def test_each_chunk_gives_the_arrays_of_the_plain_path_or_says_why_not(tmp_path):
    taken = 0
    for name, data in _files(tmp_path).items():
        path = tmp_path / f"{name}.tsv"
        path.write_bytes(data)
        layout = prepared.Layout(2, 1, 0, None)
        for chunk in prepared.chunks_of(path, 300):
            raw, pos = prepared._read(path, chunk)
            got, why = prepared_scan.scan_chunk(raw, pos, chunk.line, layout, True)
            assert (got is None) == bool(why)
            if got is None:
                continue
            taken += 1
            want = prepared._index_lines(path, raw, pos, chunk.line, layout, True)
            assert got.keys() == want.keys()
            for k in got:
                assert np.array_equal(got[k], want[k]) if k != "names" else got[k] == want[k]
                assert k == "names" or got[k].dtype == want[k].dtype
    assert taken > 100  # most chunks of the files without a \r or a bad row take the fast path


def test_columns_by_position_and_by_name(tmp_path, monkeypatch):
    rng = random.Random(3)
    lines = [x.split("\t") for x in _rows_text(rng, 80)]
    path = tmp_path / "three.tsv"
    body = "".join(f"{i}\t{lab}\t{t}\n" for i, (lab, t) in enumerate(lines))
    path.write_text("id\tlabel\tbody\n" + body, encoding="utf-8")
    for cols in ({"text_col": "body", "label_col": "label"}, {"text_col": 2, "label_col": 0}):
        assert _index(path, True, monkeypatch, **cols) == _index(path, False, monkeypatch, **cols)


# ----------------------------------------------------------------------------- texts read in blocks
def test_texts_read_in_blocks_equal_the_texts_read_row_by_row(tmp_path, monkeypatch):
    path = tmp_path / "blank_lines.tsv"
    path.write_bytes(_files(tmp_path)["blank_lines"])
    rows = labeled_rows(path, workers=1)
    rng = np.random.default_rng(0)
    n = len(rows)
    for index in (np.arange(n), np.sort(rng.choice(n, n // 3, replace=False)), rng.permutation(n),
                  np.sort(rng.integers(0, n, 50)), np.arange(n)[::17], np.arange(0), np.array([5])):
        want = [rows.text(int(i)) for i in index]
        assert rows.texts(index) == want
        monkeypatch.setattr(prepared, "FAST_PATHS", False)
        assert rows.texts(index) == want
        monkeypatch.setattr(prepared, "FAST_PATHS", True)


# ----------------------------------------------------------------------------- runs of texts tokenized at once
def _texts(seed=0, n=300) -> list[str]:
    rng = random.Random(seed)
    pieces = ["The", "ΣΑΣ", "İstanbul", "don't", "a_b", "x2", "hello,", "world.", "naïve", "中文", "分词",
              "😀", "\u3000", "\xa0", " ", "--", "Ⅻ", "٣", "ß", "ǅ", "\u2028", "\x1c", "e\u0301"]
    return ["".join(rng.choice(pieces) + rng.choice(["", " ", ""]) for _ in range(rng.randint(0, 12)))
            for _ in range(n)]


def _plain(tok, texts, buckets):
    ids, bis = zip(*[encode_with_bigrams(tok, t, buckets) for t in texts]) if texts else ((), ())
    return [list(x) for x in ids], [list(x) for x in bis] if buckets else None


def _split(res):
    ends = np.cumsum(res["lengths"])
    rows = lambda flat: [a.tolist() for a in np.split(flat, ends[:-1])] if len(ends) else []  # noqa: E731
    return rows(res["ids"]), None if res["bigrams"] is None else rows(res["bigrams"])


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("tok_buckets,buckets", [(0, 0), (64, 64), (0, 97), (200000, 200000), (64, 200000)])
def test_char_run_equals_encode_with_bigrams_per_text(lowercase, tok_buckets, buckets):
    texts = _texts(1)
    tok = CharTokenizer.train(texts[:150], lowercase=lowercase, bigram_buckets=tok_buckets)
    res = prepared_scan.encode_run(tok, texts, buckets)
    assert _split(res) == _plain(tok, texts, buckets)
    assert len(res["lengths"]) == len(texts)


@pytest.mark.parametrize("lowercase", [False, True])
@pytest.mark.parametrize("buckets", [0, 64, 200000])
@pytest.mark.parametrize("ascii", [False, True])  # all-ASCII runs take segment.ASCII_WORD_PATTERN
def test_word_run_equals_encode_with_bigrams_per_text(lowercase, buckets, ascii):
    texts = [t for t in _texts(2, 1500) if t.isascii() or not ascii]
    assert len(texts) > 100 and (ascii or not "".join(texts).isascii())
    tok = WordTokenizer.train(texts[:150], lowercase=lowercase, segmenter="regex")
    res = prepared_scan.encode_run(tok, texts, buckets)
    assert _split(res) == _plain(tok, texts, buckets)
    blank = WordTokenizer(SPECIAL_TOKENS, lowercase, "regex")
    want = Counter()
    for t in texts:
        want.update(blank._split(t))
    assert prepared_scan.word_counts(blank, texts) == want
    assert prepared_scan.encode_run(tok, [], buckets)["lengths"].tolist() == []


def test_a_text_holding_the_end_mark_is_encoded_text_by_text():
    texts = ["a\x00b", "c"]
    tok = WordTokenizer.train(texts, segmenter="regex")
    assert prepared_scan.encode_run(tok, texts, 0) is None
    assert prepared_scan.encode_run(WordTokenizer.train(["a b"], segmenter="jieba"), ["a"], 0) is None


@pytest.mark.parametrize("kind,buckets", [("char", 0), ("char", 512), ("word", 0), ("word", 64)])
def test_vocabulary_and_shards_equal_the_plain_ones(tmp_path, monkeypatch, kind, buckets):
    path = tmp_path / "f.tsv"
    rng = random.Random(5)
    path.write_text("".join(f"{lab}\t{t}x\n" for lab, t in (("ab"[i % 2], t) for i, t in enumerate(_texts(3)))) +
                    "\n".join(_rows_text(rng, 60)) + "\n", encoding="utf-8")
    out = []
    for fast in (True, False):
        monkeypatch.setattr(prepared, "FAST_PATHS", fast)
        monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / f"cache{fast}"))
        rows = labeled_rows(path, workers=1)
        tok = vocab_tokenizer(kind, LazyPairs(rows, np.arange(1, len(rows), 2)), bigram_buckets=buckets, workers=1)
        shards = token_shards(rows, tok, buckets, workers=1)
        out.append((tok.itos, np.asarray(shards.ids).tolist(), np.asarray(shards.offsets).tolist(),
                    None if shards.bigrams is None else np.asarray(shards.bigrams).tolist()))
    assert out[0] == out[1]


# ----------------------------------------------------------------------------- LM text
def test_lm_chunks_decoded_at_once_equal_the_lines_joined_and_the_stream_too(tmp_path, monkeypatch):
    from scratchformer.data import prepared_lm
    from scratchformer.data.prepared_lm import char_lm_stream

    for name, data in _files(tmp_path).items():
        path = tmp_path / f"{name}.txt"
        path.write_bytes(data)
        out = []
        for fast in (True, False):
            monkeypatch.setattr(prepared, "FAST_PATHS", fast)
            monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / f"cache-{name}-{fast}"))
            try:
                texts = [prepared_lm._decode_chunk(path, c) for c in prepared.chunks_of(path, 300)]
                tok, stream, cut = char_lm_stream(path, 0.1, workers=1)
                out.append((texts, tok.itos, np.asarray(stream.ids).tolist(), cut))
            except UserError as e:
                out.append(("error", str(e)))
        assert out[0] == out[1], name


# ----------------------------------------------------------------------------- worker processes
def _pids(n, sleep=0.05) -> list[int]:
    from scratchformer.data.prepared_workers import run_tasks

    # eval is a builtin, so a worker can run it without importing this test module
    return list(run_tasks(eval, [f"__import__('time').sleep({sleep}) or __import__('os').getpid()"] * n, 3))


def test_one_pool_serves_the_runs_of_a_prepare_until_closed():
    from scratchformer.data.prepared_workers import close_workers, run_tasks

    here = os.getpid()
    first = set(_pids(60)) - {here}  # this process works too (at the start it does every task)
    again = set(_pids(60)) - {here}
    assert first and again and again <= first and len(first | again) <= 2  # the same workers, 2 of them
    close_workers()
    assert not (set(_pids(60)) - {here}) & first
    with pytest.raises(UserError, match="no such file"):
        list(run_tasks(prepared.content_digest, ["/nonexistent.tsv"] * 4, 3))
    assert set(_pids(8))  # an error leaves the pool usable
    close_workers()


def test_results_come_in_task_order_and_the_first_error_in_task_order_is_raised():
    from scratchformer.data.prepared_workers import close_workers, run_tasks

    tasks = [f"__import__('time').sleep({(i * 7) % 5 / 100}) or {i}" for i in range(40)]
    assert list(run_tasks(eval, tasks, 3)) == list(range(40))
    fail = "(_ for _ in ()).throw(__import__('scratchformer.errors').errors.UserError('task {}'))"
    bad = list(tasks)
    bad[25], bad[31] = fail.format(25), fail.format(31)
    got = []
    with pytest.raises(UserError, match="task 25"):
        for r in run_tasks(eval, bad, 3):
            got.append(r)
    assert got == list(range(25))
    close_workers()


def test_workers_do_not_import_the_parents_main_module(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "user_script.py"
    script.write_text(
        "import xml.dom.minidom  # stands for torch: what a user's script imports\n"
        "from scratchformer.data.prepared_workers import close_workers, run_tasks\n"
        "if __name__ == '__main__':\n"
        "    probe = (\"__import__('time').sleep(0.1) or \"\n"
        "             \"(__import__('os').getpid(), 'xml.dom.minidom' in __import__('sys').modules)\")\n"
        "    import os\n"
        "    print(sorted({flag for pid, flag in run_tasks(eval, [probe] * 100, 2) if pid != os.getpid()}))\n"
        "    close_workers()\n", encoding="utf-8")
    src = str(Path(prepared.__file__).resolve().parents[2])
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": src})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[False]"  # the worker ran some tasks, and had not imported it
