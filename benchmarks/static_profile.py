"""Where a batch-1 decode goes with the static step (part of static_decode's family): torch.profiler
over one greedy sentence of the hsk size (30 tokens, one thread), the static step compiled (one
`CompiledFxGraph` call a token) and the same step run eagerly (its ops one by one).

    python -m benchmarks.static_profile [--int8]
"""
from __future__ import annotations

import sys

import torch
from torch.profiler import profile

from scratchformer.nn import static
from scratchformer.tasks.translate.decoding import DecodeConfig, decode

from .static_decode import _no_eos
from .translation_engines import OUT_TOKENS, SIZES, ours_model, sources


def main(argv=None) -> None:
    int8 = "--int8" in (argv if argv is not None else sys.argv[1:])
    torch.set_num_threads(1)
    s = SIZES["hsk"]
    model = _no_eos(ours_model(s))
    src = sources(1, s["vocab"], s["src_len"], seed=1)
    cfg = DecodeConfig(beam=1, max_len_ratio=0.0, max_len_offset=OUT_TOKENS, max_output_len=OUT_TOKENS,
                       static=True, static_int8=int8)
    for compiled in (True, False):
        previous = static.use_compiler(compiled)
        with torch.inference_mode():
            for _ in range(3):
                decode(model, src, cfg)  # compile, warm
            with profile() as prof:
                for _ in range(5):
                    decode(model, src, cfg)
        static.use_compiler(previous)
        print(f"## static step {'compiled' if compiled else 'eager'}{' int8' if int8 else ''}: "
              "5 decodes of one sentence, 30 tokens each")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))


if __name__ == "__main__":
    main()
