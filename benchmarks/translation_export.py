"""Our exported translation model under CTranslate2, beside our own decoder, on a trained run.

The run (hsk-base-like) goes through `scratchformer.tasks.translate.export` (transformers
folder, then CTranslate2's converter), and both engines decode the run's HSK test sentences:

- BLEU (sacrebleu, through the task's `corpus_scores`) of ours and of CTranslate2, the recipe's
  beam and length penalty, our per-sentence length limit; how many outputs are identical.
- Speed: greedy and beam 4, batch 1 (16 sentences one at a time) and batch 32 (one call),
  1 thread each (torch.set_num_threads(1); CTranslate2 intra_threads=1), interleaved
  (`common.interleaved`), output tokens/s per repetition, medians (min-max), and the ratio
  CTranslate2 / ours per repetition. CTranslate2 gets one max_decoding_length per call (the
  batch's largest limit), ours its per-sentence limits: both stop at <eos>.

    python -m benchmarks.translation_export --run runs/hsk [--reps 5] [--out DIR]

`--weights FILE` times the weights of a run whose training has not finished (the export
itself refuses such a run); the note says which weights were timed.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from scratchformer.tasks.translate import export as ex
from scratchformer.tasks.translate import export_check, hf_layout
from scratchformer.tasks.translate.task import corpus_scores

from . import common


def load(run: Path, weights: str | None):
    from scratchformer.data.tokenizers import Tokenizer
    from scratchformer.models.seq2seq import Seq2Seq
    from scratchformer.tasks.translate.inference import Translator
    from scratchformer.tasks.translate.recipe import SRC_TOK, TGT_TOK, TranslateRecipe
    from scratchformer.train.checkpoint import build_checked

    if weights is None:
        return Translator.load(run)
    recipe = TranslateRecipe.load_json(run / "config.json").freeze()
    model = build_checked(lambda: Seq2Seq(recipe.model), run / weights, run / "config.json").eval()
    return Translator(model, Tokenizer.load(run / SRC_TOK), Tokenizer.load(run / TGT_TOK), recipe)


def run(run_dir: str, weights: str | None = None, reps: int = 5, out_dir=None, log=print) -> dict:
    import ctranslate2

    torch.set_num_threads(1)
    tr = load(Path(run_dir), weights)
    tr.recipe = tr.recipe.replace(decode=tr.recipe.decode.replace(precision="fp32"))
    from scratchformer.tasks.translate.data import load_translation

    test = load_translation(tr.recipe.data).test
    srcs, refs = [s for s, _ in test], [t for _, t in test]
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, ct2_dir = Path(tmp) / "hf", Path(tmp) / "ct2"
        meta = ex.write_transformers(tr, hf_dir)
        ex.convert(hf_dir, ct2_dir, meta)
        ct2 = ctranslate2.Translator(str(ct2_dir), device="cpu", inter_threads=1, intra_threads=1)
        src_names = hf_layout.vocab_list(json.loads((hf_dir / meta["source_tokenizer"]).read_text()))
        tgt_names = hf_layout.vocab_list(json.loads((hf_dir / "tokenizer.json").read_text()))
        cfg = tr.decode_config()
        tokens = [[src_names[i] for i in ids] for ids in tr.encode(srcs, cfg)]
        limits = export_check.limits_of(tr, srcs)

        # ---- BLEU, the recipe's beam
        t0 = time.perf_counter()
        ours_h = tr.hypotheses(srcs)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        ct2_ids = export_check.ct2_translate(ct2, tokens, limits, cfg.beam, cfg.length_penalty, tgt_names)
        t_ct2 = time.perf_counter() - t0
        ours_txt = [tr.tgt_tok.decode(h.tokens) for h in ours_h]
        ct2_txt = [tr.tgt_tok.decode(i) for i in ct2_ids]
        bleu = {"ours": corpus_scores(ours_txt, refs), "ctranslate2": corpus_scores(ct2_txt, refs),
                "n": len(srcs), "beam": cfg.beam, "length_penalty": cfg.length_penalty,
                "identical_outputs": sum(a == b for a, b in zip(ours_txt, ct2_txt)),
                "identical_where_ours_finished": sum(a == b for a, b, h in zip(ours_txt, ct2_txt, ours_h) if h.finished),
                "ours_finished": sum(h.finished for h in ours_h),
                "seconds": {"ours": t_ours, "ctranslate2": t_ct2}}
        log(f"BLEU ours {bleu['ours']['bleu']:.2f}, CTranslate2 {bleu['ctranslate2']['bleu']:.2f}; identical "
            f"{bleu['identical_outputs']}/{len(srcs)}")

        # ---- speed
        cases = []
        for batch in (1, 32):
            for beam in (1, 4):
                chunk = list(range(16)) if batch == 1 else list(range(32))
                counted = {}

                def ours_fn(chunk=chunk, beam=beam, batch=batch):
                    hs = [h for i in chunk for h in tr.hypotheses([srcs[i]], beam=beam)] if batch == 1 \
                        else tr.hypotheses([srcs[i] for i in chunk], beam=beam)
                    counted["ours"] = sum(len(h.tokens) + h.finished for h in hs)

                def ct2_fn(chunk=chunk, beam=beam, batch=batch):
                    groups = [[i] for i in chunk] if batch == 1 else [chunk]
                    n = 0
                    for g in groups:
                        res = ct2.translate_batch([tokens[i] for i in g], beam_size=beam,
                                                  length_penalty=cfg.length_penalty,
                                                  max_decoding_length=max(limits[i] for i in g))
                        n += sum(len(r.hypotheses[0]) + 1 for r in res)  # + <eos> (an upper bound)
                    counted["ct2"] = n

                load_before = os.getloadavg()[0]
                times = common.interleaved({"ours": ours_fn, "ct2": ct2_fn}, reps, warmup=1)
                cases.append({"batch": batch, "beam": beam, "sentences": len(chunk),
                              "tokens": dict(counted), "loadavg": [load_before, os.getloadavg()[0]],
                              "tokens_per_s": {"ours": common.rate_summary(counted["ours"], times["ours"]),
                                               "ctranslate2": common.rate_summary(counted["ct2"], times["ct2"])},
                              "ct2_over_ours_time": common.paired_ratio(times["ours"], times["ct2"])})
                c = cases[-1]
                log(f"batch {batch} beam {beam}: ours {c['tokens_per_s']['ours']['median']:.0f} tok/s, "
                    f"CTranslate2 {c['tokens_per_s']['ctranslate2']['median']:.0f} tok/s, "
                    f"CTranslate2 {c['ct2_over_ours_time']['median']:.2f}x faster (load {load_before:.1f})")
    res = {"title": "Our exported translation model under CTranslate2 vs our decoder", "machine": common.machine_info(),
           "run": str(run_dir), "weights": weights or "final", "bleu": bleu, "cases": cases}
    common.write_result("translation_export", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    b = res["bleu"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Run `{res['run']}` (weights: {res['weights']}), HSK test ({b['n']} sentences), "
                              "1 thread each, fp32, interleaved repetitions, medians (min-max).")]
    parts.append("## BLEU (sacrebleu), beam {beam}, length penalty {lp}\n\n".format(beam=b["beam"], lp=b["length_penalty"])
                 + common.md_table(["engine", "BLEU", "chrF", "seconds"],
                                   [["ours", f"{b['ours']['bleu']:.2f}", f"{b['ours']['chrf']:.2f}", f"{b['seconds']['ours']:.1f}"],
                                    ["CTranslate2", f"{b['ctranslate2']['bleu']:.2f}", f"{b['ctranslate2']['chrf']:.2f}",
                                     f"{b['seconds']['ctranslate2']:.1f}"]])
                 + f"\n\nIdentical outputs: {b['identical_outputs']}/{b['n']} "
                   f"({b['identical_where_ours_finished']} of the {b['ours_finished']} where ours ended with <eos>).\n")
    rows = [[str(c["batch"]), str(c["beam"]), common.fmt_stat(c["tokens_per_s"]["ours"]),
             common.fmt_stat(c["tokens_per_s"]["ctranslate2"]), common.fmt_stat(c["ct2_over_ours_time"], 3, "×"),
             f"{c['loadavg'][0]:.1f}–{c['loadavg'][1]:.1f}"] for c in res["cases"]]
    parts.append("## Output tokens/s\n\n" + common.md_table(
        ["batch", "beam", "ours tok/s", "CTranslate2 tok/s", "CTranslate2 / ours", "load average"], rows))
    return "\n\n".join(parts)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a translation run folder")
    ap.add_argument("--weights", default=None, help="a weights file of the run (an unfinished run)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    a = ap.parse_args(argv)
    run(a.run, a.weights, a.reps, a.out)


if __name__ == "__main__":
    main()
