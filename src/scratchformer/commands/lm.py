"""`train lm`, `generate`, and `evaluate` for language-model runs."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .common import add_recipe_args, recipe_for_run


def register(cli) -> None:
    p = cli.train_task("lm", help="train a GPT-style language model on a text")
    p.add_argument("--data", help="registered corpus (shakespeare, sanguo) or a UTF-8 .txt file "
                                  "(the last 10%% of it is validation)")
    p.add_argument("--valid", help="validation .txt file (default: the last data.valid_frac of --data)")
    add_recipe_args(p)
    p.set_defaults(func=train)

    p = cli.verb("generate", help="continue a prompt with a trained language model (streams to stdout)")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--prompt", required=True, help="text to continue (unknown characters become <unk>)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8, help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling, in (0, 1]")
    p.add_argument("--seed", type=int, default=None, help="make sampling reproducible")
    p.add_argument("--window", type=int, default=None,
                   help="tokens the model sees (default: the training context)")
    p.add_argument("--no-cache", action="store_true", help="recompute the whole window at each step (slow)")
    p.add_argument("--no-echo", action="store_true", help="print only the continuation, not the prompt")
    p.set_defaults(func=generate)

    cli.evaluators["lm"] = evaluate


def train(args) -> int:
    from ..tasks.lm import LMRecipe, train_lm

    recipe = recipe_for_run(LMRecipe, args)
    result = train_lm(recipe, args.out, resume=args.resume, log=lambda m: print(m, file=sys.stderr))
    valid = result["valid"]
    print(json.dumps({"run_dir": str(args.out), "valid_loss": valid["loss"], "valid_perplexity": valid["perplexity"],
                      "valid_bpc": valid["bpc"], "best_step": result["train"].get("best_step"),
                      "elapsed_s": result["train"].get("elapsed")}))
    return 0


def generate(args) -> int:
    from ..tasks.lm import LanguageModel, check_sampling

    lm = LanguageModel.load(args.run_dir)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    def warn(message: str) -> None:
        print(f"note: {message}", file=sys.stderr)

    # Validate everything before echoing the prompt, so an error prints nothing on stdout.
    lm.encode_prompt(args.prompt)
    check_sampling(args.temperature, args.top_k, args.top_p)
    lm.resolve_window(args.window)
    if not args.no_echo:
        stream(args.prompt)
    t0 = time.perf_counter()
    text = lm.generate(args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed,
                       use_cache=not args.no_cache, stream=stream, window=args.window, warn=warn)
    if not text.endswith("\n"):
        stream("\n")
    dt = time.perf_counter() - t0
    print(f"[{args.max_new_tokens} tokens in {dt:.2f} s, {args.max_new_tokens / max(dt, 1e-9):.0f} tokens/s, "
          f"{'no cache' if args.no_cache else 'KV cache'}]", file=sys.stderr)
    return 0


def evaluate(args) -> int:
    from ..data.readers import read_text_file
    from ..tasks.lm import LanguageModel, load_lm_text

    lm = LanguageModel.load(args.run_dir)
    limit = None
    if args.data:
        text, name = read_text_file(args.data), args.data
    else:
        data = load_lm_text(lm.recipe.data)
        # an lm run has a train and a valid part only: `--split test` (the default) means valid
        text, name = (data.train, "train") if args.split == "train" else (data.valid, "valid")
        if name == "train":  # as many evenly spaced windows as the validation text has
            limit = max(1, len(data.valid) // lm.context)
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
