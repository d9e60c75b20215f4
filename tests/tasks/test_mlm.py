"""MLM pretraining: masking statistics, bigram hiding, and pretrain -> `--init` weight transfer."""
import json
import random

import pytest
import torch
from safetensors.torch import load_file

from scratchformer.cli import main
from scratchformer.data.tokenizers import Tokenizer
from scratchformer.models.classifier import EncoderClassifier
from scratchformer.models.mlm import IGNORE, MaskedLM, MLMConfig, hide_bigrams, mask_tokens
from scratchformer.nn import TransformerConfig
from scratchformer.tasks import classify as classify_mod
from scratchformer.tasks.mlm import MLMRecipe, pretraining_texts

V, MASK = 1000, 1000  # tokenizer vocabulary; the mask token is the extra id


def _ids(B=1000, T=250, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    ids[:, 0] = 4  # <cls>
    ids[:, 1] = 2  # <bos>
    lengths = torch.randint(10, T, (B,), generator=g)
    ids[torch.arange(T)[None, :] >= lengths[:, None]] = 0  # padding
    return ids


@pytest.mark.parametrize("span", [1, 2])
def test_masking_proportions_80_10_10_and_specials_never_chosen(span):
    ids = _ids()
    inputs, labels = mask_tokens(ids, MASK, V, 5, 0.15, span, torch.Generator().manual_seed(1))
    chosen, real = labels != IGNORE, ids >= 5
    assert not chosen[~real].any()  # pad, <cls>, <bos> never chosen ...
    assert torch.equal(inputs[~real], ids[~real])  # ... nor changed
    assert torch.equal(inputs[~chosen], ids[~chosen])  # nothing else changes either
    assert torch.equal(labels[chosen], ids[chosen])
    n = int(chosen.sum())
    assert n > 15_000
    frac = n / int(real.sum())
    assert abs(frac - 0.15) < (0.005 if span == 1 else 0.012)  # runs overlap a little at span 2
    masked = (inputs[chosen] == MASK).float().mean().item()
    random_ = ((inputs[chosen] != MASK) & (inputs[chosen] != ids[chosen])).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    tol = 0.01 if span == 1 else 0.015
    assert abs(masked - 0.8) < tol and abs(random_ - 0.1) < tol and abs(kept - 0.1) < tol
    assert int(inputs[chosen & (inputs != MASK)].min()) >= 5  # random replacements are real tokens
    assert int(inputs.max()) <= MASK


def test_whole_bigram_masking_chooses_runs_of_two():
    ids = torch.arange(5, 5 + 200).repeat(50, 1)  # all real, no specials
    _, labels = mask_tokens(ids, 999, 999, 5, 0.15, 2, torch.Generator().manual_seed(0))
    chosen = labels != IGNORE
    # a run of 2 starting anywhere but the last column: isolated chosen tokens only at the edges
    left = torch.zeros_like(chosen)
    left[:, 1:] = chosen[:, :-1]
    right = torch.zeros_like(chosen)
    right[:, :-1] = chosen[:, 1:]
    isolated = chosen & ~left & ~right
    assert int(isolated[:, :-1].sum()) == 0
    # and masking is seeded: the same generator seed gives the same masks
    _, again = mask_tokens(ids, 999, 999, 5, 0.15, 2, torch.Generator().manual_seed(0))
    assert torch.equal(labels, again)


def test_bigrams_that_contain_a_chosen_token_are_hidden():
    labels = torch.full((1, 6), IGNORE)
    labels[0, 2] = 7
    out = hide_bigrams(torch.arange(1, 7)[None], labels)
    assert out.tolist() == [[1, 2, 0, 0, 5, 6]]


def test_mlm_model_predicts_only_chosen_positions():
    cfg = MLMConfig(vocab_size=V + 1, mask_id=MASK, bigram_buckets=50,
                    encoder=TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1))
    model = MaskedLM(cfg)
    ids = _ids(4, 30)
    inputs, labels = mask_tokens(ids, MASK, V, generator=torch.Generator().manual_seed(0))
    logits, gold = model(inputs, labels, torch.randint(1, 50, ids.shape))
    assert logits.shape == (int((labels != IGNORE).sum()), V + 1) and torch.equal(gold, labels[labels != IGNORE])
    # the output layer is tied to the input embedding
    assert model.head.embedding[0] is model.embed.tokens
    assert not any(p is model.embed.tokens.weight for p in model.head.parameters())


TINY = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2",
        "--set", "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=1", "--set", "train.progress=false"]


def _write(d):
    rng = random.Random(0)
    rows, corpus = [], []
    for _ in range(200):
        lab = rng.choice(["pos", "neg"])
        words = "好棒赞" if lab == "pos" else "差烂糟"
        text = "".join(rng.choice(words + "电影真的") for _ in range(10))
        rows.append(f"{text}\t{lab}")
        corpus.append(text)
    (d / "train.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    (d / "corpus.txt").write_text("\n".join(corpus + ["影院里的新片"]) + "\n", encoding="utf-8")


def test_pretrain_then_init_classify_transfers_the_weights(tmp_path, monkeypatch, capsys):
    _write(tmp_path)
    mlm = tmp_path / "mlm"
    rc = main(["pretrain", "mlm", "--data", str(tmp_path / "corpus.txt"), "--out", str(mlm), *TINY,
               "--set", "model.bigram_buckets=97", "--set", "data.min_freq=1", "--set", "data.span=2",
               "--set", "train.max_steps=6", "--set", "train.eval_every=3", "--set", "data.valid_frac=0.1"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_dir"] == str(mlm) and 0 <= out["valid_accuracy"] <= 1
    recipe = MLMRecipe.load_json(mlm / "config.json")
    tok = Tokenizer.load(mlm / "tokenizer.json")
    assert recipe.task == "mlm" and recipe.model.mask_id == tok.vocab_size == recipe.model.vocab_size - 1
    pretrained = load_file(str(mlm / "model.safetensors"))

    seen = {}

    class Spy(classify_mod.pipeline.Trainer):  # record the classifier's weights before its first step
        def fit(self, resume=False):
            seen.update({k: v.detach().clone() for k, v in self.model.state_dict().items()})
            seen["lr_scales"] = sorted({g["lr_scale"] for g in self.optimizer.param_groups})
            return super().fit(resume)

    monkeypatch.setattr(classify_mod.pipeline, "Trainer", Spy)
    clf = tmp_path / "clf"
    rc = main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--init", str(mlm), "--out", str(clf),
               "--set", "train.epochs=1", "--set", "train.progress=false", "--set", "model.encoder_lr_scale=0.1",
               "--set", "model.encoder.dropout=0.3"])
    assert rc == 0
    backbone = [k for k in pretrained if k.startswith(("embed.", "encoder."))]
    assert backbone and all(torch.equal(seen[k], pretrained[k]) for k in backbone)
    assert seen["lr_scales"] == [0.1, 1.0]
    cfg = json.loads((clf / "config.json").read_text())["model"]
    assert cfg["init"] == str(mlm) and cfg["bigram_buckets"] == 97 and cfg["vocab_size"] == tok.vocab_size + 1
    assert cfg["encoder"]["d_model"] == 32 and cfg["encoder"]["dropout"] == 0.3  # architecture from the run, dropout ours
    assert Tokenizer.load(clf / "tokenizer.json").itos == tok.itos  # the pretraining vocabulary
    res = classify_mod.Classifier.load(clf).predict(["好电影"])
    assert res[0]["label"] in ("pos", "neg")


def test_pretraining_text_sources(tmp_path):
    (tmp_path / "a.txt").write_text("一\n\n  二  \n", encoding="utf-8")
    recipe = MLMRecipe.from_dict({"data": {"datasets": [str(tmp_path / "a.txt")]}})
    assert pretraining_texts(recipe.data, log=lambda m: None) == ["一", "二"]
    from scratchformer.errors import UserError

    with pytest.raises(UserError, match="does not exist"):
        pretraining_texts(MLMRecipe.from_dict({"data": {"datasets": [str(tmp_path / "b.txt")]}}).data)
    with pytest.raises(UserError, match="not a `pretrain mlm` run"):
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "config.json").write_text('{"task": "classify"}')
        classify_mod.load_init(str(tmp_path / "run"))


def test_classifier_from_mlm_config_has_matching_names():
    cfg = MLMConfig(vocab_size=21, mask_id=20, bigram_buckets=11,
                    encoder=TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=1))
    mlm = MaskedLM(cfg)
    from scratchformer.models.classifier import ClassifierConfig

    clf = EncoderClassifier(ClassifierConfig(vocab_size=21, bigram_buckets=11, encoder=cfg.encoder))
    ours = {k for k in mlm.state_dict() if not k.startswith("head.")}
    theirs = {k for k in clf.state_dict() if not k.startswith("head.")}
    assert ours == theirs
