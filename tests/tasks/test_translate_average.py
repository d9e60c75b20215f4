"""Checkpoint averaging in translation: the `average_last` snapshots are the last K optimizer steps,
`average_every` apart (default 1% of the run), ending at the run's last step; the average is the
mean of exactly those weights; a resumed run keeps the snapshots taken before the interruption;
finalize keeps the average only when it wins on validation BLEU (and logs both)."""
from __future__ import annotations

import json
import random

import pytest
import torch

from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.translate import TranslateRecipe, TranslationTask, average_checkpoints, snapshot_files
from scratchformer.tasks.translate import pipeline, task as task_module
from scratchformer.errors import UserError


def _model():
    torch.manual_seed(0)
    tc = TransformerConfig(d_model=8, n_heads=2, d_ff=16, n_layers=1, dropout=0.0)
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=11, transformer=tc))


def _steps(tmp_path, total, recipe, max_minutes=False):
    """Drive `after_step` through a run of `total` steps where every weight equals the step number."""
    model = _model()
    recipe = recipe.replace(train=recipe.train.replace(max_minutes=5.0 if max_minutes else None))
    t = TranslationTask(model, recipe, None, None)
    t.snapshot_dir = tmp_path / "snapshots"
    with torch.no_grad():
        for step in range(1, total + 1):
            for p in model.parameters():
                p.fill_(float(step))
            t.after_step(step, None if max_minutes else total)
    return model, [int(p.stem.split("-")[1]) for p in snapshot_files(t.snapshot_dir)]


def test_snapshots_are_the_last_k_closely_spaced_steps_and_average_to_their_mean(tmp_path):
    model, steps = _steps(tmp_path, 1000, TranslateRecipe(average_last=5))
    assert steps == [960, 970, 980, 990, 1000]  # every 1% of 1,000 steps, ending at the last
    average_checkpoints(model, snapshot_files(tmp_path / "snapshots"))
    assert all(torch.equal(p, torch.full_like(p, 980.0)) for p in model.parameters())  # mean(960..1000)
    _, steps = _steps(tmp_path / "b", 37, TranslateRecipe(average_last=3, average_every=4))
    assert steps == [29, 33, 37]
    _, steps = _steps(tmp_path / "c", 130, TranslateRecipe(average_last=2), max_minutes=True)
    assert steps == [50, 100]  # time-bounded: rolling, every 50 steps
    _, steps = _steps(tmp_path / "d", 100, TranslateRecipe(average_last=1))
    assert steps == []  # averaging off
    with pytest.raises(UserError, match="average_every must be a whole number of steps >= 1"):
        TranslateRecipe(average_every=0)


WORDS = "ab cd ef gh ij kl".split()


def _pairs(n, seed):
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 4))) for _ in range(n)]
    return [(s, s.upper()) for s in src]


def test_resume_keeps_the_snapshots_and_finalize_logs_both_candidates(tmp_path, monkeypatch):
    for name, n, seed in (("train", 120, 0), ("valid", 10, 1)):
        (tmp_path / f"{name}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in _pairs(n, seed)))
    recipe = TranslateRecipe.from_dict({
        "data": {"dataset": str(tmp_path / "train.tsv"), "valid_file": str(tmp_path / "valid.tsv"),
                 "src_tokenizer": "word", "tgt_tokenizer": "word", "max_tokens": 200},
        "model": {"transformer": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1, "dropout": 0.0}},
        "train": {"max_steps": 20, "save_every": 6, "eval_every": 10, "lr": 3e-3, "warmup_steps": 5,
                  "progress": False},
        "average_last": 3, "average_every": 2, "decode": {"beam": 1}})
    out = tmp_path / "run"
    original = task_module.TranslationTask.after_step

    def crash_at_19(self, step, total):
        original(self, step, total)
        if step == 19:
            raise KeyboardInterrupt  # killed after step 19; the checkpoint is step 18's

    monkeypatch.setattr(task_module.TranslationTask, "after_step", crash_at_19)
    with pytest.raises(KeyboardInterrupt):
        pipeline.train_translator(recipe, out, log=lambda m: None)
    snaps = {int(p.stem.split("-")[1]): p.read_bytes() for p in snapshot_files(out / "snapshots")}
    assert sorted(snaps) == [16, 18]  # step 20's is still to come
    monkeypatch.setattr(task_module.TranslationTask, "after_step", original)
    lines: list[str] = []
    result = pipeline.train_translator(recipe, out, resume=True, log=lines.append)
    after = {int(p.stem.split("-")[1]): p.read_bytes() for p in snapshot_files(out / "snapshots")}
    assert sorted(after) == [16, 18, 20] and after[16] == snaps[16] and after[18] == snaps[18]
    assert "averaging 3 snapshots (steps 16, 18, 20)" in lines
    logged = [m for m in lines if m.startswith("valid (10 sentences, greedy)")]
    assert len(logged) == 2 and "model.safetensors" in logged[0] and "averaged.safetensors" in logged[1]
    final = json.loads((out / "final.json").read_text())
    scores = final["valid"]
    assert final["weights"] == max(scores, key=lambda k: scores[k]["bleu"]) == result["final"]["weights"]
    assert final["averaged"] == ["step-00000016.safetensors", "step-00000018.safetensors", "step-00000020.safetensors"]
