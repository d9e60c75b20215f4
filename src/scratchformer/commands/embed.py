"""`scratchformer embed` and `scratchformer similarity`: sentence embeddings from a pretrained
encoder (all-MiniLM-L6-v2, multilingual-e5-small) running on our own encoder.

    scratchformer embed --model minilm "A sentence." "Another one." [--out vectors.npy]
    scratchformer embed --model minilm --file sentences.txt --out vectors.jsonl
    scratchformer similarity --model minilm "A cat sits." "A kitten is sitting."
    scratchformer similarity --model e5 "猫坐在垫子上" "A cat sits on the mat." "Le chat dort."
    scratchformer similarity --model e5 --prefix retrieval "how tall is the eiffel tower" "The tower is 330 m tall."

e5 was trained with a prefix before every text: "query: " (the default here: for symmetric
tasks such as similarity) or "passage: " (documents to search); `--prefix retrieval` gives the
first text "query: " and the others "passage: ".
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..errors import UserError
from ..fileio import atomic_write_bytes, atomic_write_text
from .common import read_inputs

MODEL_HELP = ("a model name (minilm, e5) or a folder with config.json + model.safetensors "
              "(default: minilm)")
PREFIX_HELP = "e5's input prefix: query (default for e5), passage or none (default for other models)"


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
    p.add_argument("--prefix", choices=("query", "passage", "none"), default=None, help=PREFIX_HELP)
    p.set_defaults(func=run_embed)

    s = cli.verb("similarity", help="cosine similarity of the first text to each of the others")
    s.add_argument("texts", nargs="+", metavar="TEXT", help="two or more texts")
    s.add_argument("--model", default="minilm", help=MODEL_HELP)
    s.add_argument("--max-length", type=int, default=None)
    s.add_argument("--prefix", choices=("query", "passage", "retrieval", "none"), default=None,
                   help=PREFIX_HELP + "; retrieval: the first text is a query, the others passages")
    s.set_defaults(func=run_similarity)


def _load(name: str):
    from ..interop.hf_bert import load_hf_bert

    cfg = Path(name) / "config.json"
    try:
        task = json.loads(cfg.read_text(encoding="utf-8")).get("task") if cfg.is_file() else None
    except (OSError, ValueError, AttributeError):
        task = None
    if task is not None:  # one of our runs, not a BERT checkpoint: say what gives its vectors
        hint = (f"its sentence embeddings come from `scratchformer serve {name}` (/v1/embeddings) or "
                f"`Classifier.load({str(name)!r}).embed(texts)`" if task == "classify" else
                "embed takes a pretrained encoder (minilm, e5) or a BERT checkpoint folder")
        raise UserError(f"{name} is a scratchformer {task} run, not a pretrained encoder; {hint}")
    return load_hf_bert(name)


def _prefixes(name: str, tok, prefix: str | None) -> list[str]:
    """[prefix of the first text, prefix of the others]; `prefix` None: the model's default."""
    from ..data.bert_tokenizer import XLMRTokenizer
    from ..interop.e5 import PREFIXES, is_e5

    e5 = is_e5(name) or isinstance(tok, XLMRTokenizer)
    if prefix is None:
        prefix = "query" if e5 else "none"
    if prefix != "none" and not e5:
        raise UserError(f"--prefix {prefix} is e5's input convention; {name} takes none (drop --prefix)")
    first, rest = {"query": ("query", "query"), "passage": ("passage", "passage"),
                   "retrieval": ("query", "passage"), "none": (None, None)}[prefix]
    return [PREFIXES.get(first, ""), PREFIXES.get(rest, "")]


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
    prefix, _ = _prefixes(args.model, tok, args.prefix)
    if args.quantize == "int8":  # what load_hf_bert(name, quantize="int8") does
        from ..nn.quant import quantize_int8

        quantize_int8(model)
    _check_max_length(args.max_length, tok)
    vectors = model.embed(texts, tok.with_prefix(prefix), batch_size=args.batch_size,
                          max_length=args.max_length).numpy()
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
    import torch

    model, tok = _load(args.model)
    first, rest = _prefixes(args.model, tok, args.prefix)
    _check_max_length(args.max_length, tok)
    v = torch.cat([model.embed(args.texts[:1], tok.with_prefix(first), max_length=args.max_length),
                   model.embed(args.texts[1:], tok.with_prefix(rest), max_length=args.max_length)])  # (N, C), unit
    sims = (v[1:] @ v[0]).tolist()  # cosine similarity: the vectors are normalised
    if len(sims) == 1:
        print(f"{sims[0]:.4f}")
    else:
        for s, t in zip(sims, args.texts[1:]):
            print(f"{s:.4f}\t{t}")
    return 0
