"""`translate` and `align` (translation runs). `train translate` and `evaluate` of a translation
run: the task's face (tasks/translate/cli.py), which also holds the decoding flags they share."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UserError
from ..tasks.translate.cli import decode_args, decode_overrides
from .common import STREAM_BLOCK, add_compute_type, blocks, compute_type, read_inputs, stream_inputs


def register(cli) -> None:
    p = cli.verb("translate", help="translate sentences with a trained run")
    p.add_argument("run_dir", type=Path)
    p.add_argument("texts", nargs="*", help="sentences (or --file, or stdin)")
    p.add_argument("--file", help="one sentence per line")
    p.add_argument("--json", action="store_true", help="JSON lines with score and length-limit flag")
    p.add_argument("--weights", help="weights file in the run (default: the one final.json chose)")
    add_compute_type(p, "auto")
    decode_args(p)
    p.set_defaults(func=translate)

    p = cli.verb("align", help="save the cross-attention heatmap (every layer and head) of a translation "
                               "(with decoding flags; `attention` shows every kind of attention)")
    p.add_argument("run_dir", type=Path)
    p.add_argument("text")
    p.add_argument("--out", type=Path, default=None, help="PNG path (default: RUN/align.png)")
    decode_args(p)
    p.set_defaults(func=align)

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
    overrides = decode_overrides(args)
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
    src, out, weights, translation = tr.align(args.text, **decode_overrides(args))
    plot_view(AttentionView("cross-attention", out, src, weights), path, mean_column=True,
              title=f"cross-attention (rows: output, columns: source): {args.text} -> {translation}")
    print(translation)
    print(path)
    return 0
