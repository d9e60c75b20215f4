"""A table of bad inputs across the verbs, through `scratchformer.cli.main` in this process.

Each case: exit code 2, one `error: ...` line on stderr (for `train`, after its progress lines),
no traceback, the line says what it should, and no file in the run folder (or anywhere under
the case's folder) changed. The runs are trained once per module with tiny configs; each case
works on its own copy. Cases whose fix belongs to another part of the code are strict xfails
that name it (remove the mark with the fix).
"""
from __future__ import annotations

import errno
import os
import random
import shutil
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from scratchformer import fileio
from scratchformer.cli import main

TINY_ENC = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2",
            "--set", "model.encoder.d_ff=32", "--set", "model.encoder.n_layers=1", "--set", "train.progress=false"]
TINY_S2S = ["--set", "model.transformer.d_model=16", "--set", "model.transformer.n_heads=2",
            "--set", "model.transformer.d_ff=32", "--set", "model.transformer.n_layers=1",
            "--set", "data.src_tokenizer=word", "--set", "data.tgt_tokenizer=word",
            "--set", "train.epochs=1", "--set", "train.progress=false"]


def _data(d: Path) -> None:
    rng = random.Random(0)
    rows = ["text\tlabel"]
    for _ in range(120):
        lab = rng.choice(["pos", "neg"])
        words = ["good", "great"] if lab == "pos" else ["bad", "poor"]
        rows.append(" ".join(rng.choice(words + ["the", "film"]) for _ in range(5)) + f"\t{lab}")
    (d / "cls.tsv").write_text("\n".join(rows) + "\n")
    (d / "text.txt").write_text("\n".join(" ".join(rng.choice(["to", "be", "or", "not"]) for _ in range(8))
                                          for _ in range(200)))
    pairs = [("le chat", "the cat"), ("un chien", "a dog"), ("la maison", "the house"), ("le pain", "the bread")]
    (d / "par.tsv").write_text("\n".join(f"{s}\t{t}" for s, t in pairs * 30) + "\n")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    _data(d)
    cmds = {
        "clf": ["train", "classify", "--data", str(d / "cls.tsv"), "--set", "data.tokenizer=word",
                "--set", "train.epochs=1", "--set", "ensemble=1"] + TINY_ENC,
        "lm": ["train", "lm", "--data", str(d / "text.txt"), "--set", "data.context=16",
               "--set", "train.max_steps=2"] + TINY_ENC,
        "tr": ["train", "translate", "--data", str(d / "par.tsv")] + TINY_S2S,
    }
    for name, argv in cmds.items():
        assert main(argv + ["--out", str(d / name)]) == 0, name
    return d


# ---------------------------------------------------------------------------- damage
def truncate(name: str) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])
    return damage


def replace(name: str, content: bytes | str) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        (run / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return damage


def set_json(name: str, path: str, value) -> Callable[[Path], None]:
    """Set one (dotted) field of a JSON file of the run."""
    import json

    def damage(run: Path) -> None:
        d = json.loads((run / name).read_text())
        *parents, last = path.split(".")
        node = d
        for p in parents:
            node = node[p]
        node[last] = value
        (run / name).write_text(json.dumps(d))
    return damage


def remove(name: str) -> Callable[[Path], None]:
    return lambda run: (shutil.rmtree if (run / name).is_dir() else Path.unlink)(run / name)


def disk_full(monkeypatch) -> None:
    def full(f, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(fileio, "write_data", full)


OUTSIDE = b"a file outside the run folder: never written, truncated or deleted\n"


def link(name: str, target: str = "outside", kind: str = "file") -> Callable[[Path], None]:
    """Replace `name` in the run with a link to `DIR/<target>` (outside the run folder): `kind`
    "file" (a file there), "dangling" (nothing there: it must not be created), "folder" (a
    folder holding a copy of `name` and a file of its own) or "hard" (a hard link)."""
    def damage(run: Path) -> None:
        p, out = run / name, run.parent / target
        if kind == "folder":
            shutil.copytree(p, out) if p.is_dir() else out.mkdir()
            (out / "theirs.txt").write_bytes(OUTSIDE)
        elif kind != "dangling":
            out.write_bytes(OUTSIDE)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        os.link(out, p) if kind == "hard" else p.symlink_to(out)
    return damage


def ensemble(linked: bool = False, members: str | None = None) -> Callable[[Path], None]:
    """Make the run an ensemble of two members (copies of itself); `linked`: member1 is a link
    to another finished run (`DIR/other`); `members`: the text of members.json."""
    def damage(run: Path) -> None:
        shutil.copytree(run, run.parent / "member0")
        (run.parent / "member0").rename(run / "member0")
        if linked:
            shutil.copytree(run / "member0", run.parent / "other")
            (run / "member1").symlink_to(run.parent / "other")
        (run / "members.json").write_text(members or '[{"dir": "member0", "seed": 0}]\n')
        set_json("config.json", "ensemble", 2)(run)
    return damage


@dataclass
class Case:
    name: str
    argv: list[str]  # {RUN} the run's copy, {DIR} the case's folder, {BAD} a non-UTF-8 file, {CLS} {TXT}
    run: str | None = None  # which trained run to copy to {RUN}
    damage: Callable[[Path], None] | None = None
    expect: str = ""  # in the error line
    patch: Callable | None = None  # e.g. a full disk
    owner: str | None = None  # where the fix belongs, for a strict xfail
    extra: dict = field(default_factory=dict)


CASES = [
    # ---- train
    Case("train --resume, folder missing", ["train", "classify", "--out", "{DIR}/nope", "--resume"], expect="does not exist"),
    Case("train --resume, empty folder", ["train", "lm", "--out", "{DIR}/empty", "--resume"], expect="holds no run"),
    Case("train --resume, user's folder", ["train", "lm", "--out", "{DIR}/mine", "--resume"], expect="holds no run"),
    Case("train into a finished run", ["train", "classify", "--data", "{CLS}", "--out", "{RUN}"], "clf", expect="is not empty"),
    Case("train into a user's folder", ["train", "lm", "--data", "{TXT}", "--out", "{DIR}/mine"], expect="is not empty"),
    Case("train --resume --overwrite", ["train", "lm", "--out", "{RUN}", "--resume", "--overwrite"], "lm", expect="give one of them"),
    Case("train --out is a file", ["train", "lm", "--data", "{TXT}", "--out", "{CLS}"], expect="not a folder"),
    Case("train --data not UTF-8", ["train", "classify", "--data", "{BAD}", "--out", "{DIR}/new"], expect="byte offset"),
    Case("train --data header not understood", ["train", "classify", "--data", "{DIR}/hdr.tsv", "--out", "{DIR}/new"],
         expect="looks like a header"),
    Case("train --data missing", ["train", "classify", "--data", "{DIR}/missing.tsv", "--out", "{DIR}/new"]),
    Case("train --config missing", ["train", "lm", "--config", "{DIR}/none.json", "--out", "{DIR}/new"], expect="does not exist"),
    Case("train --config not JSON", ["train", "lm", "--config", "{CLS}", "--out", "{DIR}/new"], expect="not valid JSON"),
    Case("train --set int given abc", ["train", "lm", "--data", "{TXT}", "--set", "train.max_steps=abc", "--out", "{DIR}/new"]),
    Case("train --set bool given maybe", ["train", "lm", "--data", "{TXT}", "--set", "train.progress=maybe", "--out", "{DIR}/new"]),
    Case("train --set unknown option", ["train", "lm", "--data", "{TXT}", "--set", "train.lr_max=1", "--out", "{DIR}/new"]),
    Case("train --set heads do not divide", ["train", "lm", "--data", "{TXT}", "--set", "model.encoder.n_heads=3",
                                             "--out", "{DIR}/new"] + TINY_ENC[:2]),
    Case("train --resume, checkpoint.json corrupt", ["train", "lm", "--out", "{RUN}", "--resume"], "lm",
         replace("checkpoint.json", '{"dir": '), expect="corrupt"),
    Case("train --resume, checkpoint truncated", ["train", "lm", "--out", "{RUN}", "--resume"], "lm",
         lambda run: truncate(next((run / "checkpoints").iterdir()).relative_to(run).as_posix() + "/weights.safetensors")(run),
         expect="recorded"),
    Case("train --resume on a full disk", ["train", "lm", "--out", "{RUN}", "--resume"], "lm", patch=disk_full,
         expect="no space left on the device"),
    Case("train with an unknown flag", ["train", "lm", "--data", "{TXT}", "--out", "{DIR}/new", "--epochs", "3"]),
    # ---- evaluate
    Case("evaluate, folder missing", ["evaluate", "{DIR}/nope"], expect="not a run directory"),
    Case("evaluate, user's folder", ["evaluate", "{DIR}/mine"], expect="not a scratchformer run config"),
    Case("evaluate, config.json truncated", ["evaluate", "{RUN}"], "clf", truncate("config.json")),
    Case("evaluate, config.json without task", ["evaluate", "{RUN}"], "clf", replace("config.json", "{}")),
    Case("evaluate, config.json not UTF-8", ["evaluate", "{RUN}"], "clf", replace("config.json", b'{"task": "\xff"}')),
    Case("evaluate, invalid value in config", ["evaluate", "{RUN}"], "clf", set_json("config.json", "model.encoder.d_model", -3)),
    Case("evaluate --data not UTF-8", ["evaluate", "{RUN}", "--data", "{BAD}"], "clf", expect="byte offset"),
    Case("evaluate --data missing", ["evaluate", "{RUN}", "--data", "{DIR}/missing.tsv"], "clf"),
    Case("evaluate lm, model.safetensors truncated", ["evaluate", "{RUN}"], "lm", truncate("model.safetensors")),
    Case("evaluate translate, tgt_tokenizer.json truncated", ["evaluate", "{RUN}"], "tr", truncate("tgt_tokenizer.json")),
    Case("evaluate translate --context", ["evaluate", "{RUN}", "--context", "64"], "tr"),
    # ---- predict
    Case("predict, folder missing", ["predict", "{DIR}/nope", "a"]),
    Case("predict, model.safetensors truncated", ["predict", "{RUN}", "good film"], "clf", truncate("model.safetensors")),
    Case("predict, model.safetensors missing", ["predict", "{RUN}", "good film"], "clf", remove("model.safetensors")),
    Case("predict, tokenizer.json truncated", ["predict", "{RUN}", "good film"], "clf", truncate("tokenizer.json")),
    Case("predict, tokenizer.json not UTF-8", ["predict", "{RUN}", "good film"], "clf", replace("tokenizer.json", b"\xff\xfe")),
    Case("predict, labels.json truncated", ["predict", "{RUN}", "good film"], "clf", truncate("labels.json")),
    Case("predict, labels.json not a list", ["predict", "{RUN}", "good film"], "clf", replace("labels.json", '{"a": 1}')),
    Case("predict, labels.json one label short", ["predict", "{RUN}", "good film"], "clf", replace("labels.json", '["neg"]'),
         expect="labels.json"),
    Case("predict, config.json truncated", ["predict", "{RUN}", "good film"], "clf", truncate("config.json")),
    Case("predict, heads do not divide d_model", ["predict", "{RUN}", "good film"], "clf",
         set_json("config.json", "model.encoder.n_heads", 3)),
    Case("predict --file not UTF-8", ["predict", "{RUN}", "--file", "{BAD}"], "clf", expect="byte offset"),
    Case("predict --file missing", ["predict", "{RUN}", "--file", "{DIR}/missing.txt"], "clf"),
    Case("predict --top -1", ["predict", "{RUN}", "--top", "-1", "good film"], "clf"),
    Case("predict on an lm run", ["predict", "{RUN}", "to be"], "lm", expect="'lm'"),
    # ---- translate
    Case("translate --file not UTF-8", ["translate", "{RUN}", "--file", "{BAD}"], "tr", expect="byte offset"),
    Case("translate on a classify run", ["translate", "{RUN}", "le chat"], "clf", expect="'classify'"),
    Case("translate, src_tokenizer.json truncated", ["translate", "{RUN}", "le chat"], "tr", truncate("src_tokenizer.json")),
    Case("translate, final.json corrupt", ["translate", "{RUN}", "le chat"], "tr", replace("final.json", "{")),
    Case("translate, weights truncated", ["translate", "{RUN}", "le chat"], "tr", truncate("model.safetensors")),
    Case("translate --beam 0", ["translate", "{RUN}", "--beam", "0", "le chat"], "tr"),
    # ---- generate
    Case("generate on a classify run", ["generate", "{RUN}", "--prompt", "good"], "clf", expect="'classify'"),
    Case("generate --max-new-tokens -5", ["generate", "{RUN}", "--prompt", "to", "--max-new-tokens", "-5"], "lm"),
    Case("generate, model.safetensors truncated", ["generate", "{RUN}", "--prompt", "to"], "lm", truncate("model.safetensors")),
    Case("generate, tokenizer.json truncated", ["generate", "{RUN}", "--prompt", "to"], "lm", truncate("tokenizer.json")),
    Case("generate, tokenizer smaller than the model", ["generate", "{RUN}", "--prompt", "to", "--max-new-tokens", "5"], "lm",
         set_json("tokenizer.json", "vocab", ["<pad>", "<unk>", "<bos>", "<eos>", "<cls>", "t"]), expect="tokenizer.json"),
    Case("generate, config.json invalid value", ["generate", "{RUN}", "--prompt", "to"], "lm",
         set_json("config.json", "data.context", 0)),
    # ---- embed
    Case("embed --file not UTF-8", ["embed", "--file", "{BAD}"], expect="byte offset"),
    Case("embed --file missing", ["embed", "--file", "{DIR}/missing.txt"]),
    Case("embed --out with a bad suffix", ["embed", "a", "--out", "{DIR}/x.txt"]),
    # ---- attention
    Case("attention, folder missing", ["attention", "{DIR}/nope", "good"]),
    Case("attention, model.safetensors truncated", ["attention", "{RUN}", "good film"], "clf", truncate("model.safetensors")),
    Case("attention, config.json truncated", ["attention", "{RUN}", "good film"], "clf", truncate("config.json")),
    Case("attention --top -1", ["attention", "{RUN}", "good film", "--top", "-1", "--no-png"], "clf"),
]

# ---- links: a run folder never reaches outside itself (docs/reliability.md); DIR/outside* is outside
IS_LINK = "is a symbolic link"
LINK_CASES = [
    Case("evaluate, test_metrics.json links outside", ["evaluate", "{RUN}"], "clf", link("test_metrics.json"),
         expect="run/test_metrics.json " + IS_LINK),
    Case("evaluate, test_metrics.json a dangling link", ["evaluate", "{RUN}"], "clf", link("test_metrics.json", kind="dangling"),
         expect="run/test_metrics.json " + IS_LINK),
    Case("evaluate, confusion_test.png links outside", ["evaluate", "{RUN}"], "clf", link("confusion_test.png"),
         expect="run/confusion_test.png " + IS_LINK),
    Case("evaluate, .lock links outside", ["evaluate", "{RUN}"], "clf", link(".lock"), expect="run/.lock " + IS_LINK),
    Case("evaluate, .lock hard-linked outside", ["evaluate", "{RUN}"], "clf", link(".lock", kind="hard"),
         expect="run/.lock has another hard link"),
    Case("evaluate translate, test_hyps.txt links outside", ["evaluate", "{RUN}"], "tr", link("test_hyps.txt"),
         expect="run/test_hyps.txt " + IS_LINK),
    Case("doctor, doctor.md links outside", ["doctor", "{RUN}", "--samples", "8"], "clf", link("doctor.md"),
         expect="run/doctor.md " + IS_LINK),
    Case("doctor, doctor_heads.png links outside", ["doctor", "{RUN}", "--samples", "8"], "clf", link("doctor_heads.png"),
         expect="run/doctor_heads.png " + IS_LINK),
    Case("attention, attention.png links outside", ["attention", "{RUN}", "good film"], "clf", link("attention.png"),
         expect="run/attention.png " + IS_LINK),
    Case("attention --html, index.html links outside", ["attention", "{RUN}", "good film", "--no-png", "--html", "{RUN}/page"],
         "clf", link("page/index.html"), expect="run/page/index.html " + IS_LINK),
    Case("attention --html, its folder links outside", ["attention", "{RUN}", "good film", "--no-png", "--html", "{RUN}/page"],
         "clf", link("page", kind="folder"), expect="run/page " + IS_LINK),
    Case("blend, baseline/ links outside", ["blend", "{RUN}"], "clf", link("baseline", kind="folder"),
         expect="run/baseline " + IS_LINK),
    Case("train --resume, metrics.jsonl a dangling link", ["train", "lm", "--out", "{RUN}", "--resume"], "lm",
         link("metrics.jsonl", kind="dangling"), expect="run/metrics.jsonl " + IS_LINK),
    Case("train --resume, metrics.jsonl links outside", ["train", "lm", "--out", "{RUN}", "--resume"], "lm",
         link("metrics.jsonl"), expect="run/metrics.jsonl " + IS_LINK),
    Case("train --resume, checkpoints/ links outside", ["train", "lm", "--out", "{RUN}", "--resume"], "lm",
         link("checkpoints", kind="folder"), expect="run/checkpoints " + IS_LINK),
    Case("train --overwrite, checkpoints/ links outside", ["train", "lm", "--data", "{TXT}", "--out", "{RUN}", "--overwrite"],
         "lm", link("checkpoints", kind="folder"), expect="run/checkpoints " + IS_LINK),
    Case("train --resume, .lock links outside", ["train", "lm", "--out", "{RUN}", "--resume"], "lm", link(".lock"),
         expect="run/.lock " + IS_LINK),
    Case("train --overwrite, a member links to another run", ["train", "classify", "--data", "{CLS}", "--set", "ensemble=2",
                                                               "--out", "{RUN}", "--overwrite"], "clf", ensemble(linked=True),
         expect="run/member1 " + IS_LINK),
    Case("train --resume, a member links to another run", ["train", "classify", "--out", "{RUN}", "--resume"], "clf",
         ensemble(linked=True), expect="run/member1 " + IS_LINK),
    Case("train --resume, members.json cut off", ["train", "classify", "--out", "{RUN}", "--resume"], "clf",
         ensemble(members='[{"dir": "member0", "se'), expect="members.json is corrupt"),
    Case("train --resume, members.json names ../x", ["train", "classify", "--out", "{RUN}", "--resume"], "clf",
         ensemble(members='[{"dir": "../x"}]'), expect="cannot name a folder"),
    Case("sweep, a grid axis named ../../x", ["sweep", "--task", "lm", "--data", "{TXT}", "--grid", "../../x=1",
                                               "--out", "{DIR}/sw"], expect="holds a path separator"),
]
CASES += LINK_CASES

# Cases that do not pass yet, and where their fix belongs (strict: remove the entry with the fix).
PENDING: dict[str, str] = {}


def _params():
    for case in CASES:
        owner = case.owner or PENDING.get(case.name)
        marks = [pytest.mark.xfail(strict=True, reason=f"fix belongs in {owner}")] if owner else []
        yield pytest.param(case, id=case.name, marks=marks)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` but the lock notes and the fresh --out of the train cases."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock" and p.relative_to(folder).parts[0] != "new"}


@pytest.mark.parametrize("case", list(_params()))
def test_bad_input_is_one_line_and_changes_nothing(case, runs, tmp_path, capsys, monkeypatch):
    (tmp_path / "empty").mkdir()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.json").write_text('{"my": "own"}')
    (tmp_path / "mine" / "model.safetensors").write_bytes(b"my weights")
    (tmp_path / "bad.txt").write_bytes("good film\ngreat fil".encode() + b"\xe9 here\n")
    (tmp_path / "hdr.tsv").write_text("sentiment\treview\n" + "pos\tgood\nneg\tbad\n" * 20)
    if case.run:
        shutil.copytree(runs / case.run, tmp_path / "run")
        if case.damage:
            case.damage(tmp_path / "run")
    places = {"RUN": tmp_path / "run", "DIR": tmp_path, "BAD": tmp_path / "bad.txt",
              "CLS": runs / "cls.tsv", "TXT": runs / "text.txt"}
    argv = [a.format(**places) for a in case.argv]
    before = _snapshot(tmp_path), _snapshot(runs)
    if case.patch:
        case.patch(monkeypatch)
    try:
        code = main(argv)
    except SystemExit as e:  # argparse
        code = e.code
    except BaseException:  # noqa: BLE001 - the failure this table exists to catch
        pytest.fail(f"traceback instead of a one-line error:\n{traceback.format_exc()}")
    finally:
        monkeypatch.undo()
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err
    assert lines and lines[-1].startswith("error: "), err[-2000:]
    assert [line for line in lines if line.startswith("error:")] == [lines[-1]]
    if argv[0] != "train":  # train prints progress before it fails; the others only the error
        assert len(lines) == 1, err
    assert case.expect in lines[-1], lines[-1]
    assert (_snapshot(tmp_path), _snapshot(runs)) == before, "a file changed"
