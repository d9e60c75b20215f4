"""The fast paths of prepared data: a chunk of a labelled TSV file indexed with numpy, rows'
texts read back in blocks, and runs of texts tokenized at once, instead of one Python step (a
read, a decode, a split, an encode) per line or text.

The plain paths in `prepared.py` are the reference and stay beside these: `_index_lines` reads
a chunk line by line, `LabeledRows.text` reads one row, `encode_with_bigrams` encodes one text.
The fast paths give exactly what the plain ones give (tests/data/test_prepared_fast.py), and
decline whenever the input holds anything unusual; the caller then takes the plain path:

  * `scan_chunk` returns (None, why) for a chunk with a \\r line end, a byte that is not UTF-8,
    a row with another number of fields, an empty text or label, or a label with a tab-like
    break: the plain path then raises the very `file:line` error it always raised;
  * `block_texts` returns None for a block that does not hold the rows it was told of;
  * `encode_run` returns None for tokenizers other than char and the word tokenizer's regex
    segmenter (jieba, BPE, WordPiece: per text, or the `tokenizers` library's batch), and for
    a run of words in which a text holds the NUL character that marks where texts end.

How a chunk is indexed (`scan_chunk`): it is decoded once; its line ends are found with numpy
on the bytes (for the byte spans) and on the code points (`np.frombuffer` of its UTF-32: for
character counts and field bounds); the k-th b"\\n" of one is the k-th "\\n" of the other, and
so for tabs. Whitespace (as `str.isspace` has it) is found as positions, so a line's or field's
non-space count is its length less a `searchsorted` difference; CJK characters (as
`segment.CJK` matches) are summed per text field with `np.add.reduceat`.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache
from itertools import repeat

import numpy as np

_SPACE, _CJK = 1, 2  # bits of a code point's class


@lru_cache(maxsize=1)
def _class_table() -> np.ndarray:
    """uint8 class of every code point of the BMP, and one more entry (0) for all above it:
    bit 1 whitespace (`str.isspace`, what `str.split()` and `str.strip()` cut at), bit 2 CJK
    (what `segment.CJK` matches). Both sets lie inside the BMP (tests check all of Unicode)."""
    from .segment import CJK

    table = np.zeros(0x10001, dtype=np.uint8)
    table[:0x10000] = np.fromiter((chr(c).isspace() for c in range(0x10000)), dtype=bool, count=0x10000)
    bmp = "".join(map(chr, range(0x10000)))
    table[[m.start() for m in CJK.finditer(bmp)]] |= _CJK
    return table


def classes(cps: np.ndarray) -> np.ndarray:
    """The class bits (`_SPACE`, `_CJK`) of each code point of `cps` (uint32)."""
    return _class_table()[np.minimum(cps, 0x10000)]


def code_points(text: str) -> np.ndarray:
    """The code points of `text` as uint32 (one per character, as `len(text)` counts them)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def _space_positions(cps: np.ndarray, top: int) -> np.ndarray:
    """Sorted positions of the whitespace in `cps` (whose largest code point is `top`): the
    ASCII ones among the code points <= 32 and, if the text has any, the others (U+0085 to
    U+3000). Searching positions is cheaper than a prefix sum over every code point."""
    table = _class_table()
    low = np.flatnonzero(cps <= 32)
    out = low[(table[cps[low]] & _SPACE) != 0]
    if top >= 0x85:
        mid = np.flatnonzero((cps >= 0x85) & (cps <= 0x3000))
        mid = mid[(table[cps[mid]] & _SPACE) != 0]
        if len(mid):
            out = np.sort(np.concatenate([out, mid]))
    return out


def _nonspace(spaces: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many code points of each [a, b) are not whitespace."""
    return (b - a) - (np.searchsorted(spaces, b) - np.searchsorted(spaces, a))


def _cjk(cps: np.ndarray, top: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many code points of each [a, b) (in order, not overlapping, none empty) are CJK."""
    if top < 0x3040 or not len(a):  # below the first CJK block (segment.CJK): none
        return np.zeros(len(a), dtype=np.int64)
    flags = np.zeros(len(cps) + 1, dtype=np.uint8)  # one more: a bound may be len(cps)
    flags[:-1] = (classes(cps) & _CJK) != 0
    bounds = np.stack([a, b], axis=1).ravel()
    return np.add.reduceat(flags, bounds, dtype=np.int64)[::2]  # even places: [a, b); odd: the gaps between


def _lines(arr: np.ndarray, newline: int) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the lines of `arr` (bytes or code points) split at `newline`, the way
    `bytes.split(b"\\n")` splits with a trailing empty piece dropped."""
    nl = np.flatnonzero(arr == newline)
    ends = nl if (len(arr) == 0 or arr[-1] == newline) else np.append(nl, len(arr))
    starts = np.concatenate(([0], nl + 1))[:len(ends)]
    return starts.astype(np.int64), ends.astype(np.int64)


def _field(tabs: np.ndarray, first: np.ndarray, starts, ends, j: int, width: int):
    """[a, b) of field `j` of every line, each line holding exactly width - 1 tabs from
    tabs[first]."""
    a = starts if j == 0 else tabs[first + j - 1] + 1
    b = ends if j == width - 1 else tabs[first + j]
    return a, b


def scan_chunk(raw: bytes, pos: int, first_line: int, layout, want_chars: bool) -> tuple[dict | None, str]:
    """(index arrays of the chunk `raw`, ""), the same `prepared._index_lines` gives; or
    (None, why not) when the chunk needs the plain path. `pos` is raw[0]'s byte offset in the
    file (a BOM already dropped), `first_line` its line number."""
    from ..errors import UserError
    from .readers import check_label

    if b"\r" in raw:
        return None, "a \\r line end (the plain path splits \\r\\n and lone \\r)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "bytes that are not UTF-8 (the plain path names the line and byte)"
    b = np.frombuffer(raw, dtype=np.uint8)
    cps = code_points(text)
    top = int(cps.max()) if len(cps) else 0
    bstart, bend = _lines(b, 10)  # bytes, for the spans
    cstart, cend = _lines(cps, 10)  # code points, for counts and fields: the same lines
    spaces = _space_positions(cps, top)
    keep = _nonspace(spaces, cstart, cend) > 0  # a blank line is skipped, and so is the header row
    if layout.header_line is not None:
        keep &= first_line + np.arange(len(bstart)) != layout.header_line
    bstart, bend, cstart, cend = bstart[keep], bend[keep], cstart[keep], cend[keep]
    tabs = np.flatnonzero(cps == 9)
    first = np.searchsorted(tabs, cstart)
    if np.any(np.searchsorted(tabs, cend) - first != layout.width - 1):
        return None, "a row with another number of fields (the plain path names it)"
    ta, tb = _field(tabs, first, cstart, cend, layout.text_at, layout.width)
    la, lb = _field(tabs, first, cstart, cend, layout.label_at, layout.width)
    text_chars = _nonspace(spaces, ta, tb)
    if len(text_chars) and (text_chars.min() == 0 or _nonspace(spaces, la, lb).min() == 0):
        return None, "an empty text or label (the plain path names the first)"
    codes: dict[str, int] = {}
    labels = [codes.setdefault(text[x:y].strip(), len(codes)) for x, y in zip(la.tolist(), lb.tolist())]
    for name in codes:  # the label rule once per distinct label, not per row
        try:
            check_label(name, "")
        except UserError:
            return None, "a label with a tab or line break (the plain path names its line)"
    chars = np.zeros((len(ta) if want_chars else 0, 2), dtype=np.int64)
    if want_chars:
        chars[:, 0], chars[:, 1] = text_chars, _cjk(cps, top, ta, tb)
    return {"spans": np.stack([pos + bstart, pos + bend], axis=1), "labels": np.asarray(labels, dtype=np.int32),
            "names": list(codes), "chars": chars}, ""


def block_texts(blob: bytes, spans: np.ndarray, text_at: int) -> list[str] | None:
    """The text field (stripped) of each row at `spans` (byte [start, end) inside `blob`, rows
    checked when indexed): what `raw.split("\\t")[text_at].strip()` gives per row, from one
    decode of the block. None if the block does not hold such rows (the caller reads per row)."""
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        return None
    b = np.frombuffer(blob, dtype=np.uint8)
    tabs = np.flatnonzero(b == 9)
    starts, ends = spans[:, 0], spans[:, 1]
    first = np.searchsorted(tabs, starts)
    ntabs = np.searchsorted(tabs, ends) - first
    if len(spans) and ntabs.min() < text_at:
        return None
    a = starts if text_at == 0 else tabs[first + text_at - 1] + 1  # every row has text_at tabs or more
    e = np.where(ntabs > text_at, tabs[np.minimum(first + text_at, len(tabs) - 1)], ends) if len(tabs) else ends
    if len(text) != len(blob):  # not ASCII: a byte offset's code point is the count of lead bytes before it
        lead = np.flatnonzero((b & 0xC0) != 0x80)
        a, e = np.searchsorted(lead, a), np.searchsorted(lead, e)
    return [text[x:y].strip() for x, y in zip(a.tolist(), e.tolist())]


# ----------------------------------------------------------------------------- a run of texts tokenized at once
_END = "\x00"  # ends each text in a joined run: a [^\w\s] character, so a word of its own


def char_counts(text: str) -> Counter:
    """`Counter(text)`, by a count of its code points (`np.bincount`), not a step per character."""
    cps = code_points(text)
    counts = np.bincount(cps) if len(cps) else np.zeros(0, np.int64)
    return Counter({chr(c): int(counts[c]) for c in np.flatnonzero(counts)})


def char_ids(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids of all texts one after the other, ids per text, their code points) of a char
    tokenizer: the code points of the joined texts mapped through a table of the distinct ones."""
    from .tokenizers import UNK_ID

    if tok.lowercase:
        texts = [t.lower() for t in texts]
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    cps = code_points("".join(texts))
    if not len(cps):
        return np.zeros(0, np.uint32), lengths, cps
    table = np.full(int(cps.max()) + 1, UNK_ID, dtype=np.uint32)  # code point -> id (<= 1.1M entries)
    for token, i in tok.stoi.items():
        if len(token) == 1 and ord(token) < len(table):  # the specials are longer: never text
            table[ord(token)] = i
    return table[cps], lengths, cps


def _words(joined: str) -> list[str]:
    """`segment.regex_words(joined)`, with the faster ASCII pattern when the text is ASCII."""
    from .segment import ASCII_WORD_PATTERN, WORD_PATTERN

    return (ASCII_WORD_PATTERN if joined.isascii() else WORD_PATTERN).findall(joined)


def word_counts(tok, texts: list[str]) -> Counter | None:
    """The counts of `tok._split` over `texts` for the regex segmenter, by one regex pass over
    the texts joined with "\\n" (a word never spans whitespace); None for another segmenter."""
    if tok.segmenter != "regex":
        return None
    return Counter(_words("\n".join(t.lower() for t in texts) if tok.lowercase else "\n".join(texts)))


def word_ids(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids of all texts one after the other, ids per text) of a word tokenizer with the regex
    segmenter, by one regex pass over the texts each ended by _END (which becomes a word of its
    own and marks where a text's words end). None for another segmenter, or when a text holds
    _END itself."""
    from .tokenizers import UNK_ID

    if tok.segmenter != "regex" or _END in tok.stoi:
        return None
    if tok.lowercase:
        texts = [t.lower() for t in texts]
    joined = "".join((_END.join(texts), _END)) if texts else ""
    if joined.count(_END) != len(texts):
        return None
    words = _words(joined)
    ids_of = dict(tok.stoi)
    ids_of[_END] = -1
    arr = np.fromiter(map(ids_of.get, words, repeat(UNK_ID)), dtype=np.int64, count=len(words))
    ends = np.flatnonzero(arr < 0)  # one per text
    return arr[arr >= 0].astype(np.uint32), np.diff(ends, prepend=-1) - 1


def encode_run(tok, texts: list[str], bigram_buckets: int) -> dict | None:
    """{"ids", "lengths", "bigrams"} of `texts`, what `encode_with_bigrams(tok, text,
    bigram_buckets)` gives text by text, for the char tokenizer and the word tokenizer's regex
    segmenter; None for the others (jieba, BPE, ...: the caller encodes text by text)."""
    from .bigrams import char_bigrams_array, id_bigrams_array

    cps = None
    if getattr(tok, "trigram_buckets", 0) and bigram_buckets:
        return None  # packed trigrams: text by text (no numpy path for them yet)
    if tok.kind == "char":
        ids, lengths, cps = char_ids(tok, texts)
    elif tok.kind == "word":
        got = word_ids(tok, texts)
        if got is None:
            return None
        ids, lengths = got
    else:
        return None
    bigrams = None
    if bigram_buckets:
        first = np.zeros(len(ids), dtype=bool)
        first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
        if cps is not None and getattr(tok, "bigram_buckets", 0) == bigram_buckets:  # char bigrams
            bigrams = char_bigrams_array(cps, first, bigram_buckets)
        else:  # token-id bigrams
            bigrams = id_bigrams_array(ids, first, bigram_buckets)
        bigrams = bigrams.astype(np.uint32)  # as the plain path gives them (half the bytes back from a worker)
    return {"ids": ids, "lengths": lengths, "bigrams": bigrams}
