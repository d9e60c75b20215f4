"""Read the user's own data files, with errors that point at the bad line.

Formats:

* Labelled text (:func:`read_labeled_file`): ``.tsv`` / ``.tab`` / ``.txt`` (tab separated,
  no quoting), ``.csv`` (RFC 4180 quoting, so ``"a, b"`` is one field), ``.jsonl``
  (one JSON object a line). A first row that names a ``text`` and a ``label`` column is a
  header. A file without one is read as ``label<TAB>text`` (like THUCNews), unless columns
  are given by 0-based position. A first row that looks like a header without naming those
  two columns (``review<TAB>sentiment``, ``text<TAB>category``, ...) stops the reading with the
  columns found, so that a header never becomes a training example or a class.
* Parallel text (:func:`read_parallel`): a TSV of ``src<TAB>tgt`` or two aligned files.
* Plain text for language modelling (:func:`read_text_file`).

Every problem raises :class:`~scratchformer.errors.UserError` as ``file:line: what is wrong``.
Blank lines are skipped in line-per-record formats (but not in two aligned files, where they
would shift the alignment). :func:`seeded_split` is the one split rule used for every fixed
split in :mod:`scratchformer.data.datasets`.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from pathlib import Path
from typing import Callable, Hashable, Sequence, TypeVar

import numpy as np

from scratchformer.errors import UserError

__all__ = ["read_labeled_file", "read_parallel", "read_text_file", "read_utf8", "decode_utf8",
           "seeded_split", "seeded_group_split"]

T = TypeVar("T")
Column = int | str | None

_FORMATS = {".tsv": "tsv", ".tab": "tsv", ".txt": "tsv", ".csv": "csv",
            ".jsonl": "jsonl", ".ndjson": "jsonl"}


# --------------------------------------------------------------------------- splitting


def seeded_split(
    items: Sequence[T], seed: int = 0, fractions: Sequence[float] = (0.8, 0.1, 0.1)
) -> tuple[list[T], ...]:
    """Split ``items`` by ``numpy.random.RandomState(seed).permutation(len(items))``.

    Part ``k`` holds the permuted items from ``floor(n * (f_0 + ... + f_{k-1}))`` up to the
    next boundary; the last part takes the rest. With 10,000 items and the default
    fractions this gives 8,000 / 1,000 / 1,000. Items keep the permuted order.
    """
    fractions = [float(f) for f in fractions]
    if not fractions or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise UserError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    return tuple([items[i] for i in part] for part in seeded_split_indices(len(items), seed, fractions))


def seeded_split_indices(n: int, seed: int = 0, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> tuple[np.ndarray, ...]:
    """The positions `seeded_split` puts in each part, as int64 arrays (the same rule, without
    holding the items: prepared data splits millions of rows by their index alone)."""
    fractions = [float(f) for f in fractions]
    if not fractions or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise UserError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    idx = np.random.RandomState(seed).permutation(n)
    bounds, cum = [0], 0.0
    for f in fractions[:-1]:
        cum += f
        bounds.append(int(n * cum + 1e-9))
    bounds.append(n)
    return tuple(idx[a:b].astype(np.int64) for a, b in zip(bounds[:-1], bounds[1:]))


def seeded_group_split(
    items: Sequence[T], group: Callable[[T], Hashable], seed: int = 0,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
) -> tuple[list[T], ...]:
    """Split whole groups: :func:`seeded_split` of the sorted distinct ``group(item)`` values,
    then every item follows its group (items keep their input order). No group spans two
    parts, e.g. no movie has reviews in both train and test."""
    names = sorted({group(item) for item in items})
    where = {name: k for k, part in enumerate(seeded_split(names, seed, fractions)) for name in part}
    parts: tuple[list[T], ...] = tuple([] for _ in fractions)
    for item in items:
        parts[where[group(item)]].append(item)
    return parts


# --------------------------------------------------------------------------- decoding


def decode_utf8(raw: bytes, name: str | Path) -> str:
    """``raw`` as text (UTF-8, BOM dropped, newlines normalised to ``\\n``); bad bytes raise a
    UserError ``name:line: not valid UTF-8 at byte offset N``."""
    # The BOM is dropped by hand, not by "utf-8-sig": that codec reports error offsets counted from
    # after the BOM, which would name the wrong byte and line.
    bom = 3 if raw.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = raw[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = bom + exc.start
        raise not_utf8(name, raw[:at].count(b"\n") + 1, at, raw[at]) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def not_utf8(name, line: int, at: int, byte: int) -> UserError:
    """The one-line error for a byte that is not UTF-8 (`at`: its offset in the whole file)."""
    return UserError(f"{name}:{line}: not valid UTF-8 at byte offset {at} (byte 0x{byte:02x}); re-save the file as UTF-8")


def read_utf8(path: str | Path) -> str:
    """The file as text (see `decode_utf8`), with one-line errors for a missing file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a file") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied") from None
    return decode_utf8(raw, path)


def read_text_file(path: str | Path) -> str:
    """The whole file as one string, for language modelling; empty files are an error."""
    text = read_utf8(Path(path))
    if not text.strip():
        raise UserError(f"{path}: the file is empty; a language model needs some text")
    return text


# --------------------------------------------------------------------------- labelled files


def _rows(path: Path, fmt: str) -> list[tuple[int, list[str]]]:
    """Non-blank rows of a TSV/CSV file as ``(line_number, fields)``."""
    text = read_utf8(path)
    rows: list[tuple[int, list[str]]] = []
    if fmt == "tsv":
        for lineno, line in enumerate(text.split("\n"), 1):
            if line.strip():
                rows.append((lineno, line.split("\t")))
        return rows
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    start = 1
    try:
        for fields in reader:
            if any(f.strip() for f in fields):
                rows.append((start, fields))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise UserError(f"{path}:{start}: bad CSV ({exc})") from None
    return rows


def _find_column(path: Path, header: list[str] | None, col: Column, default: int, what: str) -> int:
    if col is None:
        if header is None:
            return default
        lowered = [h.strip().lower() for h in header]
        if what in lowered:
            return lowered.index(what)
        raise UserError(
            f"{path}:1: header {header} has no '{what}' column; "
            f"pass {what}_col= with a column name or 0-based position"
        )
    if isinstance(col, int):
        return col
    if header is None:
        raise UserError(f"{path}: {what}_col={col!r} names a column but the file has no header row")
    for i, h in enumerate(header):
        if h == col or h.strip().lower() == col.strip().lower():
            return i
    raise UserError(f"{path}:1: no column named {col!r} in header {header}")


def _looks_like_header(fields: list[str]) -> bool:
    lowered = {f.strip().lower() for f in fields}
    return "text" in lowered and "label" in lowered


# names people give the columns of a labelled file (a first row of these is a header)
_COLUMN_NAMES = frozenset("""
    text texts label labels sentence sentence1 sentence2 review reviews content contents document
    doc title body comment tweet category categories class classes sentiment target tag tags
    topic polarity rating stars score id idx index headline question answer summary news
    文本 标签 类别 内容 标题 句子 分类
""".split())
_NAME = re.compile(r"[^\W\d][\w\-]{0,39}")  # one identifier-like word, no spaces


def _suspect_header(rows: list[tuple[int, list[str]]], label_at: int) -> bool:
    """Whether the first row of a file read as headerless looks like a header all the same:
    it holds a usual column name, or all its fields are identifier-like words and its label
    occurs nowhere else while the other rows' labels repeat (a class of one: the header's)."""
    first = [f.strip() for f in rows[0][1]]
    if any(f.lower() in _COLUMN_NAMES for f in first):
        return True
    if len(rows) < 4 or label_at >= len(first) or not all(_NAME.fullmatch(f) for f in first):
        return False
    labels = [fields[label_at].strip() for _, fields in rows[1:] if label_at < len(fields)]
    return first[label_at] not in labels and len(set(labels)) < len(labels)


def _table(path, fmt, text_col, label_col, has_header):
    """Yield ``(line, text, label)`` from a TSV or CSV file."""
    rows = _rows(path, fmt)
    if not rows:
        return
    has_header, ti, li, width = table_layout(path, fmt, rows, text_col, label_col, has_header)
    body = rows[1:] if has_header else rows
    for lineno, fields in body:
        if len(fields) != width:
            raise UserError(field_count_error(path, lineno, fmt, width, len(fields)))
        yield lineno, fields[ti], fields[li]


def field_count_error(path, lineno: int, fmt: str, width: int, found: int) -> str:
    sep = "tab" if fmt == "tsv" else "comma"
    hint = " (a tab inside the text?)" if fmt == "tsv" and found > width else ""
    return f"{path}:{lineno}: expected {width} {sep}-separated fields, found {found}{hint}"


def table_layout(path, fmt, rows, text_col, label_col, has_header, suspect=None) -> tuple[bool, int, int, int]:
    """(has a header row, text column, label column, fields per row) of a TSV/CSV file from its
    first `rows` (all of them, or its head: prepared data reads the rest in parallel and checks
    a suspected header's label rule afterwards, `suspect` being the check on the head)."""
    suspect = _suspect_header if suspect is None else suspect
    if has_header is None:
        named = isinstance(text_col, str) or isinstance(label_col, str)
        has_header = named or _looks_like_header(rows[0][1])
        if not has_header and text_col is None and label_col is None and suspect(rows, 0):
            raise UserError(
                f"{path}:{rows[0][0]}: the first row looks like a header but does not name a 'text' "
                f"and a 'label' column (columns found: {', '.join(repr(f) for f in rows[0][1])}); "
                "say which columns to use with --text-col/--label-col (text_col=/label_col=): "
                "by name, or by 0-based position if that row is data")
    header = rows[0][1] if has_header else None
    body = rows[1:] if has_header else rows
    ti = _find_column(path, header, text_col, 1, "text")
    li = _find_column(path, header, label_col, 0, "label")
    if min(ti, li) < 0:
        raise UserError(f"{path}: column positions are 0-based and non-negative, got {min(ti, li)}")
    width = len(header) if header is not None else (len(body[0][1]) if body else 0)
    if max(ti, li) >= width > 0:
        raise UserError(f"{path}:{rows[0][0]}: column {max(ti, li)} asked for, but rows have {width} fields")
    return has_header, ti, li, width


def _jsonl(path, text_col, label_col):
    """Yield ``(line, text, label)`` from a JSON-lines file."""
    tkey = "text" if text_col is None else text_col
    lkey = "label" if label_col is None else label_col
    for lineno, line in enumerate(read_utf8(path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{lineno}: bad JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{lineno}: expected a JSON object, found {type(obj).__name__}")
        for key in (tkey, lkey):
            if key not in obj:
                raise UserError(f"{path}:{lineno}: missing key {key!r} (keys: {sorted(obj)})")
        text, label = obj[tkey], obj[lkey]
        if not isinstance(text, str):
            raise UserError(f"{path}:{lineno}: {tkey!r} must be a string, found {type(text).__name__}")
        if isinstance(label, (dict, list)) or label is None:
            raise UserError(
                f"{path}:{lineno}: {lkey!r} must be a string or number, found {json.dumps(label)}")
        for key, value in ((tkey, text), (lkey, str(label))):
            _check_unicode(path, lineno, key, value)
        yield lineno, text, str(label)


def _check_unicode(path, lineno: int, key: str, value: str) -> None:
    """JSON's `\\ud800` escapes can spell a lone surrogate, which is no character: it cannot be
    written back as UTF-8 (tokenizer.json, labels.json), so it stops here, before any file."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise UserError(f"{path}:{lineno}: {key!r} holds a lone surrogate ({ascii(value[e.start])} at "
                        f"character {e.start + 1}), which is not text; fix that \\u escape") from None


BREAKS_LINES = ("\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def check_label(label: str, where: str) -> None:
    """A label is one line without tabs: `predict` prints `label<TAB>score` per text, and the
    reports and tables print labels as cells; a tab or line break inside would split them."""
    bad = next((c for c in BREAKS_LINES if c in label), None)
    if bad is not None:
        raise UserError(f"{where}: the label {label!r} holds a {'tab' if bad == chr(9) else 'line break'} "
                        f"({ascii(bad)}), which would break `predict`'s one-line output; use labels "
                        "without tabs or line breaks")


def read_labeled_file(
    path: str | Path,
    text_col: Column = None,
    label_col: Column = None,
    fmt: str | None = None,
    has_header: bool | None = None,
    skip_empty: bool = False,
) -> list[tuple[str, str]]:
    """Read ``(text, label)`` pairs from a ``.tsv`` / ``.csv`` / ``.jsonl`` file.

    Args:
        path: the file; its extension picks the format unless ``fmt`` is given
            (``"tsv"``, ``"csv"`` or ``"jsonl"``; ``.txt`` and ``.tab`` read as TSV).
        text_col, label_col: column name or 0-based position (TSV/CSV), key (JSONL).
            Defaults: the ``text`` / ``label`` columns of a header row, or for a file without
            a header ``label`` in column 0 and ``text`` in column 1 (``label<TAB>text``).
        has_header: ``None`` detects a header row naming ``text`` and ``label`` (or assumes
            one when a column is given by name).
        skip_empty: skip rows whose text is blank (their count and lines go to stderr)
            instead of failing.

    Every row must have as many fields as the header (or the first row).
    """
    path = Path(path)
    if fmt is None:
        fmt = _FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise UserError(f"{path}: cannot tell the format from {path.suffix or 'no extension'!r}; "
                            "use .tsv, .csv or .jsonl, or pass fmt=")
    if fmt not in ("tsv", "csv", "jsonl"):
        raise UserError(f"unknown format {fmt!r}: use 'tsv', 'csv' or 'jsonl'")
    records = _jsonl(path, text_col, label_col) if fmt == "jsonl" else _table(
        path, fmt, text_col, label_col, has_header)
    out: list[tuple[str, str]] = []
    skipped: list[int] = []
    for lineno, text, label in records:
        if not text.strip():
            if skip_empty:
                skipped.append(lineno)
                continue
            raise UserError(f"{path}:{lineno}: empty text (fix the row, or pass skip_empty=True)")
        if not label.strip():
            raise UserError(f"{path}:{lineno}: empty label")
        check_label(label.strip(), f"{path}:{lineno}")
        out.append((text.strip(), label.strip()))
    if skipped:
        shown = ", ".join(map(str, skipped[:10])) + (", ..." if len(skipped) > 10 else "")
        print(f"{path}: skipped {len(skipped)} rows with empty text (lines {shown})", file=sys.stderr)
    if not out:
        raise UserError(f"{path}: no labelled rows found")
    return out


# --------------------------------------------------------------------------- parallel text


def read_parallel(
    path: str | Path | tuple[str | Path, str | Path], skip_empty: bool = False
) -> list[tuple[str, str]]:
    """Read ``(src, tgt)`` pairs from a ``src<TAB>tgt`` file or from two aligned files.

    Two files pair up line by line, so they must have the same number of lines. A pair with
    an empty side is an error, or skipped with ``skip_empty=True``.
    """
    pairs: list[tuple[str, str]] = []
    if isinstance(path, (tuple, list)):
        if len(path) != 2:
            raise UserError(f"read_parallel takes one TSV file or two aligned files, got {len(path)}")
        src_path, tgt_path = Path(path[0]), Path(path[1])
        src = read_utf8(src_path).split("\n")
        tgt = read_utf8(tgt_path).split("\n")
        for lines in (src, tgt):  # a final newline does not start a line
            if lines and lines[-1] == "":
                lines.pop()
        if len(src) != len(tgt):
            raise UserError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                            "aligned files need one sentence a line in both")
        for lineno, (s, t) in enumerate(zip(src, tgt), 1):
            if not s.strip() or not t.strip():
                if skip_empty:
                    continue
                where = src_path if not s.strip() else tgt_path
                raise UserError(f"{where}:{lineno}: empty line in an aligned pair "
                                "(fix it, or pass skip_empty=True)")
            pairs.append((s.strip(), t.strip()))
    else:
        path = Path(path)
        for lineno, line in enumerate(read_utf8(path).split("\n"), 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise UserError(f"{path}:{lineno}: expected 2 tab-separated fields (src, tgt), "
                                f"found {len(fields)}")
            s, t = fields[0].strip(), fields[1].strip()
            if not s or not t:
                if skip_empty:
                    continue
                raise UserError(f"{path}:{lineno}: empty {'source' if not s else 'target'} side")
            pairs.append((s, t))
    if not pairs:
        raise UserError(f"{path}: no sentence pairs found")
    return pairs
