"""`train classify`: load data, build tokenizer and model, train, test the best checkpoint;
ensembles train members and report them together."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ...errors import UserError
from ...models.classifier import EncoderClassifier
from ...train import Trainer
from ...train.checkpoint import load_weights
from ..runs import RunDir, count_parameters, train_members
from .data import EncodedSplit, build_tokenizer_for, encoder_for, load_classification, load_tokenizer
from .inference import Classifier
from .pretrained import load_init
from .recipe import ClassifyRecipe
from .task import ClassificationTask


def train_classifier(recipe: ClassifyRecipe, out_dir: str | Path, resume: bool = False,
                     log=print) -> dict[str, Any]:
    """Load data, build tokenizer and model, train, then test the best checkpoint."""
    out_dir = Path(out_dir)
    if recipe.ensemble > 1:
        return train_ensemble(recipe, out_dir, resume, log)
    given = recipe
    data = load_classification(recipe.data)
    source = None
    if resume:  # the saved recipe already holds the architecture (and the checkpoint the weights)
        tok = load_tokenizer(out_dir, recipe.model)
    elif recipe.model.init:
        source = load_init(recipe.model.init)
        tok = source.tokenizer
        log(f"init: {source.kind} backbone from {recipe.model.init} (its tokenizer; data.tokenizer is not used)")
    else:
        tok = build_tokenizer_for(recipe.data, [t for t, _ in data.train], recipe.model.bigram_buckets)

    def derive(r: ClassifyRecipe) -> None:  # what comes from the data and the checkpoint
        if source is not None:
            source.configure(r.model)
        elif not resume:
            r.model.vocab_size = tok.vocab_size
        r.model.n_classes = len(data.labels)

    recipe = recipe.resolved(derive)
    dc, mc = recipe.data, recipe.model
    if mc.bert is not None and dc.max_len > mc.bert.max_position_embeddings:
        raise UserError(f"data.max_len {dc.max_len} exceeds the checkpoint's "
                        f"{mc.bert.max_position_embeddings} positions; lower it")
    label_ids = {lab: i for i, lab in enumerate(data.labels)}
    encode = encoder_for(recipe, tok)
    seed = recipe.train.seed
    train = EncodedSplit(data.train, encode, label_ids, dc, shuffle=True, seed=seed)
    valid = EncodedSplit(data.valid, encode, label_ids, dc, shuffle=False) if data.valid else None
    test = EncodedSplit(data.test, encode, label_ids, dc, shuffle=False) if data.test else None
    log(f"data: {len(train)} train / {len(valid or [])} valid / {len(test or [])} test, "
        f"{len(data.labels)} classes, {type(tok).__name__} vocab {tok.vocab_size}, "
        f"<unk> rate on valid {tok.unk_rate([t for t, _ in data.valid[:2000]]):.2%}, "
        f"padding {train.padding_fraction:.1%} of batch tokens (length-bucketed)")
    torch.manual_seed(seed)
    model = EncoderClassifier(mc)
    if source is not None:
        source.load_into(model)
    if mc.init and mc.encoder_lr_scale != 1.0:
        model.set_encoder_lr_scale(mc.encoder_lr_scale)
    log(f"model: {count_parameters(model) / 1e6:.2f}M parameters")
    task = ClassificationTask(model, recipe, tok, data.labels, given)
    valid_batches = valid.batches(0) if valid else None
    trainer = Trainer(task, train.batches, (lambda: valid_batches) if valid else None, recipe.train, out_dir)
    summary = trainer.fit(resume=resume)
    result: dict[str, Any] = {"train": summary}
    if test is not None:
        load_weights(model, out_dir / "model.safetensors")
        result["test"] = task.report(test, out_dir, "test", data.meta)
        log(f"test: accuracy {result['test']['accuracy']:.4f}, macro-F1 {result['test']['macro_f1']:.4f}")
    return result


def train_ensemble(recipe: ClassifyRecipe, out_dir: Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Train `recipe.ensemble` members into `out_dir/member<i>` (seed + i), then report the
    ensemble (mean of the members' probabilities) on valid and test. With `resume`, finished
    members are kept and an interrupted one continues where it stopped."""
    done = train_members(recipe, out_dir, resume, train_classifier, lambda res: {
        "best_valid": res["train"].get("best_metric"), "test_accuracy": res.get("test", {}).get("accuracy"),
        "test_macro_f1": res.get("test", {}).get("macro_f1")}, log)
    ens = Classifier.load(out_dir)
    RunDir(out_dir).save_labels(ens.labels)
    data = load_classification(recipe.data)
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
    return result
