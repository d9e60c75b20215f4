"""Test BLEU of a trained translator in every compute type and decoding path: float32, bfloat16 and
dynamic int8 through the lean step, float32 and weight-only int8 through the static step (one
sentence a call, its packages built as met), greedy. Prints one line per path and the JSON.

    python -m benchmarks.compute_type_quality RUN_DIR TEST.tsv
"""
from __future__ import annotations

import json
import sys
import time

import torch


def main(argv=None) -> None:
    from scratchformer.data.readers import read_parallel
    from scratchformer.tasks.translate import Translator

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m benchmarks.compute_type_quality RUN_DIR TEST.tsv (a translation run folder "
                         "and its src<TAB>tgt test file)")
    run, test = args
    torch.set_num_threads(1)
    pairs = read_parallel(test)
    out = {}
    for name, compute, over in [
            ("float32 lean", "float32", dict(static="off")),
            ("bfloat16 lean", "bfloat16", dict(static="off")),
            ("int8 lean (dynamic)", "int8", dict(static="off")),
            ("float32 static", "float32", dict(static="on", batch_tokens=1)),
            ("int8 static (weight-only)", "float32", dict(static="on", static_int8=True, batch_tokens=1))]:
        tr = Translator.load(run, compute_type=compute)
        t0 = time.perf_counter()
        r = tr.evaluate(pairs, beam=1, **over)
        out[name] = {"bleu": round(r["bleu"], 2), "chrf": round(r["chrf"], 2),
                     "seconds": round(time.perf_counter() - t0, 1)}
        print(name, out[name], flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
