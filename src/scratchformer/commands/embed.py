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
from ..fileio import atomic_write
from .common import PROGRESS_EVERY, STREAM_BLOCK, add_compute_type, blocks, compute_type, read_inputs, stream_inputs

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
    add_compute_type(p)
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


def _load(name: str, compute: str | None = None, say: bool = False):
    from ..interop.hf_bert import compute_choice, load_hf_bert

    cfg = Path(name) / "config.json"
    try:
        ours = cfg.is_file() and "task" in json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        ours = False
    if ours:
        from ..serve.backends import EMBEDDINGS, routes_of
        from ..tasks.faces import task_of

        run = task_of(name)  # one of our runs, not a BERT checkpoint: say what gives its vectors
        hint = (f"its sentence embeddings come from `scratchformer serve {name}` (/v1/embeddings) or "
                f"`Classifier.load({str(name)!r}).embed(texts)`" if EMBEDDINGS in routes_of(run.name) else
                "embed takes a pretrained encoder (minilm, e5) or a BERT checkpoint folder")
        raise UserError(f"{name} is a scratchformer {run.name} run, not a pretrained encoder; {hint}")
    model, tok = load_hf_bert(name, compute_type=compute)
    if say:  # --compute-type auto: what it chose (for a 32 x 128 batch) and why
        print("compute type: {} ({})".format(*compute_choice(model, "auto")), file=sys.stderr)
    return model, tok


def _prefixes(name: str, tok, prefix: str | None) -> list[str]:
    """[prefix of the first text, prefix of the others]; `prefix` None: the model's default."""
    from ..interop.zoo import input_prefixes

    prefixes = input_prefixes(name, tok)  # the zoo says which prefixes a model was trained with
    if prefix is None:
        prefix = "query" if prefixes else "none"
    if prefix != "none" and not prefixes:
        raise UserError(f"--prefix {prefix} is an input convention {name} was not trained with; it takes none "
                        "(drop --prefix)")
    first, rest = {"query": ("query", "query"), "passage": ("passage", "passage"),
                   "retrieval": ("query", "passage"), "none": (None, None)}[prefix]
    return [prefixes.get(first, ""), prefixes.get(rest, "")]


def _no_folder_as_text(texts: list[str], verb: str) -> None:
    """`embed RUN_DIR TEXT` would embed the folder's path as a sentence (with minilm, downloaded for it):
    a text that names a model or run folder is refused, and the line says what was meant."""
    for t in texts:
        if len(t) < 4096 and (Path(t) / "config.json").is_file():
            raise UserError(f"{t!r} is a model or run folder, not a text to embed; to embed with it, put it after "
                            f"--model: `scratchformer {verb} --model {t} TEXT ...` (a scratchformer run's vectors "
                            f"come from `scratchformer serve {t}`)")


def _read_lines(path: Path) -> list[str]:
    return read_inputs([], None if str(path) == "-" else str(path))


def _check_max_length(max_length: int | None, tok) -> None:
    if max_length is not None and not 3 <= max_length <= tok.model_max_length:
        raise UserError(f"--max-length must be between 3 and {tok.model_max_length}, got {max_length}")


def run_embed(args) -> int:
    """Texts from the arguments, then --file streamed in blocks of `STREAM_BLOCK` texts (each
    block length-sorted into batches by `embed`; a file of at most one block gives exactly one
    call's numbers, a longer one the same up to float rounding of other batch shapes): output is
    written as it goes (stdout, or one atomic .jsonl / .npy), progress every 100,000 texts."""
    import itertools

    if not args.texts and not args.file:
        raise UserError("nothing to embed: give texts as arguments or --file")
    _no_folder_as_text(args.texts, "embed")
    stdin = args.file is not None and str(args.file) == "-"
    if args.file is not None and not stdin:
        _check_file(args.file)
    if args.batch_size < 1:
        raise UserError("--batch-size must be >= 1")
    suffix = args.out.suffix.lower() if args.out else None
    if suffix not in (None, ".npy", ".jsonl"):
        raise UserError(f"--out must end in .npy or .jsonl, got {args.out.name}")
    from_file = _read_lines(args.file) if stdin else stream_inputs([], str(args.file)) if args.file else []
    texts = itertools.chain(args.texts, from_file)
    first_block = list(itertools.islice(texts, STREAM_BLOCK))  # a bad file stops here, before the model loads
    model, tok = _load(args.model, compute_type(args), getattr(args, "compute_type", None) == "auto")
    prefix, _ = _prefixes(args.model, tok, args.prefix)
    _check_max_length(args.max_length, tok)
    done = [0, 0]  # texts, width

    def embedded():
        for block in itertools.chain([first_block], blocks(texts, STREAM_BLOCK)):
            vectors = model.embed(block, tok.with_prefix(prefix), batch_size=args.batch_size,
                                  max_length=args.max_length).numpy()
            n = done[0] + len(block)
            if n // PROGRESS_EVERY > done[0] // PROGRESS_EVERY:
                print(f"embed: {n:,} texts", file=sys.stderr)
            done[0], done[1] = n, vectors.shape[1]
            yield block, vectors

    def lines():
        for block, vectors in embedded():
            for t, v in zip(block, vectors):
                yield json.dumps({"text": t, "embedding": [float(x) for x in v]}, ensure_ascii=False) + "\n"

    if suffix == ".npy":  # the header needs the row count: the file is counted first (a second read)
        total = len(args.texts) + (len(from_file) if stdin else sum(1 for _ in stream_inputs([], str(args.file)))
                                   if args.file else 0)
        atomic_write(args.out, lambda f: _write_npy(f, total, embedded()))  # never half a file, never a link
    elif suffix == ".jsonl":
        atomic_write(args.out, lambda f: [f.write(line.encode("utf-8")) for line in lines()])
    else:
        for line in lines():
            sys.stdout.write(line)
        sys.stdout.flush()
    if args.out:
        print(f"wrote {done[0]} x {done[1]} embeddings to {args.out}", file=sys.stderr)
    return 0


def _check_file(path: Path) -> None:
    from ..data.readers import read_utf8

    if not Path(path).is_file():
        read_utf8(path)  # the one-line error of a missing file or a folder


def _write_npy(f, total: int, embedded) -> None:
    """A float32 (total, C) .npy written block by block: the header `np.save` writes, then rows."""
    import numpy as np

    header, rows = False, 0
    for _, vectors in embedded:
        if not header:
            np.lib.format.write_array_header_1_0(
                f, {"descr": np.dtype("<f4").str, "fortran_order": False, "shape": (total, vectors.shape[1])})
            header = True
        f.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
        rows += len(vectors)
    if rows != total:  # the file changed between the count and the embedding: no .npy is left
        raise UserError(f"the input changed while it was embedded ({total} lines counted, {rows} embedded); run again")


def run_similarity(args) -> int:
    if len(args.texts) < 2:
        raise UserError("similarity needs at least two texts")
    _no_folder_as_text(args.texts, "similarity")
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
