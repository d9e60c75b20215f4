"""The command line of language modelling (its face's `cli`, tasks/slots.py `TaskCLI`): the flags
and the run of `train lm`, and `evaluate` of an lm run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..cli_args import (compute_type, positive_int, recipe_for_run, refuse_translation_flags, say_compute,
                        your_model_flags)
from ..slots import add_flag


def flags(p) -> None:
    p.add_argument("--data", help="registered corpus (shakespeare, sanguo) or a UTF-8 .txt file "
                                  "(the last 10%% of it is validation)")
    p.add_argument("--valid", help="validation .txt file (default: the last data.valid_frac of --data)")
    your_model_flags(p)


def evaluate_flags(ev) -> None:
    add_flag(ev, "--context", type=positive_int, default=None, metavar="N",
                    help="language models: evaluate in windows of N tokens (longer than training to test "
                         "extrapolation); loss per position bucket, RUN/context_N.json and .png")
    add_flag(ev, "--rope-scaling", choices=["linear", "ntk"], default=None,
                    help="with --context, RoPE models: position interpolation (linear) or NTK-aware base "
                         "scaling, factor = N / training context")
    add_flag(ev, "--max-windows", type=positive_int, default=None, metavar="K",
                    help="with --context: evaluate K evenly spaced windows only (faster)")


def train(args) -> int:
    from . import LMRecipe, train_lm

    recipe = recipe_for_run(LMRecipe, args)
    result = train_lm(recipe, args.out, resume=args.resume, log=lambda m: print(m, file=sys.stderr),
                      your_model=args.model, strict=args.strict, sizes=args.size)
    valid = result.get("valid", {})  # under torchrun rank 0's alone (the others print nothing)
    print(json.dumps({"run_dir": str(args.out), "valid_loss": valid.get("loss"),
                      "valid_perplexity": valid.get("perplexity"), "valid_bpc": valid.get("bpc"),
                      "best_step": result["train"].get("best_step"),
                      "elapsed_s": result["train"].get("elapsed")}))
    return 0


def evaluate(args) -> int:
    from ...data.readers import read_text_file
    from ...errors import UserError
    from . import LanguageModel, load_lm_text

    if getattr(args, "max_len", None) is not None:
        raise UserError("--max-len is for classification runs; for a language model use --context N")
    refuse_translation_flags(args, "language-model")
    if args.context is None and (args.rope_scaling or args.max_windows):
        raise UserError("--rope-scaling and --max-windows go with --context N")
    lm = LanguageModel.load(args.run_dir, compute_type=compute_type(args))
    say_compute(lm, args)
    if args.context is not None:
        from .context import check_context

        check_context(lm, args.context)  # before reading the text: a refusal costs nothing
    limit = None
    if args.data:
        text, name = read_text_file(args.data), args.data
    else:
        data = load_lm_text(lm.recipe.data)
        # an lm run has a train and a valid part only: `--split test` (the default) means valid
        text, name = (data.train, "train") if args.split == "train" else (data.valid, "valid")
        if name == "train":  # as many evenly spaced windows as the validation text has
            limit = max(1, len(data.valid) // (args.context or lm.context))
    if args.context is not None:
        return _evaluate_context(args, lm, text, name, args.max_windows or limit)
    res = lm.evaluate_text(text, max_windows=limit)
    res["split"] = name
    if args.json:
        print(json.dumps(res))
    else:
        note = " (lm runs have no test split: the last part of the text is validation)" if args.split == "test" and not args.data else ""
        print(f"{name}{note}: {int(res['tokens']):,} tokens, loss {res['loss']:.4f}, "
              f"perplexity {res['perplexity']:.2f}, bits per character {res['bpc']:.3f}"
              + (f", <unk> {res['unk_rate']:.3%}" if res["unk_rate"] else ""))
    return 0


def _evaluate_context(args, lm, text: str, name: str, max_windows: int | None) -> int:
    """`evaluate RUN --context N`: loss per position bucket, RUN/context_N[_scaling].json and .png."""
    from ...fileio import atomic_write_text
    from .context import evaluate_context, plot_position_loss

    res = evaluate_context(lm, text, args.context, args.rope_scaling, max_windows)
    res["split"] = name
    stem = f"context_{args.context}" + (f"_{res['rope_scaling']}" if res["rope_scaling"] else "")
    path = Path(args.run_dir) / f"{stem}.json"
    atomic_write_text(path, json.dumps(res, indent=1) + "\n")
    label = res["position"] + (f", {res['rope_scaling']} x{res['rope_factor']:g}" if res["rope_scaling"] else "")
    png = plot_position_loss({label: res["position_loss"]}, res["train_context"], path.with_suffix(".png"),
                             f"{Path(args.run_dir).name}: {name}, windows of {args.context} (trained on {res['train_context']})")
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "position_loss"}))
        return 0
    scaling = f", RoPE {res['rope_scaling']} scaling x{res['rope_factor']:g}" if res["rope_scaling"] else ""
    print(f"{name}: {res['windows']} windows of {args.context} tokens (trained on {res['train_context']}, "
          f"{res['position']} positions{scaling}): loss {res['loss']:.4f}, perplexity {res['perplexity']:.2f}")
    print("positions      loss   perplexity | context   loss")
    for b, c in zip(res["buckets"], res["by_context"]):
        print(f"{b['from']:>5}-{b['to']:<6} {b['loss']:7.4f} {b['perplexity']:10.2f} | {c['context']:>7} {c['loss']:7.4f}")
    print(f"written: {path}, {png}")
    return 0
