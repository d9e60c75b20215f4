"""`train translate`: train, average the last snapshots, keep the better of best/averaged on
validation BLEU, score the test split; ensembles train members and decode them together."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ...config import check_model_memory
from ...data.tokenizers import Tokenizer
from ...fileio import atomic_write_bytes, atomic_write_text, remove
from ...models.seq2seq import build_seq2seq
from ...train import Trainer
from ...train.checkpoint import load_weights, save_weights
from ...train.once import build_once, write_once
from ..runs import count_parameters, train_members
from .data import EncodedSplit, build_tokenizers, load_translation
from .inference import Translator
from .recipe import AVERAGED, FINAL, SNAPSHOTS, SRC_TOK, TGT_TOK, TranslateRecipe
from .task import TranslationTask, average_checkpoints, snapshot_files


def train_translator(recipe: TranslateRecipe, out_dir: str | Path, resume: bool = False,
                     log=print) -> dict[str, Any]:
    """Load data, build tokenizers and model, train, average, pick the final weights on
    validation BLEU, then score the test split with the recipe's decoding settings."""
    out_dir = Path(out_dir)
    if recipe.ensemble > 1:
        return train_ensemble(recipe, out_dir, resume, log)
    given = recipe
    data = build_once(lambda: load_translation(recipe.data))  # may fill the cache
    encoder = None  # a pretrained encoder (--init), loaded on a fresh start only
    if resume:
        src_tok, tgt_tok = Tokenizer.load(out_dir / SRC_TOK), Tokenizer.load(out_dir / TGT_TOK)
    else:
        if recipe.model.init:
            from .pretrained import load_encoder

            encoder = build_once(lambda: load_encoder(recipe.model, [s for s, _ in data.train], log))
            src_tok = encoder.tokenizer
            tgt_tok = build_tokenizers(recipe.data, data.train)[1]
            log(f"init: the source side is {recipe.model.init}'s tokenizer and {encoder.config.num_hidden_layers}-layer "
                f"encoder (width {encoder.config.hidden_size}; data.src_tokenizer is not used), "
                f"{recipe.model.freeze_encoder_layers} lowest layers frozen, encoder lr x{recipe.model.encoder_lr_scale}")
        else:
            src_tok, tgt_tok = build_tokenizers(recipe.data, data.train)

    def derive(r: TranslateRecipe) -> None:  # what comes from the data
        if encoder is not None:
            encoder.configure(r.model)
        r.model.src_vocab_size, r.model.tgt_vocab_size = src_tok.vocab_size, tgt_tok.vocab_size
        if not data.valid and r.train.metric != "loss":
            log(f"no validation split: the best checkpoint is chosen on loss, not {r.train.metric}")
            r.train.metric, r.train.metric_mode = "loss", "min"

    recipe = recipe.resolved(derive)
    dc = recipe.data
    seed = recipe.train.seed
    train = EncodedSplit(data.train, src_tok, tgt_tok, dc, shuffle=True, seed=seed, max_len=dc.max_len)
    valid = EncodedSplit(data.valid, src_tok, tgt_tok, dc, shuffle=False) if data.valid else None
    log(f"data: {len(train)} train ({train.dropped} longer than {dc.max_len} tokens left out) / "
        f"{len(valid or [])} valid / {len(data.test)} test pairs, {data.src_lang}->{data.tgt_lang}; "
        f"source {type(src_tok).__name__} {src_tok.vocab_size}, target {type(tgt_tok).__name__} "
        f"{tgt_tok.vocab_size}{' (joint)' if recipe.data.joint_vocab else ''}; "
        f"<unk> rate on valid source {src_tok.unk_rate([s for s, _ in data.valid[:2000]]):.2%}; "
        f"{train.n_tokens / 1e6:.2f}M train tokens, padding {train.sampler.padding_fraction(train.sampler.epoch_batches(0)):.1%}")
    check_model_memory(lambda: build_seq2seq(recipe.model), "the translation model")  # before any allocation
    torch.manual_seed(seed)
    model = build_seq2seq(recipe.model)
    if encoder is not None:
        encoder.load_into(model)
    if recipe.model.bert is not None and recipe.model.encoder_lr_scale != 1.0:
        model.set_encoder_lr_scale(recipe.model.encoder_lr_scale)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"model: {count_parameters(model) / 1e6:.2f}M parameters ({trainable / 1e6:.2f}M trained)")
    task = TranslationTask(model, recipe, src_tok, tgt_tok, given)
    valid_batches = valid.batches(0) if valid else None
    if valid is not None:
        task.valid_refs = [t for _, t in valid.pairs]
    task.snapshot_dir = out_dir / SNAPSHOTS
    if not resume:
        write_once(lambda: clear_old_weights(task.snapshot_dir, out_dir))
    trainer = Trainer(task, train.batches, (lambda: valid_batches) if valid else None, recipe.train, out_dir)
    task.current_step = lambda: trainer.state.step
    summary = trainer.fit(resume=resume)
    # the averaging, the choice of weights and the test write the run's files: the writer's
    return {"train": summary, **(write_once(lambda: finish(task, valid, data, out_dir, log)) or {})}


def clear_old_weights(snapshot_dir: Path, out_dir: Path) -> None:
    """A fresh start leaves no snapshot, averaged or final weights of an earlier training."""
    for old in snapshot_files(snapshot_dir):
        remove(old)
    for name in (AVERAGED, FINAL):
        remove(out_dir / name, root=out_dir)


def finish(task: TranslationTask, valid: EncodedSplit | None, data, out_dir: Path, log) -> dict[str, Any]:
    """After training: average, choose the final weights on valid, score the test split."""
    result: dict[str, Any] = {"final": finalize(task, valid, out_dir, log)}
    if data.test:
        # train.strategy fsdp: task.model is the plain (unsharded) module the Trainer handed back
        tr = Translator(task.model, task.src_tok, task.tgt_tok, task.recipe)
        result["test"] = tr.evaluate(data.test, out_dir, "test")
        t = result["test"]
        log(f"test: BLEU {t['bleu']:.2f} chrF {t['chrf']:.2f} ({t['n']} sentences, beam {t['decode']['beam']}, "
            f"{t['sentences_per_s']:.1f} sentences/s)\n  {t['bleu_signature']}\n  {t['chrf_signature']}")
    return result


def train_ensemble(recipe: TranslateRecipe, out_dir: Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Train `recipe.ensemble` members into `out_dir/member<i>` (seed + i), then score the test
    split with all of them decoded together. With `resume`, finished members are kept and an
    interrupted one continues where it stopped."""
    done = train_members(recipe, out_dir, resume, train_translator, lambda res: {
        "weights": res["final"]["weights"], "best_valid_bleu": res["train"].get("best_metric"),
        "test_bleu": res.get("test", {}).get("bleu"), "test_chrf": res.get("test", {}).get("chrf")}, log)
    first = out_dir / "member0"
    for name in (SRC_TOK, TGT_TOK):  # members train the same tokenizers; Translator.load checks
        atomic_write_bytes(out_dir / name, (first / name).read_bytes(), root=out_dir)
    TranslateRecipe.load_json(first / "config.json").replace(ensemble=recipe.ensemble).save_json(out_dir / "config.json")
    tr = Translator.load(out_dir)
    result: dict[str, Any] = {"train": {"members": done}, "final": {"weights": f"{recipe.ensemble} members"}}
    data = load_translation(recipe.data)
    if data.valid:  # the members' validation measure: greedy BLEU on the first bleu_sentences pairs
        pairs = data.valid[: recipe.data.bleu_sentences or len(data.valid)]
        rep = tr.evaluate(pairs, out_dir, "valid", beam=1)
        result["train"]["best_metric"] = rep["bleu"]
        members = ", ".join(f"{m['best_valid_bleu']:.2f}" for m in done if m["best_valid_bleu"] is not None)
        log(f"ensemble valid ({len(pairs)} sentences, greedy): BLEU {rep['bleu']:.2f} chrF {rep['chrf']:.2f} "
            f"(members' best: {members})")
    if data.test:
        result["test"] = t = tr.evaluate(data.test, out_dir, "test")
        members = ", ".join(f"{m['test_bleu']:.2f}" for m in done if m["test_bleu"] is not None)
        log(f"ensemble test: BLEU {t['bleu']:.2f} chrF {t['chrf']:.2f} (members: {members}; {t['n']} sentences, "
            f"beam {t['decode']['beam']}, {t['sentences_per_s']:.1f} sentences/s)\n  {t['bleu_signature']}\n"
            f"  {t['chrf_signature']}")
    return result


def finalize(task: TranslationTask, valid: EncodedSplit | None, out_dir: Path, log=print) -> dict[str, Any]:
    """Average the snapshots; keep whichever of best / averaged scores higher greedy BLEU on
    the validation sentences used during training; write final.json."""
    model = task.model
    candidates = {"model.safetensors": out_dir / "model.safetensors"}
    snaps = snapshot_files(out_dir / SNAPSHOTS)
    if len(snaps) >= 2:
        steps = [p.stem.split("-", 1)[1].lstrip("0") or "0" for p in snaps]
        log(f"averaging {len(snaps)} snapshots (steps {', '.join(steps)})")
        average_checkpoints(model, snaps)
        save_weights(model, out_dir / AVERAGED, {"averaged": json.dumps([p.name for p in snaps])})
        candidates[AVERAGED] = out_dir / AVERAGED
    scores: dict[str, dict] = {}
    if valid is not None:
        n = task.recipe.data.bleu_sentences or len(valid)
        pairs = valid.pairs[:n]
        for name, path in candidates.items():
            load_weights(model, path)
            tr = Translator(model, task.src_tok, task.tgt_tok, task.recipe)
            rep = tr.evaluate(pairs, None, "valid", beam=1)
            scores[name] = {"bleu": rep["bleu"], "chrf": rep["chrf"], "n": rep["n"]}
            log(f"valid ({len(pairs)} sentences, greedy) {name}: BLEU {rep['bleu']:.2f} chrF {rep['chrf']:.2f}")
    best = max(scores, key=lambda k: scores[k]["bleu"]) if scores else "model.safetensors"
    load_weights(model, candidates[best])
    final = {"weights": best, "valid": scores, "averaged": [p.name for p in snaps] if len(snaps) >= 2 else []}
    atomic_write_text(out_dir / FINAL, json.dumps(final, indent=1) + "\n", root=out_dir)
    return final
