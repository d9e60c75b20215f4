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


def register(cli) -> None:
    from ..serve.app import API_KEY_ENV, ServeConfig

    d = ServeConfig()
    p = cli.verb("serve", help="serve runs over HTTP (classify, translate, embeddings, completions, a page at /)")
    p.add_argument("runs", nargs="+", metavar="[NAME=]RUN",
                   help="run directories (or ONNX export folders, or a pretrained encoder name such as minilm); "
                        "NAME= sets the model name requests use (default: the folder's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=["torch", "onnxruntime", "ctranslate2"], default="torch",
                   help="onnxruntime: serve folders written by `scratchformer export --format onnx`; "
                        "ctranslate2: folders written by `scratchformer export --format ctranslate2`")
    p.add_argument("--quantize", choices=["none", "int8"], default="none",
                   help="int8: load the runs with int8 projections (dynamic quantization, CPU; see docs/speed.md)")
    p.add_argument("--api-key", default=None,
                   help=f"require 'Authorization: Bearer KEY' on inference routes (or set {API_KEY_ENV})")
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
    p.set_defaults(func=run_serve)

    e = cli.verb("export", help="export a classify or lm run to ONNX (ONNX Runtime runs it alone), or a "
                                "translation run to a transformers folder or a CTranslate2 model")
    e.add_argument("run_dir", type=Path)
    e.add_argument("--format", choices=["onnx", "transformers", "ctranslate2"], required=True,
                   help="onnx: classify and lm runs; transformers, ctranslate2: translation runs")
    e.add_argument("--out", type=Path, required=True, help="a new folder (onnx: or an empty one)")
    e.add_argument("--no-check", action="store_true", help="skip the parity check against our model")
    e.set_defaults(func=run_export)


def run_serve(args) -> int:
    from ..serve.app import API_KEY_ENV, ServeConfig
    from ..serve.backends import parse_specs
    from ..serve.server import serve

    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    key = args.api_key or os.environ.get(API_KEY_ENV) or None
    cfg = ServeConfig(api_key=key, batching=not args.no_batching, max_batch_tokens=args.max_batch_tokens,
                      max_wait_ms=args.max_wait_ms, max_queue=args.max_queue, max_body_bytes=args.max_body_bytes,
                      max_items=args.max_items, max_input_tokens=args.max_input_tokens,
                      max_new_tokens=args.max_new_tokens, max_streams=args.max_streams,
                      drain_timeout=args.drain_timeout)
    cfg.check()
    specs = parse_specs(args.runs)
    for s in specs:
        if not Path(s.source).exists() and "/" in s.source:
            raise UserError(f"{s.source} does not exist; pass a run directory (the --out of a training run)")
    if args.host not in ("127.0.0.1", "localhost", "::1") and key is None:
        print(f"warning: listening on {args.host} without --api-key: anyone who reaches it can use the models",
              flush=True)
    return serve(specs, cfg, args.host, args.port, args.backend, quantize=args.quantize)


def run_export(args) -> int:
    from ..tasks.runs import RunDir

    task = RunDir(args.run_dir).task_name()
    if args.format != "onnx":
        return _export_translation(args, task)
    if task == "lm":
        from ..tasks.lm.export import export_lm_onnx

        report = export_lm_onnx(args.run_dir, args.out, check=not args.no_check)
        print(f"wrote {args.out}/ (model.onnx: one decoding step, KV cache in and out; tokenizer.json, generate.py, "
              "export.json, README.md)")
        if report:
            print(f"parity with our model over {report['steps']} greedy steps: max |Δ logits| = "
                  f"{report['max_abs_diff']:.2e}, tokens equal: {report['greedy_equal']}")
        return 0
    if task != "classify":
        raise UserError(f"{args.run_dir} holds a {task!r} run; --format onnx exports classify and lm runs "
                        "(translation runs: --format transformers or ctranslate2)")
    from ..tasks.classify.export import export_onnx

    report = export_onnx(args.run_dir, args.out, check=not args.no_check)
    print(f"wrote {args.out}/ (model.onnx, tokenizer.json, preprocess.py, labels.json, export.json, README.md)")
    if report.get("max_abs_diff") is not None:
        print(f"parity with our model on {report['n_texts']} texts: max |Δ logits| = {report['max_abs_diff']:.2e}")
    return 0


def _export_translation(args, task: str) -> int:
    if task != "translate":
        raise UserError(f"{args.run_dir} holds a {task!r} run; --format {args.format} exports translation runs "
                        "(classify and lm runs: --format onnx)")
    from ..tasks.translate import export

    if args.format == "transformers":
        report = export.export_transformers(args.run_dir, args.out, check=not args.no_check)
        print(f"wrote {args.out}/ (config.json, model.safetensors, tokenizer files, export.json)")
        parts = [("transformers", report)] if report else []
    else:
        report = export.export_ctranslate2(args.run_dir, args.out, check=not args.no_check)
        print(f"wrote {args.out}/ (CTranslate2 model.bin, vocabularies, tokenizer files, export.json)")
        parts = [("transformers", report["transformers"]), ("ctranslate2", report["ctranslate2"])] if report else []
    for name, r in parts:
        logits = f"max |Δ logits| = {r['max_abs_diff']:.2e}, " if "max_abs_diff" in r else ""
        print(f"parity with our model ({name}, {r['n_sentences']} test sentences): {logits}greedy tokens equal: "
              f"{r['greedy_equal']}, beam {r['beam']} equal: {r['beam_sentences_equal']}/{r['n_sentences']} "
              f"(all {r['beam_finished_sentences']} that end with <eos>: {r['beam_equal_where_finished']})")
    return 0
