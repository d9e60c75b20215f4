"""`scratchformer embed` and `scratchformer similarity`: sentence embeddings from a pretrained
BERT (e.g. all-MiniLM-L6-v2) running on our own encoder.

    scratchformer embed --model minilm "A sentence." "Another one." [--out vectors.npy]
    scratchformer embed --model minilm --file sentences.txt --out vectors.jsonl
    scratchformer similarity --model minilm "A cat sits." "A kitten is sitting."
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UserError
from ..fileio import atomic_write_bytes, atomic_write_text
from .common import read_inputs

MODEL_HELP = "a model name (minilm) or a folder with config.json + model.safetensors (default: minilm)"


def register(cli) -> None:
    p = cli.verb("embed", help="print or save sentence embeddings (mean-pooled, L2-normalised)")
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed")
    p.add_argument("--model", default="minilm", help=MODEL_HELP)
    p.add_argument("--file", type=Path, help="also embed each non-empty line of this file ('-' = stdin)")
    p.add_argument("--out", type=Path, help="write to X.npy (float32 matrix) or X.jsonl instead of printing")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--quantize", choices=["none", "int8"], default="none", help="int8: the projections in int8 (dynamic quantization, CPU; see docs/speed.md)")
    p.add_argument("--max-length", type=int, default=None,
                   help="truncate to this many tokens (default: the model's setting, 256 for minilm)")
    p.set_defaults(func=run_embed)

    s = cli.verb("similarity", help="cosine similarity of the first text to each of the others")
    s.add_argument("texts", nargs="+", metavar="TEXT", help="two or more texts")
    s.add_argument("--model", default="minilm", help=MODEL_HELP)
    s.add_argument("--max-length", type=int, default=None)
    s.set_defaults(func=run_similarity)


def _load(name: str):
    from ..interop.hf_bert import load_hf_bert

    return load_hf_bert(name)


def _read_lines(path: Path) -> list[str]:
    return read_inputs([], None if str(path) == "-" else str(path))


def _check_max_length(max_length: int | None, tok) -> None:
    if max_length is not None and not 3 <= max_length <= tok.model_max_length:
        raise UserError(f"--max-length must be between 3 and {tok.model_max_length}, got {max_length}")


def run_embed(args) -> int:
    texts = list(args.texts) + (_read_lines(args.file) if args.file else [])
    if not texts:
        raise UserError("nothing to embed: give texts as arguments or --file")
    if args.batch_size < 1:
        raise UserError("--batch-size must be >= 1")
    suffix = args.out.suffix.lower() if args.out else None
    if suffix not in (None, ".npy", ".jsonl"):
        raise UserError(f"--out must end in .npy or .jsonl, got {args.out.name}")
    model, tok = _load(args.model)
    if args.quantize == "int8":  # what load_hf_bert(name, quantize="int8") does
        from ..nn.quant import quantize_int8

        quantize_int8(model)
    _check_max_length(args.max_length, tok)
    vectors = model.embed(texts, tok, batch_size=args.batch_size, max_length=args.max_length).numpy()
    if suffix == ".npy":
        import io

        import numpy as np

        buf = io.BytesIO()
        np.save(buf, vectors.astype("float32"))
        atomic_write_bytes(args.out, buf.getvalue())  # never half a file, never through a link
    else:
        lines = (json.dumps({"text": t, "embedding": [float(x) for x in v]}, ensure_ascii=False)
                 for t, v in zip(texts, vectors))
        if suffix == ".jsonl":
            atomic_write_text(args.out, "".join(line + "\n" for line in lines))
        else:
            for line in lines:
                print(line)
    if args.out:
        print(f"wrote {len(texts)} x {vectors.shape[1]} embeddings to {args.out}", file=sys.stderr)
    return 0


def run_similarity(args) -> int:
    if len(args.texts) < 2:
        raise UserError("similarity needs at least two texts")
    model, tok = _load(args.model)
    _check_max_length(args.max_length, tok)
    v = model.embed(args.texts, tok, max_length=args.max_length)  # (N, C), unit length
    sims = (v[1:] @ v[0]).tolist()  # cosine similarity: the vectors are normalised
    if len(sims) == 1:
        print(f"{sims[0]:.4f}")
    else:
        for s, t in zip(sims, args.texts[1:]):
            print(f"{s:.4f}\t{t}")
    return 0
