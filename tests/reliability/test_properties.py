"""Property tests: any bytes into a reader or a tokenizer give a result or a one-line UserError,
never another exception (hypothesis; example counts kept small)."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scratchformer.data.readers import decode_utf8, read_labeled_file, read_parallel, read_text_file
from scratchformer.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, WordTokenizer
from scratchformer.errors import UserError

FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# pieces that matter to the parsers: separators, quotes, line ends, a BOM, header words, braces
PIECES = ["\t", ",", '"', "\n", "\r\n", "\r", " ", "\ufeff", "text", "label", "review", "pos",
          "neg", "好", "{", "}", ":", "[", "]", "null", "1", "\\", "\x00", "<eos>"]
texts = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=30).map("".join)
raw = st.one_of(texts.map(lambda s: s.encode("utf-8")), st.binary(max_size=60),
                st.tuples(texts, st.binary(min_size=1, max_size=3), texts).map(
                    lambda t: t[0].encode() + t[1] + t[2].encode()))


_DIR = tempfile.TemporaryDirectory(prefix="sf-prop-")  # removed when the tests end


def _file(data: bytes, suffix: str) -> Path:
    path = Path(_DIR.name) / f"data{suffix}"
    path.write_bytes(data)
    return path


def _one_line(call):
    """Run `call`; a UserError must be one line. Any other exception fails the test."""
    try:
        return call()
    except UserError as e:
        assert "\n" not in str(e) and str(e).strip(), repr(str(e))
        return None


@FEW
@given(data=raw, suffix=st.sampled_from([".tsv", ".csv", ".jsonl"]),
       cols=st.sampled_from([(None, None), (1, 0), ("text", "label"), (0, 5)]))
def test_labeled_reader_gives_pairs_or_one_line(data, suffix, cols):
    pairs = _one_line(lambda: read_labeled_file(_file(data, suffix), *cols))
    if pairs is not None:
        assert pairs and all(isinstance(t, str) and isinstance(lab, str) and t and lab for t, lab in pairs)
        # a header is never read as data: no text/label pair is the header's own names
        assert ("text", "label") not in pairs


@FEW
@given(data=raw)
def test_parallel_and_text_readers_give_results_or_one_line(data):
    pairs = _one_line(lambda: read_parallel(_file(data, ".tsv")))
    assert pairs is None or all(s and t for s, t in pairs)
    text = _one_line(lambda: read_text_file(_file(data, ".txt")))
    assert text is None or text.strip()


@FEW
@given(prefix=texts, bad=st.sampled_from([b"\xff", b"\xc3", b"\xe4\xb8", b"\x80", b"\xed\xa0\x80"]), suffix=texts)
def test_utf8_errors_point_at_the_first_bad_byte(prefix, bad, suffix):
    data = prefix.encode() + bad + suffix.encode()
    with pytest.raises(UserError) as e:
        decode_utf8(data, "f.txt")
    line = data[: len(prefix.encode())].count(b"\n") + 1
    start = len(prefix.encode()) - (3 if prefix.encode().startswith(b"\xef\xbb\xbf") else 0)
    msg = str(e.value)
    assert msg.startswith(f"f.txt:{line}: not valid UTF-8 at byte offset ") and "\n" not in msg
    assert int(msg.split("byte offset ")[1].split(" ")[0]) in (start, len(prefix.encode()))


CORPUS = ["the cat sat on the mat.", "好 天气, 不错!", "a b c <unk> d\te", "Hello, World"]


@pytest.fixture(scope="module")
def tokenizers():
    return {"char": CharTokenizer.train(CORPUS), "word": WordTokenizer.train(CORPUS),
            "bpe": BPETokenizer.train(CORPUS * 5, vocab_size=300, min_frequency=1)}


@FEW
@given(text=texts, kind=st.sampled_from(["char", "word", "bpe"]))
def test_tokenizers_encode_and_decode_any_text(tokenizers, text, kind):
    tok = tokenizers[kind]
    ids = tok.encode(text, add_bos=True, add_eos=True)
    assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
    out = tok.decode(ids)
    assert isinstance(out, str)
    if kind == "bpe":  # byte-level BPE: lossless for any text (the module's claim)
        assert out == text


@FEW
@given(data=st.data(), kind=st.sampled_from(["char", "word", "bpe"]))
def test_decoding_any_ids_of_the_vocabulary_is_a_string(tokenizers, data, kind):
    tok = tokenizers[kind]
    ids = data.draw(st.lists(st.integers(min_value=0, max_value=tok.vocab_size - 1), max_size=20))
    assert isinstance(tok.decode(ids), str)


@FEW
@given(ids=st.lists(st.integers(min_value=-5, max_value=400), max_size=20), kind=st.sampled_from(["char", "word"]))
def test_decoding_ids_outside_the_vocabulary_is_one_line(tokenizers, ids, kind):
    out = _one_line(lambda: tokenizers[kind].decode(ids))
    assert out is None or isinstance(out, str)


def _mutations(good: str):
    return st.one_of(
        st.integers(0, len(good)).map(lambda n: good[:n].encode()),  # truncated
        st.tuples(st.integers(0, len(good)), st.binary(max_size=4)).map(
            lambda t: good[: t[0]].encode() + t[1] + good[t[0]:].encode()),  # bytes inserted
        st.sampled_from(['{"type": "char"}', '{"type": "bpe", "hf": "{}"}', "[]", "null",
                         '{"type": "word", "tokens": 5}']).map(str.encode),
    )


@FEW
@given(data=st.data())
def test_loading_a_damaged_tokenizer_file_is_a_tokenizer_or_one_line(tokenizers, data):
    kind = data.draw(st.sampled_from(["char", "word", "bpe"]))
    path = _file(b"", ".json")
    tokenizers[kind].save(path)
    path.write_bytes(data.draw(_mutations(path.read_text(encoding="utf-8"))))
    tok = _one_line(lambda: Tokenizer.load(path))
    assert tok is None or isinstance(tok, Tokenizer)


def test_a_tokenizer_file_round_trips(tokenizers, tmp_path):
    for kind, tok in tokenizers.items():
        tok.save(tmp_path / f"{kind}.json")
        back = Tokenizer.load(tmp_path / f"{kind}.json")
        assert back.encode("the cat, 好!") == tok.encode("the cat, 好!")
        assert json.loads((tmp_path / f"{kind}.json").read_text())["type"] == kind


def test_utf8_error_after_a_bom_names_the_real_byte_and_line():
    # found by the property above: "utf-8-sig" counts offsets from after the BOM
    with pytest.raises(UserError) as e:
        decode_utf8(b"\xef\xbb\xbf\n\xff", "f.txt")
    assert str(e.value) == "f.txt:2: not valid UTF-8 at byte offset 4 (byte 0xff); re-save the file as UTF-8"
    assert decode_utf8(b"\xef\xbb\xbfok\r\n", "f.txt") == "ok\n"
