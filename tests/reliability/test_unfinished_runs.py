"""An unfinished run or ensemble is refused by every way into it (predict, evaluate, generate,
the Python loaders, `require_finished` for serve) with one line saying that `--resume` finishes
it; after the resume it works. The runs are really interrupted (KeyboardInterrupt, what the CLI
turns SIGINT into) in the middle of training."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.tasks.runs import require_finished
from scratchformer.train import trainer as trainer_mod

TINY = {"data": {"tokenizer": "word", "batch_size": 16},
        "model": {"encoder": {"d_model": 8, "n_heads": 2, "d_ff": 16, "n_layers": 1}},
        "train": {"max_steps": 4, "eval_every": 2, "save_every": 1, "log_every": 1, "progress": False}}
LM = ["--set", "model.encoder.d_model=8", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=16",
      "--set", "model.encoder.n_layers=1", "--set", "data.context=8", "--set", "train.max_steps=4",
      "--set", "train.save_every=1", "--set", "train.eval_every=2", "--set", "train.progress=false"]


def _interrupt_at(monkeypatch, where: str, step: int) -> None:
    """The run whose folder is named `where` is interrupted before its optimizer step `step`."""
    real = trainer_mod.Trainer._train_step

    def step_or_stop(self, micro):
        if self.run_dir.name == where and self.state.step == step:
            raise KeyboardInterrupt
        return real(self, micro)

    monkeypatch.setattr(trainer_mod.Trainer, "_train_step", step_or_stop)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("unfinished")
    rng = random.Random(0)
    rows = ["text\tlabel"] + [" ".join(rng.choice(["good", "bad", "the", "film"]) for _ in range(5))
                              + f"\t{rng.choice(['pos', 'neg'])}" for _ in range(80)]
    (d / "cls.tsv").write_text("\n".join(rows) + "\n")
    (d / "text.txt").write_text("\n".join(" ".join(rng.choice(["to", "be", "or", "not"]) for _ in range(8))
                                          for _ in range(100)))
    (d / "base.json").write_text(json.dumps({**TINY, "ensemble": 2}))
    mp = pytest.MonkeyPatch()
    _interrupt_at(mp, "member1", 2)  # the last member, a third of the way in
    assert main(["train", "classify", "--config", str(d / "base.json"), "--data", str(d / "cls.tsv"),
                 "--no-baseline", "--out", str(d / "ens")]) == 130
    _interrupt_at(mp, "lm", 2)
    assert main(["train", "lm", "--data", str(d / "text.txt"), *LM, "--out", str(d / "lm")]) == 130
    mp.undo()
    return d


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_the_killed_ensemble_is_what_the_fault_leaves(runs):
    ens = runs / "ens"
    assert len(json.loads((ens / "members.json").read_text())) == 1
    assert (ens / "member1" / "model.safetensors").exists()  # a half-trained member a loader would take
    assert json.loads((ens / "member1" / "train_status.json").read_text()) == {"finished": False, "step": 0}
    assert json.loads((ens / "member0" / "train_status.json").read_text())["finished"] is True


@pytest.mark.parametrize("argv", [["predict", "{RUN}", "good film"], ["evaluate", "{RUN}"],
                                  ["attention", "{RUN}", "good film", "--no-png"], ["doctor", "{RUN}"],
                                  ["blend", "{RUN}"]])
def test_an_unfinished_ensemble_is_refused_and_nothing_changes(runs, tmp_path, capsys, argv):
    run = tmp_path / "ens"
    shutil.copytree(runs / "ens", run)
    before = _snapshot(run)
    assert main([a.format(RUN=run) for a in argv]) == 2
    line = _one_error(capsys)
    assert line == (f"error: {run} is an unfinished ensemble: 1 of its 2 members finished training; "
                    f"`scratchformer train classify ... --out {run} --resume` finishes it")
    assert _snapshot(run) == before


def test_an_unfinished_single_run_is_refused(runs, tmp_path, capsys):
    run = tmp_path / "lm"
    shutil.copytree(runs / "lm", run)
    before = _snapshot(run)
    for argv in (["generate", str(run), "--prompt", "to"], ["evaluate", str(run)]):
        assert main(argv) == 2
        assert _one_error(capsys) == (f"error: {run} is an unfinished run: its training did not end; "
                                      f"`scratchformer train lm ... --out {run} --resume` finishes it")
    assert _snapshot(run) == before


def test_the_python_loaders_and_require_finished_refuse_too(runs, tmp_path):
    from scratchformer.tasks.classify import Classifier
    from scratchformer.tasks.lm import LanguageModel
    from scratchformer.tasks.translate import Translator

    with pytest.raises(UserError, match="unfinished ensemble: 1 of its 2 members"):
        Classifier.load(runs / "ens")
    with pytest.raises(UserError, match="unfinished run: its training did not end"):
        LanguageModel.load(runs / "lm")
    for run in (runs / "ens", runs / "lm", runs / "ens" / "member1"):
        with pytest.raises(UserError, match="--resume` finishes it$"):
            require_finished(run)
    require_finished(runs / "ens" / "member0")  # a finished member by itself is fine
    tr = tmp_path / "tr"  # a translation run interrupted before its first evaluation
    tr.mkdir()
    (tr / "config.json").write_text('{"task": "translate"}')
    (tr / "train_status.json").write_text('{"finished": false, "step": 7}')
    with pytest.raises(UserError, match=r"is an unfinished run: its training did not end; `scratchformer train translate"):
        Translator.load(tr)


def test_resume_finishes_them_and_then_they_load(runs, tmp_path, capsys):
    ens, lm = tmp_path / "ens", tmp_path / "lm"
    shutil.copytree(runs / "ens", ens)
    shutil.copytree(runs / "lm", lm)
    assert main(["train", "classify", "--no-baseline", "--out", str(ens), "--resume"]) == 0
    assert main(["train", "lm", "--out", str(lm), "--resume"]) == 0
    capsys.readouterr()
    assert len(json.loads((ens / "members.json").read_text())) == 2
    assert main(["predict", str(ens), "good film"]) == 0
    assert main(["generate", str(lm), "--prompt", "to", "--max-new-tokens", "2"]) == 0
    require_finished(ens), require_finished(lm)
