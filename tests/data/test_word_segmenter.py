"""The `word` tokenizer's segmenters: jieba cuts Chinese into words, regex stays for
alphabetic text, the choice is saved, and files written before segmenters still load."""
import json

import pytest

from scratchformer.data.tokenizers import Tokenizer, WordTokenizer, build_tokenizer
from scratchformer.errors import UserError

ZH = ["我爱北京天安门", "央行宣布下调存款准备金率", "北京今天天气很好", "我爱学习"]


def test_chinese_sentence_becomes_dictionary_words():
    tok = WordTokenizer.train(ZH)
    assert tok.segmenter == "jieba"
    assert tok._split("我爱北京天安门") == ["我", "爱", "北京", "天安门"]
    ids = tok.encode("我爱北京天安门")
    assert len(ids) == 4 and 1 not in ids  # four known words, no <unk>
    assert tok.decode(ids) == "我 爱 北京 天安门"


def test_latin_pieces_in_chinese_text_split_like_the_regex():
    tok = WordTokenizer.train(ZH)
    assert tok._split("央行下调 3.5% rate, OK") == ["央行", "下调", "3", ".", "5", "%", "rate", ",", "OK"]


def test_alphabetic_text_keeps_the_regex_split():
    tok = build_tokenizer("word", ["The cat sat.", "the cat ran!"])
    assert tok.segmenter == "regex"
    assert tok._split("Hi, you.") == ["Hi", ",", "you", "."]
    with pytest.raises(UserError, match="segmenter 'spaces' is unknown"):
        WordTokenizer.train(["a b"], segmenter="spaces")


def test_segmenter_round_trips_through_the_file(tmp_path):
    tok = WordTokenizer.train(ZH, lowercase=True)
    tok.save(tmp_path / "tok.json")
    assert json.loads((tmp_path / "tok.json").read_text(encoding="utf-8"))["segmenter"] == "jieba"
    back = Tokenizer.load(tmp_path / "tok.json")
    assert isinstance(back, WordTokenizer) and back.segmenter == "jieba" and back.lowercase
    assert back.encode("我爱北京天安门") == tok.encode("我爱北京天安门")


def test_a_file_from_before_segmenters_loads_as_regex(tmp_path):
    old = {"type": "word", "format_version": 1, "lowercase": False,
           "vocab": ["<pad>", "<unk>", "<bos>", "<eos>", "<cls>", "cat", "the", "."]}
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    tok = Tokenizer.load(tmp_path / "old.json")
    assert tok.segmenter == "regex"
    assert tok.encode("the cat.") == [6, 5, 7]
    assert tok.encode("我爱北京") == [1]  # as before: one regex "word", unknown


def test_the_ascii_word_pattern_matches_as_the_word_pattern_on_ascii_text():
    """segment.ASCII_WORD_PATTERN (prepared data's faster pattern for ASCII runs) finds exactly what
    WORD_PATTERN finds in any ASCII string: every character alone, in pairs, and random strings."""
    import random

    from scratchformer.data.segment import ASCII_WORD_PATTERN, WORD_PATTERN

    ascii_chars = [chr(c) for c in range(128)]
    rng = random.Random(0)
    cases = ascii_chars + [a + b for a in ascii_chars for b in ascii_chars]
    cases += ["".join(rng.choice(ascii_chars) for _ in range(rng.randint(0, 40))) for _ in range(2000)]
    for s in cases:
        assert ASCII_WORD_PATTERN.findall(s) == WORD_PATTERN.findall(s), repr(s)
