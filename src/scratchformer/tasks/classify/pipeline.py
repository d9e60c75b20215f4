"""`train classify`: load data, build tokenizer and model, train, test the best checkpoint;
ensembles train members and report them together."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from ...config import check_model_memory
from ...errors import UserError
from ...fileio import atomic_write_text, inside, remove
from ...models.classifier import build_classifier
from ...train import Trainer
from ...train.checkpoint import load_weights
from ...train.once import build_once, decide_once, write_once
from ..runs import RunDir, count_parameters, one_process_ensemble, train_members
from .baseline import FIT_SAMPLE, NAME, Baseline, Comparison, fit_baseline, is_alphabetic
from .blend import blend_run
from . import budget
from .budget import ENSEMBLE_EVAL_SHARE, Plan, StepTimer, StepTimes, measure_step_times, plan_budget
from .distill import check_teacher, teacher_probabilities
from .data import (EncodedSplit, PreparedSplit, encoder_for, is_prepared, load_classification, load_tokenizer,
                   tokenizer_for_split, without_holdout_fold)
from .inference import Classifier
from .pretrained import load_init
from .recipe import ClassifyRecipe
from .task import ClassificationTask


def train_classifier(recipe: ClassifyRecipe, out_dir: str | Path, resume: bool = False, log=print,
                     baseline: bool = False, started: float | None = None,
                     step_timer: StepTimer | None = None, your_model: str | None = None,
                     strict: bool = False, sizes: list[str] | None = None) -> dict[str, Any]:
    """Load data, build tokenizer and model, train, then test the best checkpoint.

    `baseline`: also fit the TF-IDF + logistic regression baseline on the same split, print
    both and write `baseline_<split>_metrics.json`. `recipe.time_budget` (minutes, counted from
    `started`, a `time.monotonic()`; default now): measure a few steps (`step_timer`, default
    `measure`) and plan `train.max_steps` to fit (budget.py), recorded as `plan`.
    `recipe.ensemble` 0: one member is timed and planned, and as many members as fit train.

    Who runs each step under torchrun is train/once.py's: setup builds once (`build_once`),
    plans are decided once (`decide_once`), the test, the baseline and the blend are written
    once (`write_once`).

    `your_model` ('FILE.py[:Name]', docs/your-model.md): the learner's own network in the model's place,
    checked first (`strict`: a named bug refuses to train); one member, no blend, no n-gram tables (their
    network reads token ids only)."""
    started = time.monotonic() if started is None else started
    out_dir = Path(out_dir)
    yours = None
    if your_model or recipe.model.kind == "yours":
        recipe, yours, step_timer = _with_yours(recipe, your_model, out_dir, resume, strict, step_timer, log, sizes)
    if recipe.ensemble > 1:
        return train_ensemble(recipe, out_dir, resume, log, baseline=baseline, started=started, step_timer=step_timer)
    given = recipe
    data, soft = load_inputs(recipe, out_dir, resume, log)
    base = write_once(lambda: fit_and_log_baseline(data, log)) if baseline else None  # the report's, after the fit
    if recipe.ensemble == 0:  # as many members as fit the budget
        recipe, whole, timer = members_for_budget(recipe, data, started, step_timer, log)
        if whole:  # members in member<i>/; early stopping often frees time for more than planned
            return train_ensemble(recipe, out_dir, resume, log, baseline=baseline, started=started,
                                  step_timer=step_timer, data=data, base=base, grow_to=budget.MAX_MEMBERS)
        step_timer = timer  # the single run plans with that timing
    tok, source = tokenizer_and_source(recipe, data, out_dir, resume, log)
    recipe, (train, valid, test) = frozen_recipe(recipe, data, tok, source, soft, resume, started, step_timer, log,
                                                 yours=yours, out_dir=out_dir)
    task = build_task(recipe, given, tok, source, data.labels, log, folder=out_dir)
    valid_batches = valid.batches(0) if valid else None
    trainer = Trainer(task, train.batches, (lambda: valid_batches) if valid else None, recipe.train, out_dir)
    weights_before = _digest(out_dir / "model.safetensors") if resume else None
    summary = trainer.fit(resume=resume)
    return write_once(lambda: finish(task, summary, test, data, base, out_dir, resume, weights_before,
                                     started, log)) or {"train": summary}


def _with_yours(recipe: ClassifyRecipe, spec: str | None, out_dir: Path, resume: bool, strict: bool,
                step_timer: StepTimer | None, log, sizes: list[str] | None = None):
    """(the recipe for the learner's network, (its config to complete, what the watch saw), the step timer)."""
    from ..your_model import prepare_yours

    saved = recipe.model.yours if resume else None
    if resume and saved is None:
        raise UserError(f"{out_dir} was trained with our model, not with --model: resume it without --model")
    cfg, desc = prepare_yours(spec or "", out_dir, saved, strict, log, sizes=sizes)
    recipe = recipe.copy()
    if recipe.ensemble != 1 or recipe.blend or recipe.model.bigram_buckets:
        log("your model: one member, no blend with TF-IDF, no n-gram tables (your network reads token ids)")
    recipe.ensemble, recipe.blend, recipe.cross_fit = 1, False, False
    mc = recipe.model
    mc.kind, mc.bigram_buckets, mc.trigram_buckets, mc.init = "yours", 0, 0, None
    if step_timer is None:
        def step_timer(r, train_batches, valid_batches):  # a throwaway of their model, from the run's copy
            torch.manual_seed(r.train.seed)
            return measure_step_times(r, build_classifier(r.model, out_dir), train_batches, valid_batches)
    return recipe, (cfg, desc), step_timer


def members_for_budget(recipe: ClassifyRecipe, data, started: float, step_timer: StepTimer | None, log):
    """ensemble=0: (the recipe with the members that fit, whether one whole run fits, a step timer
    that answers the timing just measured first)."""
    n, times, whole = members_that_fit(recipe, data, started, step_timer, log)
    recipe = recipe.copy()
    recipe.ensemble = n
    return recipe, whole, _first_call_returns(times, step_timer)


def load_inputs(recipe: ClassifyRecipe, out_dir: Path, resume: bool, log):
    """(data, soft): the labelled splits and, with a teacher, its `(N, K)` probabilities of the
    training texts; a cross-fit member's without its held-out fold. Each step that may fill the
    cache (the row index, a data set's download, the teacher's token ids) is built once."""
    data = build_once(lambda: load_classification(recipe.data))
    for note in data.meta.get("hygiene", []) if not resume else []:
        log(f"data hygiene: {note}")
    soft = (build_once(lambda: teacher_probabilities(recipe.teacher, data.train, data.labels, log,
                                                     recipe.distill_temperature, recipe.data))
            if recipe.teacher else None)  # for the whole split: folds index it
    if soft is not None:
        check_teacher(out_dir, recipe.teacher, soft, resume)
    return without_holdout_fold(data, recipe.data, soft)  # a cross-fit member: without its fold


def tokenizer_and_source(recipe: ClassifyRecipe, data, out_dir: Path, resume: bool, log):
    """(tokenizer, pretrained source or None): the saved tokenizer on `resume`, a backbone's own
    with `model.init` (its checkpoint built once), else one built from the training texts."""
    if resume:  # the saved recipe already holds the architecture (and the checkpoint the weights)
        return load_tokenizer(out_dir, recipe.model), None
    if recipe.model.init:
        source = build_once(lambda: load_init(recipe.model.init))
        source = source.for_texts([t for t, _ in data.train], recipe.model, log)
        log(f"init: {source.kind} backbone from {recipe.model.init} (its tokenizer; data.tokenizer is not used)")
        return source.tokenizer, source
    return tokenizer_for_split(recipe.data, data.train, recipe.model.bigram_buckets,
                               recipe.model.trigram_buckets), None


def frozen_recipe(recipe: ClassifyRecipe, data, tok, source, soft, resume: bool, started: float,
                  step_timer: StepTimer | None, log, yours=None, out_dir: Path | None = None):
    """(the resolved recipe, its (train, valid, test) splits): what comes from the data, the
    checkpoint and the clock (a time budget's plan, decided once) written into the recipe."""
    splits: dict[str, EncodedSplit | None] = {}

    def encode_splits(r: ClassifyRecipe) -> None:
        splits["train"], splits["valid"], splits["test"] = encoded_splits(data, tok, r, soft)

    def derive(r: ClassifyRecipe) -> None:
        if source is not None:
            source.configure(r.model)
        elif not resume:
            r.model.vocab_size = tok.vocab_size
        r.model.n_classes = len(data.labels)
        if yours is not None:  # the learner's network fitted to this vocabulary, these labels, this length
            from ..your_model import fitted
            r.model.yours = fitted(yours[0], yours[1], out_dir, False, r.model.vocab_size, r.model.n_classes,
                                   r.data.max_len, r.model.pad_id, log)
        if r.time_budget is not None and r.plan is None and not resume:
            encode_splits(r)  # the same encoding as the frozen recipe's: kept for training
            plan_into(r, splits["train"], splits["valid"], splits["test"], started, step_timer, log)

    recipe = recipe.resolved(derive)
    dc, mc = recipe.data, recipe.model
    if mc.bert is not None and dc.max_len > mc.bert.max_positions:
        raise UserError(f"data.max_len {dc.max_len} exceeds the checkpoint's "
                        f"{mc.bert.max_positions} positions; lower it")
    if not splits:
        encode_splits(recipe)
    train, valid, test = splits["train"], splits["valid"], splits["test"]
    log(f"data: {len(train)} train / {len(valid or [])} valid / {len(test or [])} test, "
        f"{len(data.labels)} classes, {type(tok).__name__} vocab {tok.vocab_size}, "
        f"<unk> rate on valid {tok.unk_rate([t for t, _ in data.valid[:2000]]):.2%}, "
        f"padding {train.padding_fraction:.1%} of batch tokens (length-bucketed)")
    return recipe, (train, valid, test)


def build_task(recipe: ClassifyRecipe, given: ClassifyRecipe, tok, source, labels: list[str],
               log, folder: Path | None = None) -> ClassificationTask:
    """The model (seeded; a backbone's weights loaded) wrapped as the Trainer's task."""
    mc = recipe.model
    check_model_memory(lambda: build_classifier(mc, folder), "the classifier")  # before any allocation (and the seed)
    torch.manual_seed(recipe.train.seed)
    model = build_classifier(mc, folder)
    if source is not None:
        source.load_into(model)
    if mc.init and (mc.encoder_lr_scale != 1.0 or mc.layer_lr_decay != 1.0):
        model.set_encoder_lr_scale(mc.encoder_lr_scale, mc.layer_lr_decay)
    log(f"model: {count_parameters(model) / 1e6:.2f}M parameters")
    return ClassificationTask(model, recipe, tok, labels, given)


def finish(task: ClassificationTask, summary: dict, test: EncodedSplit | None, data, base: Baseline | None,
           out_dir: Path, resume: bool, weights_before: str | None, started: float, log) -> dict[str, Any]:
    """After training: the best checkpoint tested, the baseline beside it, the blend chosen (a
    blend made stale by `--resume` refitted or dropped); the run's result."""
    recipe = task.recipe
    model = task.model  # train.strategy fsdp: the Trainer handed back a plain (unsharded) module
    result: dict[str, Any] = {"train": summary}
    if resume and _digest(out_dir / "model.safetensors") != weights_before:
        stale_blend(out_dir, refit=base is not None and recipe.blend, log=log)
    if test is not None:
        load_weights(model, out_dir / "model.safetensors")
        result["test"] = task.report(test, out_dir, "test", data.meta)
        log(f"test: accuracy {result['test']['accuracy']:.4f}, macro-F1 {result['test']['macro_f1']:.4f}")
    if base is not None:
        result.update(compare_with_baseline(base, data, result, out_dir, log))
        result.update(maybe_blend(recipe, out_dir, base, data, log))
    log(f"wall time: {(time.monotonic() - started) / 60:.1f} min")
    return result


def _digest(path: Path) -> str | None:
    from ...data.fetch import sha256_file

    return sha256_file(path) if path.is_file() else None


def stale_blend(out_dir: Path, refit: bool, log) -> None:
    """The blend weight belongs to the weights it was chosen for: when `--resume` changed them, the
    saved blend is refitted (`refit`: the baseline runs after this) or dropped, and the run says so."""
    from ...fileio import remove
    from .inference import BLEND_DIR, BLEND_FILE

    blend = out_dir / BLEND_DIR / BLEND_FILE
    if not blend.is_file():
        return
    if refit:
        log("blend: --resume changed the weights; its weight is chosen again on valid below")
        return
    remove(blend, root=out_dir)
    log(f"blend dropped: --resume changed the weights it was chosen for; the run predicts with its model alone "
        f"(`scratchformer blend {out_dir}` chooses a new weight)")


def maybe_blend(recipe: ClassifyRecipe, out_dir: Path, base: Baseline, data, log) -> dict[str, Any]:
    """`recipe.blend`: average ours with the fitted baseline, the weight chosen on valid (blend.py)."""
    if not recipe.blend:
        return {}
    if not data.valid:
        log("blend skipped: its weight is chosen on a valid split and this run has none")
        return {}
    return blend_run(out_dir, Classifier.load(out_dir, blend=False), base, data, log)


def encoded_splits(data, tok, r: ClassifyRecipe, soft=None) -> tuple[EncodedSplit, EncodedSplit | None,
                                                                    EncodedSplit | None]:
    """train (shuffled with the run's seed), valid and test, encoded once with `tok` as `r` says;
    `soft`: a teacher's `(N, K)` probabilities of the training texts (distillation)."""
    encode, label_ids = encoder_for(r, tok), {lab: i for i, lab in enumerate(data.labels)}
    if soft is None and not encode.bert and is_prepared(data.train):  # token ids read by batch, batches on demand
        import sys

        from ...data.prepared_tokens import token_shards

        shards: dict = {}

        def split(pairs, shuffle: bool, seed: int = 0):
            if not pairs:
                return None
            key = pairs.rows.folder
            if key not in shards:
                shards[key] = build_once(lambda: token_shards(pairs.rows, tok, encode.bigram_buckets,
                                                              log=lambda m: print(m, file=sys.stderr)))
            return PreparedSplit(pairs, shards[key], encode, label_ids, r.data, shuffle, seed)
        return split(data.train, True, r.train.seed), split(data.valid, False), split(data.test, False)
    train = EncodedSplit(data.train, encode, label_ids, r.data, shuffle=True, seed=r.train.seed, soft=soft)
    valid = EncodedSplit(data.valid, encode, label_ids, r.data, shuffle=False) if data.valid else None
    test = EncodedSplit(data.test, encode, label_ids, r.data, shuffle=False) if data.test else None
    return train, valid, test


def measure_and_plan(r: ClassifyRecipe, train: EncodedSplit, valid: EncodedSplit | None, test: EncodedSplit | None,
                     started: float, step_timer: StepTimer | None, setup_since: float | None = None):
    """Time a few steps of `r` on these splits and plan its budget: (Plan, StepTimes).
    `setup_since`: when a member's setup began (its seconds until now count per member)."""
    train_batches = train.batches(0)
    valid_batches = valid.batches(0) if valid else []

    def decide() -> dict:
        times = (step_timer or measure)(r, train_batches, valid_batches)
        now = time.monotonic()
        return asdict(plan_budget(60 * r.time_budget, now - started, times, len(train_batches), r.train.epochs,
                                  len(valid_batches), len(test.sampler.epoch_arrays(0)) if test else 0,
                                  r.train.eval_every, member_setup_s=0.0 if setup_since is None else now - setup_since))
    d = decide_once(decide)  # measured and planned once: every process trains that plan
    plan = Plan(**{**d, "times": StepTimes(**d["times"])})
    return plan, plan.times


def plan_into(r: ClassifyRecipe, train: EncodedSplit, valid: EncodedSplit | None, test: EncodedSplit | None,
              started: float, step_timer: StepTimer | None, log) -> None:
    """Measure, plan, and write the plan into the (not yet frozen) recipe `r`."""
    plan, _ = measure_and_plan(r, train, valid, test, started, step_timer)
    t = r.train
    t.max_steps = plan.max_steps if t.max_steps is None else min(t.max_steps, plan.max_steps)
    t.eval_every = plan.eval_every
    t.warmup_steps = min(t.warmup_steps, max(1, plan.max_steps // 10))
    t.max_minutes = plan.max_minutes if t.max_minutes is None else min(t.max_minutes, plan.max_minutes)
    r.plan = plan.to_dict()
    log(f"plan: {plan.line()}")


def members_that_fit(recipe: ClassifyRecipe, data, started: float, step_timer: StepTimer | None,
                     log) -> tuple[int, StepTimes, bool]:
    """ensemble=0: how many members of `recipe` fit its time budget (1..MAX_MEMBERS), from one
    member's tokenizer, encoding and timed steps (that setup is counted per member); the timing;
    and whether one whole run (every epoch) fits at all."""
    t0 = time.monotonic()
    probe = recipe.copy()
    probe.ensemble = 1
    tok = tokenizer_for_split(probe.data, data.train, probe.model.bigram_buckets, probe.model.trigram_buckets)
    probe.model.vocab_size, probe.model.n_classes = tok.vocab_size, len(data.labels)
    plan, times = measure_and_plan(probe, *encoded_splits(data, tok, probe), started, step_timer, setup_since=t0)
    n = plan.members_fit
    if plan.cut:
        log(f"ensemble=0: not even one whole run fits the budget ({plan.max_steps} of {plan.wanted_steps} steps "
            f"at {times.train_step * 1000:.0f} ms/step): one run")
    else:
        log(f"ensemble=0: {n} member{'s' * (n > 1)} of {plan.planned_s / 60:.1f} min fit the budget "
            f"({'each trains' if n > 1 else 'it trains'} {plan.max_steps} steps at {times.train_step * 1000:.0f} ms/step; "
            f"more if early stopping leaves time; the ensemble averages the members' probabilities)")
    return n, times, not plan.cut


def _first_call_returns(times: StepTimes, step_timer: StepTimer | None) -> StepTimer:
    calls = []

    def timer(r, train_batches, valid_batches) -> StepTimes:
        calls.append(1)
        return times if len(calls) == 1 else (step_timer or measure)(r, train_batches, valid_batches)
    return timer


def measure(r: ClassifyRecipe, train_batches: list, valid_batches: list) -> StepTimes:
    """The default step timer: a few real steps of a throwaway model built from `r`."""
    torch.manual_seed(r.train.seed)
    return measure_step_times(r, build_classifier(r.model), train_batches, valid_batches)


def fit_and_log_baseline(data, log) -> Baseline:
    base = fit_baseline(data.train, data.labels, data.valid or None)
    valid = f"valid {base.valid_accuracy:.4f} (C={base.C:g}), " if base.valid_accuracy is not None else ""
    sample = (f" on a random sample of {FIT_SAMPLE:,} of the {len(data.train):,} training texts"
              if len(data.train) > FIT_SAMPLE else "")
    log(f"baseline {NAME}: {valid}fitted in {base.fit_seconds:.1f} s{sample}")
    return base


def compare_with_baseline(base: Baseline, data, result: dict, out_dir: Path, log) -> dict[str, Any]:
    """The baseline on the split ours was tested on (test, else valid), beside ours."""
    split = "test" if data.test and "test" in result else "valid" if data.valid else None
    if split is None:
        return {}
    ours = result["test"]["accuracy"] if split == "test" else result["train"].get("best_metric")
    members = len(result["train"].get("members", [])) or 1
    return baseline_beside(base, getattr(data, split), split, ours, data.labels, is_alphabetic([t for t, _ in data.train[:2000]]),
                           out_dir, log, members)


def baseline_beside(base: Baseline, pairs, split: str, ours_accuracy: float, labels: list[str], alphabetic: bool,
                    out_dir: Path | None, log, members: int = 1) -> dict[str, Any]:
    """Score the baseline on `pairs`, print it beside ours with the difference (and, when the
    baseline wins, what to try); write `baseline_<split>_metrics.json` into `out_dir`."""
    scored = base.score(pairs, labels)
    cmp = Comparison.of(split, ours_accuracy, scored["accuracy"], len(pairs))
    log(cmp.line())
    advice = cmp.advice(alphabetic, members)
    if advice:
        log(advice)
    record = {"baseline": scored, "comparison": cmp.to_dict()}
    if out_dir is not None:
        atomic_write_text(inside(out_dir, f"baseline_{split}_metrics.json", "report"), json.dumps(record, indent=1) + "\n")
    return record


def train_ensemble(recipe: ClassifyRecipe, out_dir: Path, resume: bool = False, log=print, baseline: bool = False,
                   started: float | None = None, step_timer: StepTimer | None = None, data=None,
                   base: Baseline | None = None, grow_to: int = 0) -> dict[str, Any]:
    """Train `recipe.ensemble` members into `out_dir/member<i>` (seed + i), then report the
    ensemble (mean of the members' probabilities) on valid and test. With `resume`, finished
    members are kept and an interrupted one continues where it stopped. A `time_budget` is
    shared: each member plans for an equal share of what is left when it starts, with the
    faster of its own measured step and the steps the members before it really took. `data` and
    `base` (the baseline) when the caller has them already. `grow_to` (ensemble 0): when the
    planned members are done and another fits what is left (at the slowest member's real wall
    time + 10%), train it, up to `grow_to` members: the plan's timing is only an estimate."""
    started = time.monotonic() if started is None else started
    one_process_ensemble(recipe.ensemble)
    data = load_classification(recipe.data) if data is None else data
    if base is None and baseline:
        base = fit_and_log_baseline(data, log)
    seen, walls = [], []  # seconds per step (evaluations included) and per member, of finished members

    def left_s() -> float:
        return 60 * recipe.time_budget * (1 - ENSEMBLE_EVAL_SHARE) - (time.monotonic() - started)

    def another(done: list) -> bool:
        if len(done) >= grow_to or recipe.time_budget is None or not walls:
            return False
        need = 1.1 * max(walls)
        if left_s() < need:
            return False
        log(f"ensemble: another member fits ({left_s() / 60:.1f} min left, members took up to "
            f"{max(walls) / 60:.1f} min)")
        return True

    def timer(r, train_batches, valid_batches) -> StepTimes:
        # a load spike on a shared machine during one member's few timed steps (measured here:
        # 1.3 s/step against 0.07-0.1 s for the members around it) would plan a tenth of the
        # steps; a machine really slower than before is caught by the plan's hard stop instead
        t = (step_timer or measure)(r, train_batches, valid_batches)
        return replace(t, train_step=min([t.train_step] + seen))

    def train_one(member: ClassifyRecipe, mdir: Path, resume: bool, log) -> dict[str, Any]:
        if recipe.cross_fit and not resume:  # member i never sees fold i (a resumed one saved it)
            member.data.holdout_fold, member.data.folds = int(mdir.name.removeprefix("member")), recipe.ensemble
            member.cross_fit = False  # an ensemble's setting; the member is one run without one fold
        if recipe.time_budget is not None and member.plan is None and not resume:
            member.time_budget = max(left_s(), 1.0) / 60 / (recipe.ensemble - int(mdir.name.removeprefix("member")))
        t0 = time.monotonic()
        res = train_classifier(member, mdir, resume, log, step_timer=timer)
        if res["train"].get("step") and not resume:
            seen.append(res["train"]["elapsed"] / res["train"]["step"])
            walls.append(time.monotonic() - t0)
        return res

    done = train_members(recipe, out_dir, resume, train_one, lambda res: {
        "best_valid": res["train"].get("best_metric"), "test_accuracy": res.get("test", {}).get("accuracy"),
        "test_macro_f1": res.get("test", {}).get("macro_f1")}, log, another=None if resume or not grow_to else another)
    ens = Classifier.load(out_dir, blend=False)
    RunDir(out_dir).save_labels(ens.labels)
    result: dict[str, Any] = {"train": {"members": done}}
    if data.valid:
        rep = ens.evaluate(data.valid, out_dir, "valid", data.meta)
        result["train"]["best_metric"] = rep.get(recipe.train.metric, rep["accuracy"])
        log(f"ensemble valid: accuracy {rep['accuracy']:.4f}, macro-F1 {rep['macro_f1']:.4f}")
    if data.test:
        result["test"] = ens.evaluate(data.test, out_dir, "test", data.meta)
        members = ", ".join(f"{m['test_accuracy']:.4f}" for m in done if m["test_accuracy"] is not None)
        log(f"ensemble test: accuracy {result['test']['accuracy']:.4f}, "
            f"macro-F1 {result['test']['macro_f1']:.4f} (members: {members})")
    if base is not None:
        result.update(compare_with_baseline(base, data, result, out_dir, log))
        result.update(maybe_blend(recipe, out_dir, base, data, log))
    log(f"wall time: {(time.monotonic() - started) / 60:.1f} min")
    return result


def train_with_candidate(recipe: ClassifyRecipe, candidate: ClassifyRecipe, out_dir: str | Path, log=print,
                         baseline: bool = True, started: float | None = None, name: str = "e5") -> dict[str, Any]:
    """The adaptive default with a pretrained candidate (auto.e5_decision): `recipe` (today's
    choice) trains into `out_dir` in the budget less the candidate's share, the candidate into
    `out_dir/<name>`; the one with the better valid metric (each alone, before any blend) is the run
    in `out_dir`, the other is kept in `out_dir/<name>` or `out_dir/default`."""
    started = time.monotonic() if started is None else started
    out_dir = Path(out_dir)
    ours = recipe.copy()
    ours.time_budget = max(1.0, recipe.time_budget - candidate.time_budget)
    res = train_classifier(ours, out_dir, log=log, baseline=baseline, started=started)
    cand = train_classifier(candidate, out_dir / name, log=log, baseline=False)
    # the winner is chosen and moved into place by the run's writer
    return write_once(lambda: choose_between(recipe, candidate, res, cand, out_dir, log, baseline, name)) or res


def choose_between(recipe: ClassifyRecipe, candidate: ClassifyRecipe, res: dict, cand: dict, out_dir: Path, log,
                   baseline: bool, name: str) -> dict[str, Any]:
    """`train_with_candidate`'s choice: the candidate's run moved into `out_dir` when its valid
    metric is better (today's choice kept in `out_dir/default`), else the candidate kept aside."""
    import os

    a, b = res["train"].get("best_metric"), cand["train"].get("best_metric")
    if a is None or b is None or b <= a:
        log(f"adaptive default: today's choice stands (valid {a:.4f} against {name}'s {b:.4f}); "
            f"the {name} run is kept in {out_dir / name}" if a is not None and b is not None else
            f"adaptive default: today's choice stands (no valid split to compare {name} on)")
        return {**res, "candidate": {name: b, "chosen": False}}
    keep = out_dir / "default"
    keep.mkdir()
    for p in list(out_dir.iterdir()):
        if p.name not in (name, "default", ".lock"):
            os.replace(p, keep / p.name)
    for p in list((out_dir / name).iterdir()):
        if p.name != ".lock":
            os.replace(p, out_dir / p.name)
    remove(out_dir / name, root=out_dir)  # never through a link
    log(f"adaptive default: {name} chosen: valid {b:.4f} against {a:.4f} for today's choice (kept in {keep})")
    result = {**cand, "candidate": {name: b, "default": a, "chosen": True}}
    if baseline and recipe.blend:
        data = load_classification(candidate.data)
        base = fit_and_log_baseline(data, log)
        result.update(compare_with_baseline(base, data, result, out_dir, log))
        result.update(maybe_blend(candidate.replace(blend=True), out_dir, base, data, log))
    return result
