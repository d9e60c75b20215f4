"""Tests for scratchformer.data.tokenizers: fixed specials, round trips, <unk>, bigrams, I/O."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scratchformer.data.tokenizers import (
    BOS_ID, CLS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, BPETokenizer, CharTokenizer,
    Tokenizer, WordPieceTokenizer, WordTokenizer, auto_kind, build_tokenizer)

ZH = ["今天天气很好，我们去公园散步。", "北京的秋天天气很好。", "我们明天去北京。"]
EN = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you doing today?",
    "It's a truth universally acknowledged: models need data (lots of it).",
    "Prices rose 3.5% in 2023, analysts said; \"unexpected\" was the word.",
    "She said -- quietly -- that #hashtags and e-mail@example.com aren't words.",
]
KINDS = {
    "char": {},
    "word": {},
    "bpe": {"vocab_size": 400, "min_frequency": 1},
    "wordpiece": {"vocab_size": 400, "min_frequency": 1},
}
SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(scope="module", params=sorted(KINDS))
def trained(request):
    kind = request.param
    return build_tokenizer(kind, EN + ZH, **KINDS[kind])


def test_special_ids_are_fixed():
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID, CLS_ID) == (0, 1, 2, 3, 4)
    assert SPECIAL_TOKENS == ["<pad>", "<unk>", "<bos>", "<eos>", "<cls>"]


def test_specials_at_fixed_ids_in_every_kind(trained):
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert trained.token_to_id(tok) == i
        assert trained.id_to_token(i) == tok
    ids = trained.encode("hello", add_bos=True, add_eos=True, add_cls=True)
    assert ids[:2] == [CLS_ID, BOS_ID] and ids[-1] == EOS_ID
    assert trained.decode(ids) == trained.decode(ids[2:-1])


def test_empty_text_and_unknown_chars_never_fail(trained):
    assert trained.encode("") == []
    assert trained.encode("", add_bos=True, add_eos=True) == [BOS_ID, EOS_ID]
    ids = trained.encode("ж\u2603 𝔘")  # characters never seen in training
    assert ids and all(0 <= i < trained.vocab_size for i in ids)


def test_special_strings_in_text_are_plain_text(trained):
    ids = trained.encode("a <eos> b")
    assert EOS_ID not in ids and BOS_ID not in ids


def test_save_load_round_trip(trained, tmp_path):
    path = tmp_path / "tok.json"
    trained.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["type"] == trained.kind
    loaded = Tokenizer.load(path)
    assert type(loaded) is type(trained)
    assert loaded.vocab_size == trained.vocab_size
    for text in EN + ZH + ["unseen wörds ж"]:
        assert loaded.encode(text, add_bos=True) == trained.encode(text, add_bos=True)
    assert loaded.encode_batch(EN) == trained.encode_batch(EN)
    assert type(trained).load(path).vocab_size == trained.vocab_size


def test_load_rejects_unknown_type(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"type": "sentencepiece"}')
    with pytest.raises(ValueError, match="unknown tokenizer type"):
        Tokenizer.load(path)


def test_encode_batch_matches_encode(trained):
    batch = trained.encode_batch(EN + ["", "x"], add_eos=True)
    assert batch == [trained.encode(t, add_eos=True) for t in EN + ["", "x"]]


# ---- char --------------------------------------------------------------------------------
def test_char_round_trip_chinese():
    tok = CharTokenizer.train(ZH)
    for text in ZH:
        ids = tok.encode(text, add_bos=True, add_eos=True)
        assert len(ids) == len(text) + 2
        assert tok.decode(ids) == text
    assert tok.decode([BOS_ID, *tok.encode(ZH[0])], skip_special=False) == "<bos>" + ZH[0]
    assert tok.unk_rate(ZH) == 0.0


def test_char_min_freq_maps_rare_chars_to_unk():
    tok = CharTokenizer.train(ZH, min_freq=3)
    # Counts over ZH: 天×5, 。×3, 气 很 好 我 们 去 北 京 ×2, the rest ×1: only 天 and 。 stay.
    assert tok.itos == SPECIAL_TOKENS + ["天", "。"]
    ids = tok.encode(ZH[1])  # 北京的秋天天气很好。
    assert ids == [1, 1, 1, 1, 5, 5, 1, 1, 1, 6]
    assert ids.count(UNK_ID) == 7
    assert tok.decode(ids) == "<unk><unk><unk><unk>天天<unk><unk><unk>。"
    total = sum(len(t) for t in ZH)  # 15 + 10 + 8 = 33 characters
    assert total == 33
    assert tok.unk_rate(ZH) == pytest.approx((33 - 5 - 3) / 33)  # 25 of 33


def test_char_max_size_and_lowercase():
    tok = CharTokenizer.train(["AaBb", "aa"], lowercase=True, max_size=6)
    assert tok.itos == SPECIAL_TOKENS + ["a"]  # a×4 beats b×2; only one slot left
    assert tok.encode("AB") == [5, UNK_ID]


def test_char_bigrams_fixed_values_and_alignment():
    tok = CharTokenizer.train(["今天天气很好", "今天下雨"], bigram_buckets=1000)
    ids = tok.encode("今天好吗", add_bos=True, add_eos=True)
    bi = tok.encode_bigrams("今天好吗", add_bos=True, add_eos=True)
    assert len(bi) == len(ids)
    assert bi == [0, 117, 996, 716, 205, 0]  # crc32-based: identical on every machine
    assert all(0 <= b < 1000 for b in bi)
    assert tok.encode_bigrams("") == []
    assert tok.encode_bigrams("x", add_cls=True) == [0, tok.encode_bigrams("x")[0]]
    with pytest.raises(ValueError):
        CharTokenizer.train(["ab"]).encode_bigrams("ab")


def test_bigram_arrays_equal_the_per_text_hashes():
    """char_bigrams_array / id_bigrams_array (numpy, crc32 combined from its pieces, for prepared
    data) give the buckets char_bigrams / id_bigrams give text by text."""
    import random
    import zlib

    import numpy as np

    from scratchformer.data.bigrams import char_bigrams, char_bigrams_array, id_bigrams, id_bigrams_array

    rng = random.Random(0)
    chars = "ab的一é😀\u3000 x\x00\U0010ffff"
    texts = ["".join(rng.choice(chars) for _ in range(rng.randint(0, 12))) for _ in range(400)]
    cps = np.frombuffer("".join(texts).encode("utf-32-le"), np.uint32)
    lens = np.array([len(t) for t in texts])
    first = np.zeros(len(cps), bool)
    first[(np.cumsum(lens) - lens)[lens > 0]] = True
    ids = [[rng.choice([0, 1, 7, 99, 4096, 65535, 1_048_575]) for _ in range(rng.randint(0, 9))] for _ in range(300)]
    flat = np.array([i for x in ids for i in x], dtype=np.int64)
    n_ids = np.array([len(x) for x in ids])
    first_id = np.zeros(len(flat), bool)
    first_id[(np.cumsum(n_ids) - n_ids)[n_ids > 0]] = True
    for n in (2, 3, 64, 200000, 2**32, 2**33):
        assert char_bigrams_array(cps, first, n).tolist() == [b for t in texts for b in char_bigrams(t, n)]
        assert id_bigrams_array(flat, first_id, n).tolist() == [b for x in ids for b in id_bigrams(x, n)]
    assert zlib.crc32(b"") == 0  # what a text's first character pairs with


def test_char_bigrams_stable_across_processes(tmp_path):
    tok = CharTokenizer.train(ZH, bigram_buckets=5000)
    path = tmp_path / "char.json"
    tok.save(path)
    code = ("import sys; from scratchformer.data.tokenizers import Tokenizer; "
            f"print(Tokenizer.load(sys.argv[1]).encode_bigrams({ZH[0]!r}))")
    outs = set()
    for hash_seed in ("1", "2"):  # str hash() would differ between these two
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": SRC}
        res = subprocess.run([sys.executable, "-c", code, str(path)], env=env,
                             capture_output=True, text=True, check=True)
        outs.add(res.stdout.strip())
    assert outs == {str(tok.encode_bigrams(ZH[0]))}


# ---- word --------------------------------------------------------------------------------
def test_word_split_min_freq_max_size():
    tok = WordTokenizer.train(["The cat sat.", "the cat ran!", "A dog."], lowercase=True,
                              min_freq=2)
    assert tok.itos == SPECIAL_TOKENS + [".", "cat", "the"]
    assert tok.encode("The cat flew.") == [7, 6, UNK_ID, 5]
    assert tok.decode(tok.encode("the cat.")) == "the cat ."
    small = WordTokenizer.train(["b b b a a c"], max_size=7)
    assert small.itos == SPECIAL_TOKENS + ["b", "a"]


# ---- bpe / wordpiece -----------------------------------------------------------------------
def test_bpe_round_trips_english_exactly():
    tok = BPETokenizer.train(EN, vocab_size=400, min_frequency=1)
    extra = ["Unseen words: zebra-crossing, Ünïcödé & 中文!", "  two  spaces\nand a newline "]
    for text in EN + extra:
        ids = tok.encode(text)
        assert UNK_ID not in ids
        assert tok.decode(ids) == text
        assert tok.decode(tok.encode(text, add_bos=True, add_eos=True)) == text
    assert tok.unk_rate(extra) == 0.0
    assert len(tok.encode(EN[0])) < len(EN[0])  # merges were learned


def test_bpe_vocab_size_respected():
    tok = BPETokenizer.train(EN * 3, vocab_size=300, min_frequency=1)
    assert tok.vocab_size == 300


def test_wordpiece_round_trips_single_spaced_english():
    tok = WordPieceTokenizer.train(EN, vocab_size=400, min_frequency=1)
    for text in EN + ["The fox said: hello, dog!"]:
        assert tok.decode(tok.encode(text)) == text
    ids = tok.encode("fox ж")  # unseen character -> the whole word is one <unk>
    assert ids[-1] == UNK_ID and ids.count(UNK_ID) == 1
    assert tok.decode(ids) == "fox<unk>"  # the <unk> swallowed the word's leading space


# ---- choosing ------------------------------------------------------------------------------
def test_auto_kind_and_factory():
    assert auto_kind(ZH) == "char"
    assert auto_kind(EN) == "bpe"
    assert auto_kind(["abc 中"]) == "bpe"  # 1 of 4 non-space chars = 25% <= 30%
    assert auto_kind(["ab 中文"]) == "char"  # 2 of 4 = 50%
    assert isinstance(build_tokenizer("char", ZH, min_freq=3), CharTokenizer)
    with pytest.raises(ValueError, match="unknown tokenizer kind"):
        build_tokenizer("sentencepiece", EN)


def test_char_trigrams_packed_with_bigrams_fixed_values_and_round_trip(tmp_path):
    """With trigram_buckets each position's id is bigram + N * trigram (data.bigrams.pack_ngrams):
    the bigram part is exactly the bigram-only tokenizer's, the trigram part crc32 of the three
    characters, and both survive save/load."""
    import zlib

    from scratchformer.data.bigrams import char_trigrams
    from scratchformer.data.tokenizers import Tokenizer

    texts = ["今天天气很好", "今天下雨"]
    tok = CharTokenizer.train(texts, bigram_buckets=1000, trigram_buckets=500)
    packed = tok.encode_bigrams("今天好吗", add_bos=True, add_eos=True)
    assert packed == [0, 141117, 179996, 139716, 476205, 0]  # crc32-based: identical on every machine
    bi = CharTokenizer.train(texts, bigram_buckets=1000).encode_bigrams("今天好吗", add_bos=True, add_eos=True)
    assert [p % 1000 for p in packed] == bi
    tri = [p // 1000 for p in packed[1:-1]]
    assert tri == char_trigrams(list("今天好吗"), 500)
    assert tri[2] == 1 + zlib.crc32("今\x1f天\x1f好".encode()) % 499 and tri[0] == 1 + zlib.crc32("\x1f\x1f今".encode()) % 499
    assert all(1 <= t < 500 for t in tri)
    assert char_trigrams(list("ab"), 50) != char_trigrams(list("ba"), 50)
    tok.save(tmp_path / "t.json")
    assert Tokenizer.load(tmp_path / "t.json").encode_bigrams("今天好吗") == packed[1:-1]
    with pytest.raises(ValueError, match="trigram_buckets needs bigram_buckets"):
        CharTokenizer.train(texts, trigram_buckets=500)
