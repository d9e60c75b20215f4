"""`generate` (language-model runs). `train lm` and `evaluate` of an lm run: the task's face
(tasks/lm/cli.py)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from .common import add_compute_type, compute_type, say_compute


def register(cli) -> None:
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
    add_compute_type(p)
    p.set_defaults(func=generate)



def generate(args) -> int:
    from ..tasks.lm import LanguageModel, check_sampling

    lm = LanguageModel.load(args.run_dir, compute_type=compute_type(args))
    say_compute(lm, args)

    def stream(piece: str) -> None:
        sys.stdout.write(piece)
        sys.stdout.flush()

    def warn(message: str) -> None:
        print(f"note: {message}", file=sys.stderr)

    # Validate everything before echoing the prompt, so an error prints nothing on stdout.
    lm.encode_prompt(args.prompt)
    check_sampling(args.temperature, args.top_k, args.top_p, seed=args.seed, max_new_tokens=args.max_new_tokens)
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
          f"{'KV cache' if not args.no_cache and getattr(lm.model, 'supports_cache', True) else 'no cache'}]",
          file=sys.stderr)
    return 0
