"""e5 in classification, offline and small: Unigram vocabulary pruning, XLM-R's padding id (1, with
<s> = 0) in the classifier, and the adaptive default's decision to train e5 beside today's choice.
The real model's parity is tests/interop/test_e5.py."""
from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from scratchformer.data.bert_tokenizer import XLMRTokenizer
from scratchformer.data.vocab_prune import prune_unigram
from scratchformer.errors import UserError
from scratchformer.models.bert import BertConfig
from scratchformer.models.classifier import ClassifierConfig, EncoderClassifier
from scratchformer.tasks.classify import auto, pipeline

VOCAB = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁ab", -1.0), ("▁a", -2.0), ("b", -3.0),
         ("▁", -3.0), ("a", -4.0), ("c", -5.0), ("▁abc", -0.5), ("ba", -6.0), ("▁b", -2.5), ("<mask>", 0.0)]


def tiny_xlmr() -> XLMRTokenizer:
    tok = Tokenizer(models.Unigram(VOCAB, unk_id=3))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return XLMRTokenizer(tok)


def test_pruning_keeps_specials_used_pieces_single_chars_and_resegments_unseen_text():
    full = tiny_xlmr()
    small, p = full.pruned(["ab ab"], margin=0)
    kept = [VOCAB[i][0] for i in p.kept]
    # specials keep ids 0-3; used "▁ab"; single characters of "a", "b", " " (▁a, b, ▁, a, ▁b); <mask> last
    assert kept == ["<s>", "<pad>", "</s>", "<unk>", "▁ab", "▁a", "b", "▁", "a", "▁b", "<mask>"]
    assert (p.used, p.singles, p.margin) == (1, 5, 0)
    assert small.encode("ab") == [0, 4, 2]  # ids renumbered, <s>/</s> still 0 and 2
    pieces = lambda t, text: [t.id_to_token(i) for i in t.encode(text, add_special_tokens=False)]  # noqa: E731
    assert pieces(small, "abc ba") == ["▁ab", "<unk>", "▁b", "a"]  # "▁abc" dropped: the best kept split
    assert pieces(full, "abc ba") == ["▁abc", "▁b", "a"]
    assert small.mask_id == 10 and small.pad_id == 1
    with_margin, q = full.pruned(["ab ab"], margin=5)
    margin_vocab = [piece for piece, _ in json.loads(q.tokenizer_json)["model"]["vocab"]]
    assert q.margin == 1 and "ba" in margin_vocab and "c" not in margin_vocab  # only a/b-spelt extras
    assert with_margin.unk_rate(["abc"]) > 0 and with_margin.unk_rate(["ab ba"]) == 0


def test_pruning_refuses_wordpiece_and_negative_margin():
    wp = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(UserError, match="needs a Unigram"):
        prune_unigram(wp.to_str(), lambda ts: [[] for _ in ts], ["a"])
    with pytest.raises(UserError, match="vocab_margin must be >= 0"):
        prune_unigram(tiny_xlmr().hf.to_str(), lambda ts: [[] for _ in ts], ["a"], margin=-1)


def test_xlmr_classifier_masks_pad_1_not_bos_0():
    """<s> is id 0 in XLM-R: a classifier masking id 0 would drop it and pool the padding (id 1)."""
    torch.manual_seed(0)
    bert = BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=34, pad_token_id=1, model_type="xlm-roberta", add_pooler=False,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = EncoderClassifier(ClassifierConfig(vocab_size=20, n_classes=3, bert=bert, init="e5")).eval()
    assert model.cfg.pad_id == 1 and bert.position_offset == 2 and bert.max_positions == 32
    long, short = [0, 5, 6, 7, 2], [0, 8, 2]
    batch = torch.tensor([long, short + [1, 1]])
    with torch.no_grad():
        together = model(batch)
        alone = torch.cat([model(torch.tensor([long])), model(torch.tensor([short]))])
    assert torch.allclose(together, alone, atol=1e-6)


def test_e5_decision_says_why_and_what_budget_lets_it_compete():
    lines: list[str] = []
    slow = auto.E5Estimate(minutes=41.0, gflops=20.0)
    assert auto.e5_decision(["新闻"] * 10, 2, 8.0, lines.append, slow) is None
    assert lines[-1] == ("adaptive default: e5 not considered: fine-tuning it needs ~41 min here (20 GFLOP/s "
                         "measured), more than 50% of the 8-min budget; --time-budget 82 lets it compete "
                         "(today's choice stands)")
    fast = auto.E5Estimate(minutes=3.0, gflops=300.0)
    assert auto.e5_decision(["新闻"] * 10, 2, 8.0, lines.append, fast) is fast
    assert lines[-1].startswith("adaptive default: e5 fits (3.0 min estimated of 8)")
    assert auto.e5_decision(["x"], 1, None, lines.append) is None and "no time budget" in lines[-1]
    assert auto.e5_decision(["新闻"] * 10, 2, 8.0, lines.append, fast, n_valid=24) is None
    assert lines[-1] == ("adaptive default: e5 not considered: 24 valid texts cannot tell two models apart "
                         "(it needs at least 200; today's choice stands)")
    assert auto.e5_decision(["新闻"] * 10, 2, 8.0, lines.append, fast, n_valid=200) is fast


def test_e5_estimate_is_six_flops_per_parameter_token_plus_evaluation():
    texts = ["一二三四五六七八九十"] * 100  # 10 CJK characters: 8 + 6 tokens each
    est = auto.estimate_e5(texts, n_eval=50, gflops=100.0)
    flops = 21.3e6 * 14 * (6 * 100 + 2 * 50)
    assert est.minutes == pytest.approx(1.5 * flops / 100e9 / 60)


@pytest.mark.parametrize("e5_better", [True, False])
def test_train_with_candidate_keeps_the_better_on_valid(tmp_path, monkeypatch, e5_better):
    def fake_train(recipe, out_dir, log=print, baseline=False, started=None, **kw):
        out_dir.mkdir(parents=True, exist_ok=True)
        who = "e5" if recipe.model.init == "e5" else "default"
        (out_dir / "model.safetensors").write_text(who)
        return {"train": {"best_metric": {"e5": 0.9 if e5_better else 0.8, "default": 0.85}[who]}}

    monkeypatch.setattr(pipeline, "train_classifier", fake_train)
    base = auto.auto_recipe(["新闻标题"] * 50, time_budget=20.0)
    cand = auto.e5_recipe(base, 8.0)
    assert cand.model.init == "e5" and cand.time_budget == 8.0 and cand.ensemble == 1 and cand.train.epochs == auto.E5_MAX_EPOCHS
    lines: list[str] = []
    res = pipeline.train_with_candidate(base, cand, tmp_path / "run", lines.append, baseline=False)
    kept = (tmp_path / "run" / "model.safetensors").read_text()
    if e5_better:
        assert kept == "e5" and (tmp_path / "run" / "default" / "model.safetensors").read_text() == "default"
        assert not (tmp_path / "run" / "e5").exists() and res["candidate"]["chosen"]
        assert lines[-1].startswith("adaptive default: e5 chosen: valid 0.9000 against 0.8500")
    else:
        assert kept == "default" and (tmp_path / "run" / "e5" / "model.safetensors").read_text() == "e5"
        assert lines[-1].startswith("adaptive default: today's choice stands (valid 0.8500 against e5's 0.8000)")


def test_layer_lr_decay_gives_each_block_its_rate_down_to_the_embeddings():
    """Top block at encoder_lr_scale, each block below at decay times the one above, embeddings at
    decay ** L; the head at 1. The optimizer's groups then carry lr * that."""
    from scratchformer.train import optim
    bert = BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=34, pad_token_id=1, model_type="xlm-roberta", add_pooler=False)
    model = EncoderClassifier(ClassifierConfig(vocab_size=20, n_classes=3, bert=bert, init="e5", layer_lr_decay=0.5))
    model.set_encoder_lr_scale(0.2, 0.5)
    scales = {name: p.lr_scale for name, p in model.named_parameters() if hasattr(p, "lr_scale")}
    expected = {"bert.encoder.layers.2.": 0.2, "bert.encoder.layers.1.": 0.1, "bert.encoder.layers.0.": 0.05,
                "bert.embeddings.": 0.025}
    for name, p in model.named_parameters():
        want = next((v for k, v in expected.items() if name.startswith(k)), None)
        if name.startswith("head."):
            assert not hasattr(p, "lr_scale")
        else:
            assert want is not None and abs(scales[name] - want) < 1e-12, name
    lr_of = {id(p): g["lr_scale"] for g in optim.param_groups(model, 0.01) for p in g["params"]}
    assert sorted({round(v, 6) for v in lr_of.values()}) == [0.025, 0.05, 0.1, 0.2, 1.0]
    with pytest.raises(UserError, match="layer_lr_decay scales the layers of a pretrained backbone"):
        ClassifierConfig(vocab_size=20, n_classes=3, layer_lr_decay=0.8)
    with pytest.raises(UserError, match="layer_lr_decay must be in"):
        ClassifierConfig(vocab_size=20, n_classes=3, init="e5", layer_lr_decay=1.5)
