"""`--model FILE.py[:Name]` for every task that trains a network from token ids: the learner's file checked,
copied into the run folder with its sha256, watched to learn how it builds and calls its model, and fitted to
the task (models/your_fit.py). See docs/your-model.md.

你自己的模型文件：先检查（check），再复制进运行目录（带 sha256），观察它怎样构造和调用模型，然后放进任务。

Trust: their code runs in the training process (it is their code on their own machine; the docs say so). The
checker and the watch run it first in a child process with time and memory limits.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import UserError
from ..fileio import atomic_write_bytes, atomic_write_text
from ..models.your_model import SOURCE_NAME, YourModelConfig
from ..models.your_source import read_source, sha256_text, sibling_imports

CHECK_FILE = "your_model_check.json"  # the bugs `scratchformer check` named before training ([] if none)


def parse_model_arg(spec: str) -> tuple[Path, str | None]:
    """'FILE.py' or 'FILE.py:Name' -> (path, name or None); a missing or non-Python file in one line."""
    path, _, name = spec.partition(".py:")
    path = Path(path + ".py") if name else Path(spec)
    if path.suffix != ".py":
        raise UserError(f"--model takes a Python file (FILE.py or FILE.py:ClassName), got {spec!r}")
    if not path.is_file():
        raise UserError(f"--model {spec}: no such file")
    return path, (name or None)


def prepare_yours(spec: str, out_dir: Path, saved: YourModelConfig | None, strict: bool, log,
                  lang: str = "en", sizes: list[str] | None = None) -> tuple[YourModelConfig, dict | None]:
    """(the config to complete, what the watch saw) for a new run; on `--resume` (`saved`), the run's own copy,
    and a `--model` file given again must be the same bytes. The check's findings are printed first;
    `strict` refuses to train on a named bug."""
    out_dir = Path(out_dir)
    if saved is not None:
        if spec:
            path, _ = parse_model_arg(spec)
            if sha256_text(path.read_bytes()) != saved.sha256:
                raise UserError(f"--model {spec} is not the file this run was trained with (sha256 differs from "
                                f"{out_dir / saved.source}): resume without --model, or start a new run (--out)")
        read_source(out_dir / saved.source, saved.sha256)  # the run's copy: present and unchanged
        return saved, None
    path, entry = parse_model_arg(spec)
    data = path.read_bytes()
    source = read_source(path)
    near = sibling_imports(source, path.resolve().parent)
    if near:
        raise UserError(f"{path.name} imports {', '.join(near)} from its own folder; the run keeps a copy of this "
                        f"one file only: paste what it needs into {path.name}")
    found = check_first(path, strict, log, lang)
    from ..check.calling import describe_file
    desc = describe_file(path, entry)
    desc = with_sizes(desc, parse_sizes(sizes or []), log)
    if desc.get("raised"):
        log(f"your model: your own demo raised {desc['raised']}; the run builds and calls the model itself")
    (out_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out_dir / SOURCE_NAME, data)
    atomic_write_text(out_dir / CHECK_FILE, json.dumps(found, ensure_ascii=False, indent=1) + "\n")
    cfg = YourModelConfig(source=SOURCE_NAME, sha256=sha256_text(data), origin=str(path.resolve()),
                          entry=desc["entry"])
    how = "watched your program build and call it" if desc.get("watched") else \
        "built from your file's sizes (your file never calls it)"
    log(f"your model: {desc['entry']} from {path} ({how}); copied to {out_dir / SOURCE_NAME} "
        f"(sha256 {cfg.sha256[:12]}…)")
    return cfg, desc


# defaults for the sizes of a model whose file never builds it and whose constructor has no defaults: the size of
# our own models (d128 x 2 layers, 4 heads), each said in the run's log; `--size NAME=N` chooses
DEFAULT_SIZES = {"d_model": 128, "heads": 4, "layers": 2, "d_ff": 512, "kv_heads": 4}
DROPOUT = re.compile(r"^(p|p_?drop|dropout|drop|dropout_?(rate|p|prob)|attn_pdrop|resid_pdrop)$", re.I)
LAYERS = re.compile(r"^(l|n|n_?layers?|num_?layers|depth|n_?blocks?|num_?blocks)$", re.I)


def parse_sizes(items: list[str]) -> dict:
    """`--size d=128,h=4 --size L=2` -> {"d": 128, "h": 4, "L": 2}; a malformed item in one line."""
    out: dict = {}
    for item in items:
        for part in filter(None, item.split(",")):
            name, _, value = part.partition("=")
            try:
                out[name.strip()] = float(value) if "." in value or "e-" in value else int(value)
            except ValueError:
                raise UserError(f"--size {part!r}: give NAME=N, e.g. --size d_model=128,heads=4") from None
    return out


def _default_for(name: str, context: int | None):
    from ..check.sizes import _D_MODEL, SIZE_NAMES
    from ..models.your_model import CLASSES, LENGTH, VOCAB

    n = name.lower()
    if n in SIZE_NAMES["vocab"] or n in SIZE_NAMES["max_len"] or any(r.search(name) for r in (VOCAB, CLASSES, LENGTH)):
        return 0  # ours (the vocabulary, the classes, the context), put in place by the fit
    if DROPOUT.match(name):
        return 0.1
    if LAYERS.match(name):
        return DEFAULT_SIZES["layers"]
    for size in ("heads", "d_ff", "kv_heads", "layers"):
        if n in SIZE_NAMES[size]:
            return DEFAULT_SIZES[size]
    if n in SIZE_NAMES["d_model"] or n in _D_MODEL:
        return DEFAULT_SIZES["d_model"]
    return None


def with_sizes(desc: dict, given: dict, log) -> dict:
    """What the watch saw, with `--size` applied to its constructor's arguments (a config's fields too); for a
    model the file never builds, its required arguments filled by name (module comment above)."""
    if desc.get("kind") != "class":
        return desc
    ctor = desc.get("ctor")
    if ctor is None or not desc.get("watched"):  # never built by their program: the check's test sizes are no
        synthetic = ctor or {}                     # sizes to train with; ours by name, theirs where we know none
        ctor, chosen, unknown = {}, [], []
        from ..models.your_model import LENGTH
        lengths = [n for n in desc.get("init", []) if LENGTH.search(n) and n not in desc.get("required", [])]
        for name in desc.get("required", desc.get("init", [])) + lengths:  # a context size: at least ours
            value = given.get(name, _default_for(name, None))
            if value is None:
                value = synthetic.get(name)
            if value is None:
                unknown.append(name)
            else:
                ctor[name] = value
                if name not in given and value and not isinstance(value, dict):
                    chosen.append(f"{name}={value}")
        glob = {}
        for name, value in given.items():  # --size for an argument that has a default, or a global it reads
            if name in desc.get("init", []):
                ctor[name] = value
            elif name in (desc.get("constants") or {}):
                glob[name] = value
            else:
                raise UserError(f"--size {name}: {desc['entry']}'s constructor takes no {name!r} and the file sets "
                                f"no such constant; its arguments: {', '.join(desc.get('init', [])) or 'none'}")
        if unknown:
            raise UserError(f"{desc['entry']} is never built by your file, and its constructor's "
                            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a size we know by name: "
                            f"give {'it' if len(unknown) == 1 else 'them'} with --size "
                            f"{','.join(f'{u}=N' for u in unknown)}, or add a demo that builds the model")
        if chosen:
            log(f"your model: your file never builds {desc['entry']}: built with {', '.join(chosen)} "
                f"(defaults; --size NAME=N to choose)")
        return {**desc, "ctor": ctor, "size_globals": glob}
    if given:
        ctor = json.loads(json.dumps(ctor))
        left = dict(given)
        for holder in [ctor] + [v["fields"] for v in ctor.values() if isinstance(v, dict) and "__config__" in v] \
                + [v for v in ctor.values() if isinstance(v, dict) and "__config__" not in v]:
            for k in list(holder):
                if k in left:
                    holder[k] = left.pop(k)
        glob = {k: left.pop(k) for k in list(left) if k in (desc.get("constants") or {})}  # a global it reads
        if left:
            raise UserError(f"--size {', '.join(left)}: {desc['entry']} is not built with "
                            f"{'that name' if len(left) == 1 else 'those names'} and the file sets no such constant; "
                            f"its arguments: {', '.join(ctor) or 'none'}")
        desc = {**desc, "ctor": ctor, "size_globals": glob}
    return desc


def check_notes(run_dir: Path) -> list[str]:
    """The check's lines about a `--model` run's file, first in what `doctor` reports ([] for our models)."""
    f = Path(run_dir) / CHECK_FILE
    if not f.is_file():
        return []
    try:
        return [f"check (before training): {line}" for line in json.loads(f.read_text(encoding="utf-8"))]
    except (ValueError, TypeError):
        return []


def check_first(path: Path, strict: bool, log, lang: str = "en") -> list[str]:
    """`scratchformer check` on their file before any training: each bug named by id with its one line (the
    lines are returned, and kept in the run folder for `doctor`)."""
    from ..check.child import run_child

    report = run_child(path, lang=lang, timeout_s=60.0)
    bugs = [f for f in report.findings if f.severity == "bug"]
    if report.error:
        log(f"check: your file could not be checked ({report.error.splitlines()[0]})")
    elif not bugs:
        ok = sum(c.status == "ok" for c in report.components)
        log(f"check: no bug found ({ok} of {len(report.components)} components match the reference; "
            f"`scratchformer check {path}` for the report)")
    lines = [f"{f.id} in {f.where}: {f.en if lang == 'en' else f.zh}" for f in bugs]
    for line in lines:
        log(f"check: {line}")
    if bugs and strict:
        ids = sorted({f.id for f in bugs})
        raise UserError(f"--strict: `scratchformer check` names {', '.join(ids)} in {path.name}; fix "
                        f"{'it' if len(ids) == 1 else 'them'} or train without --strict")
    return lines


def fitted(cfg: YourModelConfig, desc: dict | None, out_dir: Path, causal: bool, vocab: int, n_out: int, context: int,
           pad_id: int, log) -> YourModelConfig:
    """The config completed for this task's sizes (a resumed run's is already complete); `causal`: a language
    model's network (logits at every position, no position reading a later one), else a classifier's."""
    if desc is None:
        return cfg
    from ..models.your_fit import fit_yours

    cfg = fit_yours(cfg, desc, out_dir, causal, vocab, n_out, context, pad_id, log)
    for note in cfg.notes:
        log(f"your model: {note}")
    return cfg
