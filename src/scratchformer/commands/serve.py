"""`scratchformer serve RUN [RUN ...]` (an HTTP API and a page over trained runs) and
`scratchformer export RUN --format onnx|transformers|ctranslate2 --out DIR`.

    scratchformer serve runs/demo                      # http://127.0.0.1:8000/ , /docs
    scratchformer serve clf=runs/demo mt=runs/hsk --port 9000 --api-key s3cret
    scratchformer export runs/demo --format onnx --out exported/demo
    scratchformer serve exported/demo --backend onnxruntime
    scratchformer export runs/hsk --format ctranslate2 --out exported/hsk-ct2
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError
from .common import add_compute_type, compute_type


def register(cli) -> None:
    from ..serve.backends import TORCH
    from ..serve.state import API_KEY_ENV, DECODE_PATHS, ServeConfig
    from ..tasks.faces import export_backends, export_formats, faces

    d = ServeConfig()
    engines = "; ".join(f"{b}: the {', '.join(dict.fromkeys(fmt for f in faces().values() for fmt, e in f.exports.items() if e.backend == b))}"
                        f" exports" for b in export_backends())
    by_format = "; ".join(f"{fmt}: {' and '.join(f.noun for f in faces().values() if fmt in f.exports)} runs"
                          for fmt in export_formats())
    p = cli.verb("serve", help="serve runs over HTTP (classify, translate, embeddings, completions, a page at /)")
    p.add_argument("runs", nargs="+", metavar="[NAME=]RUN",
                   help="run directories (or ONNX export folders, or a pretrained encoder name such as minilm); "
                        "NAME= sets the model name requests use (default: the folder's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=[TORCH, *export_backends()], default=None,
                   help=f"what runs the models (default: each folder's own: {TORCH} for run folders, an export's "
                        f"engine for export folders, as its export.json says; a backend that does not apply is "
                        f"refused). {TORCH}: run folders; {engines}")
    add_compute_type(p, "each task's: auto for translation, float32 for the others")
    p.add_argument("--device", default=None,
                   help="where run folders compute: any device torch knows (cpu, cuda, cuda:N, mps, xpu; default cpu); "
                        "translation runs take it, the other tasks and exports run on the CPU")
    p.add_argument("--decode", choices=list(DECODE_PATHS), default=d.decode,
                   help="translation's decoding path: auto (default) = the static compiled step where the model can "
                        "run it, its batch-1 buckets compiled before /ready (else the lean step; /v1/models says "
                        "why); static = the same, but a model that cannot run it is refused; lean = never compiled")
    p.add_argument("--compile-tokens", type=int, default=d.compile_tokens,
                   help=f"with the static step: compile the buckets of sources up to this many tokens before ready "
                        f"(default {d.compile_tokens}; 6-9 s a bucket; 0 = none, every batch runs the lean step)")
    p.add_argument("--compile-beams", default=None, metavar="B[,B...]",
                   help="with the static step: the beams whose buckets compile before ready (default: 1 and the run's "
                        "decode.beam)")
    p.add_argument("--compile-sentences", default="1", metavar="N[,N...]",
                   help="with the static step: the batch sizes (sentences a batch; the batcher joins concurrent "
                        "requests) whose buckets compile before ready (default 1; e.g. 1,2,4,8 for many clients, "
                        "at a longer start)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on every route but the probes, the page and the docs "
                        f"(or set {API_KEY_ENV}); an empty key is refused")
    p.add_argument("--no-batching", action="store_true", help="run every request alone (no dynamic batching)")
    p.add_argument("--max-batch-tokens", type=int, default=d.max_batch_tokens,
                   help=f"padded tokens (inputs x longest) per batch (default {d.max_batch_tokens})")
    p.add_argument("--max-wait-ms", type=float, default=d.max_wait_ms,
                   help=f"how long a batch waits for more requests (default {d.max_wait_ms})")
    p.add_argument("--max-queue", type=int, default=d.max_queue,
                   help=f"requests waiting per model; beyond it: 429 (default {d.max_queue})")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body_bytes, help="beyond it: 413")
    p.add_argument("--max-items", type=int, default=d.max_items, help="inputs per request; beyond it: 422")
    p.add_argument("--max-input-tokens", type=int, default=d.max_input_tokens,
                   help="tokens per input; beyond it: 422, or cut when the request sends \"truncate\": true")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="cap on completions' max_tokens")
    p.add_argument("--max-streams", type=int, default=d.max_streams, help="generations running at once")
    p.add_argument("--drain-timeout", type=float, default=d.drain_timeout,
                   help="on SIGTERM, seconds the requests in flight get to finish")
    p.add_argument("--header-timeout", type=float, default=d.header_timeout,
                   help=f"seconds a request's headers may take to arrive; beyond: 408, closed (default {d.header_timeout:g})")
    p.add_argument("--body-timeout", type=float, default=d.body_timeout,
                   help=f"seconds a request's body may take to arrive; beyond: 408 (default {d.body_timeout:g})")
    p.add_argument("--reload-on-change", action="store_true",
                   help="watch the served folders and swap in a newer finished model when one appears (without "
                        "it: only on POST /v1/reload)")
    p.add_argument("--reload-interval", type=float, default=d.reload_interval,
                   help=f"with --reload-on-change: seconds between looks at the folders (default {d.reload_interval:g})")
    p.set_defaults(func=run_serve)

    e = cli.verb("export", help=f"export a run to a folder another engine runs ({by_format})")
    e.add_argument("run_dir", type=Path)
    e.add_argument("--format", choices=export_formats(), required=True, help=by_format)
    e.add_argument("--out", type=Path, required=True, help="a new folder (onnx: or an empty one)")
    e.add_argument("--no-check", action="store_true", help="skip the parity check against our model")
    e.set_defaults(func=run_export)


def run_serve(args) -> int:
    from ..serve.state import API_KEY_ENV, ServeConfig, check_api_key
    from ..serve.backends import check_device, check_source, parse_specs
    from ..serve.server import serve

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    if args.device is not None:  # the one message every verb gives for a device this machine lacks
        from ..train.device import check_available, parse_device

        check_available(parse_device(args.device, "--device"), args.device)
    # secrets fail closed: a key given empty (`--api-key "$KEY"` with KEY unset, or the variable
    # set to nothing) refuses to start instead of serving without a key
    if args.api_key is not None:
        key = check_api_key(args.api_key, "--api-key")
    else:
        key = check_api_key(os.environ.get(API_KEY_ENV), API_KEY_ENV)
    cfg = ServeConfig(api_key=key, batching=not args.no_batching, max_batch_tokens=args.max_batch_tokens,
                      max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
                      max_items=args.max_items, max_input_tokens=args.max_input_tokens,
                      max_new_tokens=args.max_new_tokens, max_streams=args.max_streams,
                      drain_timeout=args.drain_timeout, header_timeout=args.header_timeout,
                      body_timeout=args.body_timeout, reload_on_change=args.reload_on_change,
                      reload_interval=args.reload_interval, decode=args.decode, compile_tokens=args.compile_tokens,
                      compile_beams=_numbers(args.compile_beams, "--compile-beams"),
                      compile_sentences=_numbers(args.compile_sentences, "--compile-sentences"))
    cfg.check()
    specs = parse_specs(args.runs)
    compute = compute_type(args)
    for s in specs:
        if not Path(s.source).exists() and "/" in s.source:
            raise UserError(f"{s.source} does not exist; pass a run directory (the --out of a training run)")
        # an export's task, format, engine and compute type, checked before the server starts
        check_source(Path(s.source), args.backend, compute, None)
        check_device(Path(s.source), args.device)
    if args.host not in ("127.0.0.1", "localhost", "::1") and key is None:
        print(f"warning: listening on {args.host} without --api-key: anyone who reaches it can use the models",
              flush=True)
    return serve(specs, cfg, args.host, args.port, args.backend, compute_type=compute, device=args.device)


def _numbers(text: str | None, flag: str) -> tuple[int, ...] | None:
    """--compile-beams "1,5" -> (1, 5); a malformed list is one line."""
    if text is None:
        return None
    try:
        return tuple(int(b) for b in text.split(","))
    except ValueError:
        raise UserError(f"{flag} takes whole numbers separated by commas, e.g. 1,4; got {text!r}") from None


def run_export(args) -> int:
    from ..tasks.faces import export_of

    export = export_of(args.run_dir, args.format)  # a format the run's task lacks: one line naming who has it
    report = export.run(args.run_dir, args.out, check=not args.no_check)
    print(f"wrote {args.out}/ ({export.files})")
    for line in export.parity(report):
        print(line)
    return 0
