"""`train classify|lm --model FILE.py`: the learner's own network trained in our task (docs/your-model.md).

Numbers asserted: the run learns (toy accuracy, LM loss below the unigram level), the calling convention read
from behaviour is the file's own, a changed file is refused, the run works after the original file is gone."""
import hashlib
import json
import random
import shutil
from pathlib import Path

import pytest
import torch
from toy_data import headlines, write_tsv

from scratchformer.cli import main
from scratchformer.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "exercises" / "solutions" / "12_your_model.py"
GPT_SCRIPT = Path(__file__).parent / "fixtures" / "gpt_script.py"
QUIET = ["--set", "train.progress=false", "--no-baseline"]


def _classify(tmp, model, *extra, out="run"):
    write_tsv(tmp / "train.tsv", headlines(240, 0))
    write_tsv(tmp / "test.tsv", headlines(40, 1))
    return main(["train", "classify", "--data", str(tmp / "train.tsv"), "--test", str(tmp / "test.tsv"),
                 "--out", str(tmp / out), "--model", str(model), "--set", "train.epochs=3", "--set", "data.max_len=24",
                 "--set", "time_budget=null", *QUIET, *extra])


@pytest.fixture(scope="module")
def clf_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("yours_clf")
    copy = tmp / "my_encoder.py"
    shutil.copy(SOLUTION, copy)
    assert _classify(tmp, copy) == 0
    copy.unlink()  # everything after this reads the run's own copy
    return tmp / "run"


def test_the_solution_encoder_trains_and_the_run_keeps_its_source(clf_run, capsys):
    cfg = json.loads((clf_run / "config.json").read_text())["model"]
    assert cfg["kind"] == "yours" and cfg["yours"]["entry"] == "TransformerClassifier"
    saved = (clf_run / "your_model.py").read_bytes()
    assert hashlib.sha256(saved).hexdigest() == cfg["yours"]["sha256"] == hashlib.sha256(SOLUTION.read_bytes()).hexdigest()
    # its mask, (B, 1, 1, T) True = a real token, read from behaviour
    assert cfg["yours"]["call"]["mask"] == {"param": "mask", "shape": "B11T", "dtype": "bool", "true": "keep"}
    assert json.loads((clf_run / "test_metrics.json").read_text())["accuracy"] >= 0.85
    capsys.readouterr()
    assert main(["predict", str(clf_run), "球赛队胜负冠军", "股市涨跌银行利率"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("体育") and out[1].startswith("财经")


def test_evaluate_and_resume_without_the_original_file(clf_run, capsys):
    assert main(["evaluate", str(clf_run), "--no-baseline", "--json"]) == 0
    acc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"]
    assert acc == json.loads((clf_run / "test_metrics.json").read_text())["accuracy"]
    assert main(["train", "classify", "--resume", "--out", str(clf_run), "--set", "train.epochs=4", *QUIET]) == 0


def test_a_changed_copy_or_another_file_is_refused(clf_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(clf_run, run)
    other = tmp_path / "other.py"
    other.write_text(SOLUTION.read_text() + "\n# changed\n")
    assert main(["train", "classify", "--resume", "--out", str(run), "--model", str(other), *QUIET]) != 0
    assert "is not the file this run was trained with" in capsys.readouterr().err
    (run / "your_model.py").write_text(other.read_text())
    from scratchformer.tasks.classify import Classifier
    with pytest.raises(UserError, match="changed since this run was trained"):
        Classifier.load(run)


def test_a_named_bug_is_printed_first_and_strict_refuses(tmp_path, capsys):
    buggy = tmp_path / "no_scale.py"
    buggy.write_text(SOLUTION.read_text().replace(" / math.sqrt(query.size(-1))", ""))
    assert _classify(tmp_path, buggy, "--strict") != 0
    err = capsys.readouterr().err
    assert "check: missing-scale" in err and "--strict: `scratchformer check` names missing-scale in no_scale.py" in err
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_the_video_gpt_trains_as_an_lm_and_generates_without_its_file(tmp_path, capsys):
    rng = random.Random(0)
    words = ["abc", "bcd", "cab", "dab"]  # an order to learn: each word's letters follow each other
    text = "\n".join(" ".join(rng.choice(words) for _ in range(10)) for _ in range(300))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "input.txt").write_text(text)
    copy = tmp_path / "gpt.py"
    # it reads input.txt beside it (not there: its vocab_size is never set) and trains 3000 steps at module level
    shutil.copy(GPT_SCRIPT, copy)
    run = tmp_path / "lm"
    assert main(["train", "lm", "--data", str(tmp_path / "data" / "input.txt"), "--out", str(run), "--model", str(copy),
                 "--set", "data.context=48", "--set", "train.max_steps=80", "--set", "train.eval_every=80", "--set", "train.lr=3e-3",
                 "--set", "train.progress=false"]) == 0
    err = capsys.readouterr().err
    assert "block_size = 32 is raised to 48" in err
    copy.unlink()
    cfg = json.loads((run / "config.json").read_text())["model"]["yours"]
    assert cfg["overrides"]["vocab_size"] == json.loads((run / "config.json").read_text())["model"]["vocab_size"]
    loss = json.loads((run / "valid_metrics.json").read_text())["loss"]
    counts = torch.bincount(torch.tensor([ord(c) for c in text])).float()
    p = counts[counts > 0] / counts.sum()
    assert loss < float(-(p * p.log()).sum())  # below the unigram entropy: it learned the text's order
    from scratchformer.tasks.lm import LanguageModel
    lm = LanguageModel.load(run)
    a = lm.generate("ab", max_new_tokens=12, seed=0, temperature=0)
    b = lm.generate("ab", max_new_tokens=12, seed=0, temperature=0, use_cache=False)
    assert a == b and len(a) > 0


class _PadTrue(torch.nn.Module):
    """key_padding_mask convention: True = padding (no demo in a file: the forms are all tried)."""
    def __init__(self, vocab_size=50, num_classes=3, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, d)
        self.enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, 2, 32, 0.0, batch_first=True), 1,
                                               enable_nested_tensor=False)
        self.out = torch.nn.Linear(d, num_classes)

    def forward(self, x, src_key_padding_mask=None):
        h = self.enc(self.emb(x), src_key_padding_mask=src_key_padding_mask)
        keep = (~src_key_padding_mask).float().unsqueeze(-1) if src_key_padding_mask is not None else 1.0
        return self.out((h * keep).sum(1) / (keep.sum(1) if src_key_padding_mask is not None else h.shape[1]))


class _HFStyle(torch.nn.Module):
    """attention_mask 1 = a real token (long), additive inside; returns (logits, loss) with labels."""
    def __init__(self, vocab_size=50, num_labels=3, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab_size, d)
        self.q, self.k, self.v = (torch.nn.Linear(d, d) for _ in range(3))
        self.cls = torch.nn.Linear(d, num_labels)

    def forward(self, input_ids, attention_mask=None, labels=None):
        x = self.emb(input_ids)
        s = self.q(x) @ self.k(x).transpose(1, 2) / 4.0
        if attention_mask is not None:
            s = s + (1.0 - attention_mask[:, None, :].float()) * -1e4
        h = s.softmax(-1) @ self.v(x)
        logits = self.cls(h[:, 0])
        return (logits, torch.tensor(0.0)) if labels is not None else logits


@pytest.mark.parametrize("cls,expected", [
    (_PadTrue, {"param": "src_key_padding_mask", "shape": "BT", "dtype": "bool", "true": "pad"}),
    (_HFStyle, {"param": "attention_mask", "shape": "BT", "true": "keep"}),
])
def test_the_mask_convention_is_read_from_behaviour(cls, expected):
    from scratchformer.models.your_fit import find_call

    torch.manual_seed(0)
    net = cls().eval()
    params = [{"name": n, "required": p.default is p.empty, "kind": p.kind.name}
              for n, p in __import__("inspect").signature(net.forward).parameters.items()]
    call, notes = find_call(net, {"entry": cls.__name__, "forward": params}, False, 50, 0)
    assert {k: call["mask"][k] for k in expected} == expected, call
    assert notes and "read from how its output moves" in notes[0]


def test_a_file_that_imports_its_neighbours_is_refused(tmp_path, capsys):
    (tmp_path / "layers.py").write_text("import torch\n")
    f = tmp_path / "model.py"
    f.write_text("from layers import torch\nclass M(torch.nn.Module):\n    pass\n")
    assert _classify(tmp_path, f) != 0
    assert "imports layers from its own folder" in capsys.readouterr().err


def test_a_factory_function_builds_it_with_our_sizes(tmp_path):
    f = tmp_path / "factory.py"
    f.write_text(SOLUTION.read_text() + "\n\ndef build(vocab_size, n_classes):\n"
                 "    return TransformerClassifier(vocab_size, n_classes, d_model=32, n_heads=2, d_ff=64)\n")
    assert _classify(tmp_path, f"{f}:build") == 0
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())["model"]["yours"]
    assert cfg["entry"] == "build" and cfg["kwargs"]["vocab_size"] > 10 and cfg["kwargs"]["n_classes"] == 2


def test_attention_maps_are_read_from_what_their_model_computes():
    """The maps captured from softmax / scaled_dot_product_attention equal the ones their own code returns."""
    import importlib.util

    from scratchformer.models.your_attention import captured_attention

    spec = importlib.util.spec_from_file_location("solution12", SOLUTION)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    net = mod.TransformerClassifier(30, 3, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0).eval()
    ids = torch.randint(1, 30, (2, 7))
    ids[1, 5:] = 0
    theirs = []
    for layer in net.layers:  # their MultiHeadAttention returns (out, weights)
        layer.self_attn.register_forward_hook(lambda m, a, out: theirs.append(out[1]))
    with torch.no_grad(), captured_attention(2, 7) as maps:
        net(ids, mod.padding_mask(ids))
    assert len(maps) == 2 and all(m.shape == (2, 2, 7, 7) for m in maps)
    for got, want in zip(maps, theirs):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    # F.scaled_dot_product_attention: the probabilities recomputed from its inputs
    q, k, v = torch.randn(3, 2, 2, 7, 4).unbind(0)
    keep = torch.rand(2, 1, 1, 7) > 0.3
    keep[..., 0] = True
    with captured_attention(2, 7) as maps:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    want = (q @ k.transpose(-2, -1) / 2.0).masked_fill(~keep, float("-inf")).softmax(-1)
    torch.testing.assert_close(maps[0], want, atol=1e-6, rtol=0)


def test_doctor_works_on_a_run_of_your_model(clf_run, capsys):
    assert main(["doctor", str(clf_run), "--samples", "16"]) == 0
    out = capsys.readouterr().out
    assert "no attention on padding" in out  # measured on the maps read from their forward
    md = (clf_run / "doctor.md").read_text()
    assert "embedding rows not compared: the model is your own" in md


def test_yours_vs_ours_reports_paired_verdicts_and_a_picture(tmp_path, capsys):
    write_tsv(tmp_path / "train.tsv", headlines(300, 0))
    out = tmp_path / "exp"
    assert main(["experiment", "yours-vs-ours", "--model", str(SOLUTION), "--data", str(tmp_path / "train.tsv"),
                 "--quick", "--seeds", "2", "--set", "steps=12", "--size", "d_model=32", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "yours is within 2 points of ours (test accuracy)" in report and "smoke run (--quick)" in report
    assert "t over seeds of the paired difference, n = 2" in report
    pairs = (out / "pairs.csv").read_text().splitlines()
    assert len(pairs) == 3 and pairs[0].startswith("seed,")
    assert (out / "curves.png").stat().st_size > 10_000
    for seed in (0, 1):  # the same recipe but the network; each run its own process
        ours = json.loads((out / "runs" / f"ours-s{seed}.json").read_text())
        cell = json.loads((out / "runs" / f"yours-s{seed}" / "cell.json").read_text())
        assert ours["train"]["max_steps"] == cell["max_steps"] == 12 and cell["steps"] == 12
        assert cell["peak_mib"] > 50 and cell["params"] > 0
    yours_cfg = json.loads((out / "runs" / "yours-s0" / "config.json").read_text())["model"]["yours"]
    assert yours_cfg["kwargs"]["d_model"] == 32  # --size reached the learner's constructor
    # another budget into the same folder is refused, nothing retrained
    assert main(["experiment", "yours-vs-ours", "--model", str(SOLUTION), "--data", str(tmp_path / "train.tsv"),
                 "--quick", "--seeds", "2", "--set", "steps=13", "--out", str(out)]) != 0
    assert "was trained with another budget" in capsys.readouterr().err
