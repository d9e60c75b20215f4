"""Prepared data: a data set tokenized once into flat binary files, read a few rows at a time.

Python objects are the memory wall of a big data set: a list of (text, label) pairs and
then lists of ids per text take about 35x the file's size (1M rows of an 109 MB file:
4 GB). Here a labelled file is read once into an index and its texts are tokenized once into
flat arrays, so that training holds only numbers it needs and reads the rest by offset
(`FileArray`, os.pread; an LM's one stream through `np.memmap`), like nanoGPT's `train.bin`:

    rows   <cache>/prepared/rows-<content>-<settings>/       the row index of a labelled file
             spans.i64   (N, 2) byte start and end of each row's line in the file
             labels.i32  (N,)  label code of each row (an index into meta.json's sorted labels)
             chars.i64   (N, 2) non-space characters and CJK characters of each row's text
                         (the `auto` tokenizer's and jieba's 30% rule, over any subset of rows)
    tokens <cache>/prepared/tokens-<content>-<tokenizer>/     a tokenizer's ids of those rows (`prepared_tokens.py`)
             ids.u16 | ids.u32   every row's ids, one after the other (uint16 when the
                                 vocabulary fits in 65,536 ids, else uint32)
             offsets.i64         (N + 1,) row i is ids[offsets[i]:offsets[i + 1]]
             bigrams.u16 | .u32  hashed bigram ids aligned with ids (when asked for)
    lm     <cache>/prepared/lm-<content>-<tokenizer>/          a text as one id stream
             ids.u16 | ids.u32   the whole text's ids (char tokenizer: one id per character;
                                 built by `prepared_lm.py` on this module's chunks and folders)

A folder is keyed by the sha256 of the file's bytes and the settings that shape it (the
tokenizer's own JSON for tokens), so a changed file or tokenizer gets a new folder and an
unchanged one is reused. Each folder is filled in a staging folder beside it
(`folders.whole_folder`) and renamed into place in one step; `.complete` is written last and
records every file's size and sha256. A folder is verified against it before each use (a file
is hashed again whenever its size, mtime, ctime or inode changed since it last passed,
`folders.check_whole`); one that does not match is never read: it is built again, said in one
line (a killed `prepare` leaves only a hidden staging folder). Token ids also record their
largest id, checked against the vocabulary on open and as batches are built.

Reading a big file is parallel and streaming: the file is cut into chunks of about
`CHUNK_BYTES` at line ends, and processes (`workers`, default the CPU count: this one and a
pool of worker processes) each read, check and tokenize their chunk; this one writes the
chunks' arrays in file order. The vocabulary is counted over the same chunks (a `Counter` per
chunk, merged: memory bounded by the vocabulary, not the data). Each row keeps today's rules:
a malformed line stops with `file:line: what is wrong`, the same message `data/readers.py`
gives. The worker pool is shared by the steps of a prepare (`prepared_workers.py`).

Each step has a numpy fast path (`prepared_scan.py`: a chunk indexed in one pass, texts read
in blocks, runs of texts encoded at once) beside the plain one here (line by line, text by
text), which is the reference: a chunk with anything unusual goes the plain way, and
`FAST_PATHS = False` sends everything there. Both write the same bytes.

Supported: `.tsv` / `.tab` / `.txt` labelled files (the `label<TAB>text` default, a header
row, or columns by position / name) and plain text for the char LM. CSV (whose quoted fields
may span lines) and JSON lines are read in memory as before.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import UserError
from ..fileio import atomic_write_text, write_data
from ..folders import not_whole, read_record, whole
from .fetch import cache_dir, sha256_file
from .file_array import FileArray
from .prepared_scan import block_texts, scan_chunk
from .prepared_workers import close_workers, run_tasks
from .readers import _COLUMN_NAMES, check_label, field_count_error, not_utf8, table_layout

FORMAT_VERSION = 1
CHUNK_BYTES = 4 << 20  # 4 MiB of the file per task: big enough to amortise a task, small for memory
PARALLEL_MIN_BYTES = 8 << 20  # a smaller file is read in this process alone (a worker costs ~0.5 s of CPU to start)
TSV_SUFFIXES = (".tsv", ".tab", ".txt")
FAST_PATHS = True  # numpy fast paths (prepared_scan.py); False: line by line and text by text, the reference
last_plain_chunks: list[str] = []  # the chunks the last `labeled_rows` indexed line by line, and why
_BOM = b"\xef\xbb\xbf"


def prepared_dir() -> Path:
    return cache_dir() / "prepared"


def prepared_enabled() -> bool:
    """Prepared data is used for the user's files unless SCRATCHFORMER_PREPARED=0 (in memory, as before)."""
    return os.environ.get("SCRATCHFORMER_PREPARED", "1").strip().lower() not in ("0", "false", "no", "off")


def id_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab_size <= 65,536), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def default_workers(nbytes: int | None = None) -> int:
    """Processes for a file of `nbytes` (this one and a pool of the rest, `prepared_workers`):
    $SCRATCHFORMER_PREPARE_WORKERS, else the CPU count; 1 (this process) for a file under
    PARALLEL_MIN_BYTES."""
    if nbytes is not None and nbytes < PARALLEL_MIN_BYTES:
        return 1
    env = os.environ.get("SCRATCHFORMER_PREPARE_WORKERS")
    return max(1, int(env)) if env else max(1, os.cpu_count() or 1)


# ----------------------------------------------------------------------------- content digests
_digests: dict[tuple, str] = {}


def content_digest(path: str | Path) -> str:
    """sha256 of the file's bytes (remembered per (path, size, mtime, inode) in this process)."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    key = (str(path.absolute()), st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _digests:
        _digests[key] = sha256_file(path)
    return _digests[key]


def _digest_of(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- the cache folders
class _Writer:
    """One binary file of a staging folder, written in pieces, its sha256 kept as it goes."""

    def __init__(self, folder: Path, name: str):
        self.name, self.f, self.h, self.n = name, open(folder / name, "xb"), hashlib.sha256(), 0

    def write(self, arr: np.ndarray) -> None:
        data = np.ascontiguousarray(arr).tobytes()
        write_data(self.f, data)
        self.h.update(data)
        self.n += len(data)

    def close(self) -> dict:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return {"bytes": self.n, "sha256": self.h.hexdigest()}


RECORD = ".complete"  # each folder's completion record (`folders.whole_folder`'s format)


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def verify(folder: str | Path) -> list[str]:
    """The files of a prepared folder whose sha256 differs from its completion record (hashed
    every time: `_cached` checks the same, but hashes only what changed since it last passed)."""
    folder = Path(folder)
    record = read_record(folder, RECORD)
    if record is None or record.files is None:
        raise UserError(f"{folder} has no completion record {RECORD}; delete the folder {folder} and run again")
    return [name for name, f in record.files.items()
            if not (folder / name).is_file() or sha256_file(folder / name) != f["sha256"]]


def _cached(folder: Path, fill: Callable[[Path, dict], dict], rebuild: bool = False) -> tuple[dict, bool]:
    """(meta, whether it was built now): `folder` when it is whole (every file's size and sha256
    as its record says, `folders.check_whole`), else built: `fill(staging, files)` records the
    files it hashed while writing in `files` and returns the meta, written to meta.json."""

    def build(stage) -> None:
        meta = {"format_version": FORMAT_VERSION, **fill(stage.path, stage.files)}
        atomic_write_text(stage.path / "meta.json", json.dumps(meta, ensure_ascii=False, indent=1) + "\n")

    # a folder that is not whole (a killed build, a file changed since) is replaced; a whole one
    # that another process renamed into place meanwhile is kept: a reader never loses files
    built = whole(folder, RECORD, build, want={"format_version": FORMAT_VERSION}, what="prepared data folder",
                  verb="prepare", log=_say, rebuild=rebuild)
    try:
        return json.loads((folder / "meta.json").read_text(encoding="utf-8")), built
    except (OSError, ValueError):
        raise not_whole(folder, "its meta.json cannot be read") from None


# ----------------------------------------------------------------------------- chunks and workers
@dataclass(frozen=True)
class Chunk:
    start: int  # byte offsets in the file, [start, end); a chunk ends just after a b"\n" (or at EOF)
    end: int
    line: int  # 1-based number of its first line


def chunks_of(path: Path, size: int | None = None, limit: int | None = None) -> list[Chunk]:
    """The file cut at line ends into pieces of about `size` bytes, with each piece's first
    line number (lines end at \\n, \\r\\n or a lone \\r, as `readers.decode_utf8` reads them);
    the first `limit` pieces only, if given (the rest of the file is not read)."""
    size = CHUNK_BYTES if size is None else size
    out, start, line, carry = [], 0, 1, b""
    with open(path, "rb") as f:
        while limit is None or len(out) < limit:
            block = f.read(size)
            data = carry + block
            if not block:
                if data:
                    out.append(Chunk(start, start + len(data), line))
                return out
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # a line longer than a chunk: keep reading
                carry = data
                continue
            piece, carry = data[:cut], data[cut:]
            out.append(Chunk(start, start + cut, line))
            line += piece.count(b"\n") + (piece.count(b"\r") - piece.count(b"\r\n") if b"\r" in piece else 0)
            start += cut
    return out


def _read(path: Path, chunk: Chunk) -> tuple[bytes, int]:
    """A chunk's bytes and the file offset of the first of them (a BOM at the file's start dropped)."""
    with open(path, "rb") as f:
        f.seek(chunk.start)
        raw = f.read(chunk.end - chunk.start)
    if chunk.start == 0 and raw.startswith(_BOM):
        return raw[3:], 3
    return raw, chunk.start


def _lines(path: Path, chunk: Chunk) -> Iterator[tuple[int, int, int, bytes]]:
    """(line number, byte start, byte end, raw bytes) of each line of a chunk, split as
    `readers.decode_utf8` splits a file (a BOM dropped, \\r\\n and lone \\r end lines)."""
    raw, pos = _read(path, chunk)
    return _split_lines(raw, pos, chunk.line)


def _split_lines(raw: bytes, pos: int, lineno: int) -> Iterator[tuple[int, int, int, bytes]]:
    """The lines of `raw` (whose first byte is at `pos` in the file, on line `lineno`)."""
    pieces = raw.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()  # the chunk ends with a line break: no line after it
    for piece in pieces:
        at = pos
        pos += len(piece) + 1
        if b"\r" not in piece:
            yield lineno, at, at + len(piece), piece
            lineno += 1
            continue
        body = piece[:-1] if piece.endswith(b"\r") else piece
        for sub in body.split(b"\r"):
            yield lineno, at, at + len(sub), sub
            at += len(sub) + 1
            lineno += 1


def _decode(path: Path, lineno: int, at: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, lineno, at + exc.start, raw[exc.start]) from None


# ----------------------------------------------------------------------------- labelled rows
@dataclass(frozen=True)
class Layout:
    """Where a row's text and label are: fields per line, their positions, the header line."""
    width: int
    text_at: int
    label_at: int
    header_line: int | None  # the line of the header row (skipped), or None

    def fields(self, path, lineno: int, line: str) -> tuple[str, str]:
        fields = line.split("\t")
        if len(fields) != self.width:
            raise UserError(field_count_error(path, lineno, "tsv", self.width, len(fields)))
        return fields[self.text_at], fields[self.label_at]


def _head_rows(path: Path, limit: int = 64) -> list[tuple[int, list[str]]]:
    """The first non-blank rows (line, fields), for the header rule (errors come later, in order)."""
    rows: list[tuple[int, list[str]]] = []
    for chunk in chunks_of(path, 1 << 16, limit=4):
        for lineno, at, _, raw in _lines(path, chunk):
            line = _decode(path, lineno, at, raw)
            if line.strip():
                rows.append((lineno, line.split("\t")))
                if len(rows) >= limit:
                    return rows
    return rows


def _head_suspect(rows, label_at) -> bool:
    """The header rule's first half (a usual column name); the second (the first row's label
    occurs nowhere else) is checked on all labels once they are read (`_check_suspect`)."""
    return any(f.strip().lower() in _COLUMN_NAMES for f in rows[0][1])


def _index_chunk(task) -> dict:
    """A chunk's row index (spans, label codes in order of first use, their names, character
    counts): by numpy (`prepared_scan.scan_chunk`) when the chunk is plain, else line by line
    (`_index_lines`, the reference, which also names a bad line). "plain" says why, or is ""."""
    path, chunk, layout, want_chars = task
    raw, pos = _read(path, chunk)
    res, why = scan_chunk(raw, pos, chunk.line, layout, want_chars) if FAST_PATHS else (None, "FAST_PATHS is off")
    if res is None:
        res = _index_lines(path, raw, pos, chunk.line, layout, want_chars)
    return res | {"plain": why}


def _index_lines(path: Path, raw: bytes, pos: int, first_line: int, layout: Layout, want_chars: bool) -> dict:
    """The row index of a chunk's bytes, one line at a time: every row checked as
    `read_labeled_file` checks it, the first bad one raising its `file:line` error."""
    from .segment import CJK

    spans, labels, chars, codes = [], [], [], {}
    for lineno, at, end, raw_line in _split_lines(raw, pos, first_line):
        line = _decode(path, lineno, at, raw_line)
        if not line.strip() or lineno == layout.header_line:
            continue
        text, label = layout.fields(path, lineno, line)
        if not text.strip():
            raise UserError(f"{path}:{lineno}: empty text (fix the row, or pass skip_empty=True)")
        label = label.strip()
        if not label:
            raise UserError(f"{path}:{lineno}: empty label")
        check_label(label, f"{path}:{lineno}")
        spans.append((at, end))
        labels.append(codes.setdefault(label, len(codes)))
        if want_chars:
            t = text.strip()
            chars.append((len("".join(t.split())), len(t) - len(CJK.sub("", t))))
    return {"spans": np.asarray(spans, dtype=np.int64).reshape(-1, 2), "labels": np.asarray(labels, np.int32),
            "names": list(codes), "chars": np.asarray(chars, dtype=np.int64).reshape(-1, 2)}


class LabeledRows:
    """The row index of a labelled file (read with os.pread): where each row is, its label, the
    character counts of its text. `text(i)` reads row i's text from the file on demand."""

    def __init__(self, folder: Path, meta: dict, path: str | Path | None = None):
        self.folder, self.meta = folder, meta
        # the file read now: the index is keyed by content, so it may have been built from a copy
        # elsewhere (meta["source"], perhaps gone since)
        self.path = Path(meta["source"] if path is None else path)
        self.n = int(meta["rows"])
        self.names: list[str] = meta["labels"]
        self.layout = Layout(**meta["layout"])
        self.digest = meta["content"]
        # read with os.pread, not mapped: a pass over every row (a split's labels, the texts for
        # the data-hygiene check) would otherwise keep all of these files' pages in the RSS
        self.spans = FileArray(folder / "spans.i64", np.int64, (self.n, 2))
        self.labels = FileArray(folder / "labels.i32", np.int32, (self.n,))
        self.chars = FileArray(folder / "chars.i64", np.int64, (self.n, 2))
        self._file = None

    def __len__(self) -> int:
        return self.n

    def _fd(self) -> int:
        """The file, open for `os.pread`: reading rows here and there maps nothing (a memory map
        of it would count every page the kernel maps around each read in the RSS)."""
        if self._file is None:
            self._file = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return self._file

    def raw(self, i: int) -> str:
        a, b = self.spans[i].tolist()
        return os.pread(self._fd(), b - a, a).decode("utf-8")

    def text(self, i: int) -> str:
        return self.raw(i).split("\t")[self.layout.text_at].strip()

    def texts(self, index: np.ndarray) -> list[str]:
        """The texts of rows `index` (what `text(i)` gives for each). Rows in file order are read
        in blocks of about CHUNK_BYTES, one `pread` and one decode a block
        (`prepared_scan.block_texts`); rows scattered over the file, one `pread` a row."""
        spans = self.spans[np.asarray(index, dtype=np.int64)]
        if len(spans) < 2 or not FAST_PATHS or np.any(spans[1:, 0] < spans[:-1, 0]):
            return self._texts_per_row(spans)
        fd, starts, out, i = self._fd(), spans[:, 0], [], 0
        while i < len(spans):
            j = max(i + 1, int(np.searchsorted(starts, starts[i] + CHUNK_BYTES)))
            part = spans[i:j]
            lo, hi = int(part[0, 0]), int(part[:, 1].max())
            texts = None
            if hi - lo <= 4 * int((part[:, 1] - part[:, 0]).sum()) + 4096:  # rows fill a quarter of the block
                texts = block_texts(os.pread(fd, hi - lo, lo), part - lo, self.layout.text_at)
            out.extend(self._texts_per_row(part) if texts is None else texts)
            i = j
        return out

    def _texts_per_row(self, spans: np.ndarray) -> list[str]:
        fd, at = self._fd(), self.layout.text_at
        return [os.pread(fd, b - a, a).decode("utf-8").split("\t")[at].strip() for a, b in spans.tolist()]

    def __del__(self):
        if isinstance(getattr(self, "_file", None), int):
            try:
                os.close(self._file)
            except OSError:
                pass

    def pair(self, i: int) -> tuple[str, str]:
        return self.text(i), self.names[self.labels[i]]

    def __getstate__(self):  # workers open the files again
        return {"folder": self.folder, "meta": self.meta, "path": str(self.path)}

    def __setstate__(self, s):
        self.__init__(s["folder"], s["meta"], s["path"])



def labeled_rows(path: str | Path, text_col=None, label_col=None, workers: int | None = None,
                 rebuild: bool = False, log=None) -> LabeledRows:
    """The row index of the labelled TSV file `path` (built once per content and columns,
    then reused): every row checked as `read_labeled_file` checks it."""
    path = Path(path)
    if path.suffix.lower() not in TSV_SUFFIXES:
        raise UserError(f"{path}: prepared data reads tab-separated files ({', '.join(TSV_SUFFIXES)}); "
                        "this one is read in memory")
    digest = content_digest(path)
    settings = {"text_col": text_col, "label_col": label_col, "kind": "rows"}
    folder = prepared_dir() / f"rows-{digest[:16]}-{_digest_of(settings)[:8]}"
    workers = default_workers(path.stat().st_size) if workers is None else workers

    def fill(tmp: Path, files: dict) -> dict:
        t0 = time.monotonic()
        head = _head_rows(path)
        if not head:
            raise UserError(f"{path}: no labelled rows found")
        has_header, ti, li, width = table_layout(path, "tsv", head, text_col, label_col, None, _head_suspect)
        layout = Layout(width, ti, li, head[0][0] if has_header else None)
        chunks = chunks_of(path)
        w = {name: _Writer(tmp, name) for name in ("spans.i64", "labels.i32", "chars.i64")}
        names: dict[str, int] = {}
        n, counts = 0, []
        last_plain_chunks.clear()
        for chunk, res in zip(chunks, run_tasks(_index_chunk, [(path, c, layout, True) for c in chunks], workers)):
            if res["plain"]:
                last_plain_chunks.append(f"{path}:{chunk.line}: {res['plain']}")
            remap = np.asarray([names.setdefault(lab, len(names)) for lab in res["names"]], dtype=np.int32)
            codes = remap[res["labels"]] if len(res["labels"]) else res["labels"]
            w["spans.i64"].write(res["spans"])
            w["labels.i32"].write(codes)
            w["chars.i64"].write(res["chars"])
            counts.append(np.bincount(codes, minlength=len(names)) if len(codes) else np.zeros(0, np.int64))
            n += len(codes)
        for name, wr in w.items():
            files[name] = wr.close()
        if n == 0:
            raise UserError(f"{path}: no labelled rows found")
        order = sorted(names)  # codes by sorted label: rewrite the label file once
        to_sorted = np.empty(len(names), dtype=np.int32)
        for new, lab in enumerate(order):
            to_sorted[names[lab]] = new
        old = np.fromfile(tmp / "labels.i32", dtype=np.int32)
        os.unlink(tmp / "labels.i32")
        wr = _Writer(tmp, "labels.i32")
        wr.write(to_sorted[old])
        files["labels.i32"] = wr.close()
        if layout.header_line is None and text_col is None and label_col is None:
            _check_suspect(path, head, to_sorted[old], order, li)
        return {"kind": "rows", "source": str(path.absolute()), "content": digest, "rows": n, "labels": order,
                "layout": layout.__dict__, "settings": settings, "seconds": round(time.monotonic() - t0, 3),
                "bytes": path.stat().st_size}

    meta, built = _cached(folder, fill, rebuild)
    if built and log:
        log(f"prepared: {path} indexed, {meta['rows']:,} rows in {meta['seconds']:.1f} s -> {folder}")
    return LabeledRows(folder, meta, path)


def _check_suspect(path, head, codes: np.ndarray, names: list[str], label_at: int) -> None:
    """The header rule's second half over every row (readers._suspect_header on all labels)."""
    from .readers import _NAME

    first = [f.strip() for f in head[0][1]]
    if len(codes) < 4 or label_at >= len(first) or not all(_NAME.fullmatch(f) for f in first):
        return
    rest = codes[1:]
    if names[codes[0]] in {names[c] for c in np.unique(rest)}:
        return
    if len(np.unique(rest)) < len(rest):
        raise UserError(
            f"{path}:{head[0][0]}: the first row looks like a header but does not name a 'text' "
            f"and a 'label' column (columns found: {', '.join(repr(f) for f in head[0][1])}); "
            "say which columns to use with --text-col/--label-col (text_col=/label_col=): "
            "by name, or by 0-based position if that row is data")


class LazyPairs(Sequence):
    """(text, label) pairs of some rows of a labelled file, read from it on demand: a split
    of millions of rows costs one int64 per row, not the texts. Slicing gives a LazyPairs."""

    def __init__(self, rows: LabeledRows, index: np.ndarray):
        self.rows, self.index = rows, np.asarray(index, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return LazyPairs(self.rows, self.index[i])
        return self.rows.pair(int(self.index[i]))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        names = self.rows.names
        for block in self._blocks():  # texts and labels read a block of rows at a time
            for text, code in zip(self.rows.texts(block), self.rows.labels[block].tolist()):
                yield text, names[code]

    def _blocks(self, size: int = 10_000) -> Iterator[np.ndarray]:
        for a in range(0, len(self.index), size):
            yield self.index[a:a + size]

    def texts(self) -> "LazyTexts":
        return LazyTexts(self)

    def label_names(self) -> list[str]:
        """The labels that occur in these rows, sorted (label codes are indices into the sorted names)."""
        seen = np.zeros(len(self.rows.names), dtype=bool)
        for block in self._blocks(1 << 20):
            seen[self.rows.labels[block]] = True
        return [self.rows.names[c] for c in np.flatnonzero(seen)]

    def cjk_fraction(self) -> float:
        """`tokenizers.cjk_fraction` of these rows' texts, from the index alone."""
        counts = np.zeros(2, dtype=np.int64)
        for block in self._blocks(1 << 20):
            counts += self.rows.chars[block].sum(axis=0)
        return float(counts[1] / counts[0]) if counts[0] else 0.0


class LazyTexts(Sequence):
    """The texts of a LazyPairs, read on demand (what `[t for t, _ in pairs]` gives in memory)."""

    def __init__(self, pairs: LazyPairs):
        self.pairs = pairs

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return LazyTexts(self.pairs[i])
        return self.pairs.rows.text(int(self.pairs.index[i]))

    def __iter__(self) -> Iterator[str]:
        for a in range(0, len(self.pairs.index), 10_000):
            yield from self.pairs.rows.texts(self.pairs.index[a:a + 10_000])


__all__ = ["LabeledRows", "LazyPairs", "LazyTexts", "labeled_rows", "close_workers", "content_digest", "id_dtype", "verify",
           "prepared_dir", "prepared_enabled", "chunks_of", "FileArray"]
