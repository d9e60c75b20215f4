"""`train lm`: load the text, build tokenizer and model, train, evaluate the best checkpoint
on every validation window (`valid_metrics.json`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ...config import check_model_memory
from ...data.tokenizers import Tokenizer
from ...errors import UserError
from ...fileio import atomic_write_text
from ...models.language_model import build_lm
from ...train import Trainer
from ...train.checkpoint import load_weights
from ...train.once import build_once, write_once
from ..runs import count_parameters
from .data import (EncodedSplit, FixedWindows, build_lm_tokenizer, chars_per_token, encode_text, fixed_windows,
                   load_lm_text, prepared_lm, unk_share)
from .recipe import LMRecipe
from .task import LMTask, evaluate_windows


def _check_model_fits(recipe: LMRecipe) -> None:
    ec, ctx = recipe.model.transformer, recipe.data.context
    if ec.position == "learned" and ec.max_len < ctx:
        raise UserError(f"learned positions: model.transformer.max_len={ec.max_len} is shorter than "
                        f"data.context={ctx}; set model.transformer.max_len >= {ctx}")


def train_lm(recipe: LMRecipe, out_dir: str | Path, resume: bool = False, log=print,
             your_model: str | None = None, strict: bool = False, sizes: list[str] | None = None) -> dict[str, Any]:
    """Load the text, build tokenizer and model, train, then evaluate the best checkpoint on
    every validation window (`valid_metrics.json`). `your_model` ('FILE.py[:Name]', docs/your-model.md):
    the learner's own network in our model's place, checked first (`strict`: a named bug refuses)."""
    out_dir = Path(out_dir)
    dc = recipe.data
    yours = None
    if your_model or recipe.model.yours is not None:
        from ..your_model import prepare_yours
        yours = prepare_yours(your_model or "", out_dir, recipe.model.yours if resume else None, strict, log,
                              sizes=sizes)
    _check_model_fits(recipe)
    saved = Tokenizer.load(out_dir / "tokenizer.json") if resume and (out_dir / "tokenizer.json").exists() else None
    # a char LM on the user's file: ids memory-mapped, prepared (or a registered corpus fetched)
    # into the cache
    prep = build_once(lambda: prepared_lm(dc, saved))
    if prep is not None:
        tok, name, n_chars = prep.tokenizer, prep.name, (prep.train_chars, prep.valid_chars)
    else:
        text = build_once(lambda: load_lm_text(dc))
        tok = saved if saved is not None else build_lm_tokenizer(dc, text.train)
        name, n_chars = text.name, (len(text.train), len(text.valid))
    given = recipe

    def derive(r: LMRecipe) -> None:  # what comes from the data
        r.model.vocab_size = tok.vocab_size
        if yours is not None:  # the learner's network fitted to this vocabulary and context
            from ..your_model import fitted
            r.model.yours = fitted(yours[0], yours[1], out_dir, True, r.model.vocab_size, r.model.vocab_size,
                                   r.data.context, 0, log)

    recipe = recipe.resolved(derive)
    if prep is not None:
        train_ids, valid_ids = prep.train, prep.valid
    else:
        train_ids, valid_ids = encode_text(tok, text.train), encode_text(tok, text.valid)
    if len(train_ids) <= dc.context + 1:
        raise UserError(f"the training text has {len(train_ids)} tokens, not more than data.context={dc.context}; "
                        "use more text or a smaller context")
    if len(valid_ids) <= dc.context + 1:
        raise UserError(f"the validation text has {len(valid_ids)} tokens, fewer than one window of "
                        f"data.context={dc.context}; use more text, a larger data.valid_frac or a smaller context")
    cpt = 1.0 if prep is not None else chars_per_token(tok, text.valid, valid_ids)
    unk = unk_share(valid_ids)
    log(f"data: {name}: {n_chars[0]:,} / {n_chars[1]:,} train / valid characters, "
        f"{type(tok).__name__} vocab {tok.vocab_size}, {len(train_ids):,} / {len(valid_ids):,} tokens "
        f"({cpt:.2f} chars/token), <unk> rate on valid {unk:.3%}")
    seed = recipe.train.seed
    check_model_memory(lambda: build_lm(recipe.model, out_dir), "the language model")  # before any allocation
    torch.manual_seed(seed)
    model = build_lm(recipe.model, out_dir)
    n_params = count_parameters(model)
    what = (f"your {recipe.model.yours.entry}" if recipe.model.yours is not None else
            f"{recipe.model.transformer.position} positions, "
            f"{'tied' if recipe.model.tie_embeddings else 'untied'} embeddings")
    log(f"model: {n_params / 1e6:.2f}M parameters ({what}), context {dc.context}, "
        f"torch threads {torch.get_num_threads()}")
    task = LMTask(model, recipe, tok, cpt, given)
    valid_batches = fixed_windows(valid_ids, dc.context, dc.eval_batch_size, dc.eval_windows)

    train = EncodedSplit(train_ids, dc.context, dc.batch_size, seed, dc.min_length if dc.random_length else None)
    trainer = Trainer(task, train.batches, lambda: valid_batches, recipe.train, out_dir)
    summary = trainer.fit(resume=resume)
    # the full evaluation writes its report: the writer's
    full = write_once(lambda: evaluate_best(task, valid_ids, summary.get("best_step"), out_dir, log))
    return {"train": summary} if full is None else {"train": summary, "valid": full}


def evaluate_best(task: LMTask, valid_ids, best_step: int | None, out_dir: Path, log) -> dict[str, Any]:
    """The best checkpoint on every validation window, written to `valid_metrics.json`."""
    dc = task.recipe.data
    # train.strategy fsdp: task.model is the plain (unsharded) module the Trainer handed back
    load_weights(task.model, out_dir / "model.safetensors")
    full = evaluate_windows(task, FixedWindows(valid_ids, dc.context, dc.eval_batch_size))
    full.update({"split": "valid", "best_step": best_step})
    atomic_write_text(out_dir / "valid_metrics.json", json.dumps(full, indent=1) + "\n", root=out_dir)
    log(f"valid (all {int(full['tokens']):,} tokens, best checkpoint from step {best_step}): "
        f"loss {full['loss']:.4f}, perplexity {full['perplexity']:.2f}, bpc {full['bpc']:.3f}")
    return full
