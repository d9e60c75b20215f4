"""`attention` (maps of one text, any task) and `doctor` (a report on a trained run)."""
from __future__ import annotations

import json
from pathlib import Path


def register(cli) -> None:
    p = cli.verb("attention", help="attention maps of one text for any run: PNGs, --top K table, --json, --html page")
    p.add_argument("run_dir", type=Path)
    p.add_argument("text")
    p.add_argument("--out", type=Path, default=None,
                   help="PNG path or folder (default: RUN/attention.png, or RUN/attention_<kind>.png per kind)")
    p.add_argument("--view", default=None, help="only these maps: encoder, decoder, cross (translation runs)")
    p.add_argument("--top", type=int, default=None, metavar="K", help="print each token's K most attended tokens per head")
    p.add_argument("--mean-only", action="store_true", help="--top: only the mean of heads, not every head")
    p.add_argument("--json", action="store_true", help="print tokens and the top-K table as JSON (K: --top, default 3)")
    p.add_argument("--html", type=Path, default=None, metavar="DIR", help="write DIR/index.html to browse the maps offline")
    p.add_argument("--no-png", action="store_true", help="skip the PNG grids")
    p.set_defaults(func=attention)

    p = cli.verb("doctor", help="check a trained run on real samples: masks, heads, norms, embeddings; writes RUN/doctor.md")
    p.add_argument("run_dir", type=Path)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data", help="samples from this file (the task's training-file format) instead of a split")
    src.add_argument("--split", default="valid", choices=["train", "valid", "test"], help="split of the run's data (default valid)")
    p.add_argument("--samples", type=int, default=64, help="how many samples to examine (default 64)")
    p.add_argument("--out", type=Path, default=None, help="folder for doctor.md and PNGs (default: the run folder)")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=doctor)


def _png_paths(out: Path | None, run_dir: Path, views) -> list[Path]:
    if out is not None and out.suffix == ".png":
        return [out] if len(views) == 1 else [out.with_name(f"{out.stem}_{v.slug()}.png") for v in views]
    folder = out or run_dir
    return [folder / "attention.png"] if len(views) == 1 else [folder / f"attention_{v.slug()}.png" for v in views]


def attention(args) -> int:
    from ..diagnostics import inspection
    from ..diagnostics.attention_html import write_html
    from ..diagnostics.attention_plot import plot_view
    from ..diagnostics.maps import AttentionResult, format_top_k, select_views, top_k

    res = inspection.load(args.run_dir).attention(args.text)
    res = AttentionResult(res.text, select_views(res, args.view), res.output, res.task)
    pngs = [] if args.no_png else [plot_view(v, p) for v, p in zip(res.views, _png_paths(args.out, args.run_dir, res.views))]
    page = write_html(res, args.html) if args.html else None
    if args.json:
        k = args.top or 3
        print(json.dumps({"text": res.text, "task": res.task, "output": res.output,
                          "views": [{"name": v.name, "query_tokens": v.query_tokens, "key_tokens": v.key_tokens,
                                     "top": [r for r in top_k(v, k) if not args.mean_only or r["head"] == "mean"]}
                                    for v in res.views],
                          "png": [str(p) for p in pngs], "html": str(page) if page else None}, ensure_ascii=False))
        return 0
    if res.output is not None:
        print(f"output: {res.output}")
    if args.top:
        for v in res.views:
            print(format_top_k(v, args.top, "mean" if args.mean_only else "all"))
    for p in pngs:
        print(p)
    if page:
        print(page)
    return 0


def doctor(args) -> int:
    from dataclasses import asdict

    from ..diagnostics import inspection
    from ..diagnostics.doctor import examine, summary
    from ..errors import UserError

    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    if args.data and not Path(args.data).exists():
        raise UserError(f"--data {args.data} does not exist")
    subject = inspection.load(args.run_dir).subject(args.data, args.split, args.samples)
    out = args.out or subject.run_dir
    report = examine(subject, out)
    if args.json:
        print(json.dumps({"findings": [asdict(f) for f in report.findings], "report": str(out / "doctor.md")},
                         ensure_ascii=False))
    else:
        print(summary(report))
        print(f"report: {out / 'doctor.md'}")
    return 0
