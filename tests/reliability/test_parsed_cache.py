"""A parsed data-set copy under the cache that is valid JSON but not the shape this version
writes (edited by hand, or another version's) is rebuilt from the verified archive, with one
line that names the file, instead of a traceback deep inside training."""
from __future__ import annotations

import json

import pytest

from scratchformer.data import datasets

GOOD = {"thucnews": [["央行降准", "finance"], ["火箭队获胜", "sports"]],
        "hsk-zh-en": {"pairs": [["你好", "hello"]], "dropped_placeholders": 0, "records": 1},
        "inews": {s: [["t"], ["c"], [0]] for s in ("train", "dev", "test")}}
BAD = [("thucnews", {"rows": 1}), ("thucnews", [["only the text"]]), ("thucnews", [[1, "finance"]]),
       ("hsk-zh-en", {"pairs": "你好"}), ("inews", {"train": [["t"], ["c"], [7]]}),
       ("inews", {s: [["t"], ["c"], ["0"]] for s in ("train", "dev", "test")})]


@pytest.mark.parametrize("key, planted", BAD, ids=[f"{k}-{i}" for i, (k, _) in enumerate(BAD)])
def test_a_cache_of_the_wrong_shape_is_rebuilt(key, planted, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path))
    path = datasets.parsed_cache_path(key)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(planted))
    assert datasets._cached_json(key, lambda: GOOD[key]) == GOOD[key]
    assert json.loads(path.read_text()) == GOOD[key]
    assert capsys.readouterr().err == (f"{path}: the parsed copy is not in the expected shape; "
                                       "rebuilt from the verified archive\n")


def test_a_cache_of_the_right_shape_is_used_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path))
    for key, good in GOOD.items():
        path = datasets.parsed_cache_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(good))
        assert datasets._cached_json(key, lambda: pytest.fail("rebuilt a good copy")) == good
