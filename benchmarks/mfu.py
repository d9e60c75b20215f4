"""Achieved model FLOP/s of our encoder as a fraction of the machine's float32 matmul peak.

The peak is a 2048² float32 matmul (on the fastest kernel: oneDNN where available) timed
inside the same interleaved loop as the encoder (`encoder.run_inference`), so each repetition's fraction divides numbers taken under the
same load. FLOPs are counted analytically (matmuls only: projections, FFN, QKᵀ and PV):
  - model FLOPs: real tokens only, attention over each sequence's real length — the useful
    work, the same number for every implementation;
  - padded FLOPs: what a dense implementation executes on the whole B × T batch.
`run_all` reuses the encoder benchmark's measurements; run alone, it measures ours only.
"""
from __future__ import annotations

from . import common
from . import encoder as enc

REFS = ("ours", "ours_plain")


def from_encoder(enc_res: dict, out_dir=None) -> dict:
    res = {"title": "Achieved FLOP/s vs measured matmul peak (float32 inference)",
           "machine": enc_res["machine"], "settings": {"source": "encoder benchmark, same loop",
                                                      "batch": enc_res["settings"]["batch"],
                                                      "seq_len": enc_res["settings"]["seq_len"],
                                                      "padding_fraction": enc_res["settings"]["padding_fraction"]},
           "by_size": {}}
    for sname, r in enc_res["inference"].items():
        if "matmul" not in r["seconds"]:
            continue
        mm = r["seconds"]["matmul"]
        peak = [r["matmul_flops"] / t for t in mm]
        entry = {"peak_gflops": common.summary([p / 1e9 for p in peak]), "matmul_n": r["matmul_n"], "impls": {}}
        for name in REFS + ("torch", "bert", "textbook"):
            if name not in r["seconds"]:
                continue
            ts = r["seconds"][name]
            model = [r["model_flops"] / t for t in ts]
            padded = [r["padded_flops"] / t for t in ts]
            entry["impls"][name] = {
                "model_gflops": common.summary([m / 1e9 for m in model]),
                "fraction_of_peak": common.summary([m / p for m, p in zip(model, peak)]),
                "padded_fraction_of_peak": common.summary([m / p for m, p in zip(padded, peak)]),
            }
        res["by_size"][sname] = entry
    big = "d512" if "d512" in res["by_size"] else next(iter(res["by_size"]), None)
    res["targets"] = []
    val = None
    if big and "ours" in res["by_size"][big]["impls"]:
        val = 100 * res["by_size"][big]["impls"]["ours"]["fraction_of_peak"]["median"]
    res["targets"].append(common.target(f"{big} inference, ours: model FLOP/s / matmul peak", val, 60.0, unit="%"))
    common.write_result("mfu", res, to_markdown(res), out_dir)
    return res


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = enc.plan(quick)
    _, mask, lengths = enc.make_batch(p["batch"], p["seq"], 8)
    enc_res = {"machine": common.machine_info(), "inference": {},
               "settings": {"batch": p["batch"], "seq_len": p["seq"], "padding_fraction": 1 - float(mask.float().mean())}}
    for sname, reps, budget in p["infer"]:
        log(f"[mfu] {sname}")
        enc_res["inference"][sname] = enc.run_inference(sname, p["sizes"][sname], p["batch"], p["seq"], reps,
                                                        impls=("ours", "ours_plain", "torch"), budget_s=budget,
                                                        matmul_n=p["matmul_n"])
    return from_encoder(enc_res, out_dir)


LABEL = {**enc.IMPL_LABEL}


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Batch {s['batch']} × {s['seq_len']}, {s['padding_fraction']:.0%} padding. Fractions are "
                              "per repetition (achieved / the matmul timed in the same round), median (min–max). "
                              "'model' counts real tokens only; 'padded' counts every slot of the batch.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    for sname, e in res["by_size"].items():
        rows = [[LABEL.get(n, n), common.fmt_stat(v["model_gflops"]),
                 common.fmt_stat({k: 100 * v["fraction_of_peak"][k] for k in ("median", "min", "max")}, 3, "%"),
                 common.fmt_stat({k: 100 * v["padded_fraction_of_peak"][k] for k in ("median", "min", "max")}, 3, "%")]
                for n, v in e["impls"].items()]
        parts.append(f"## {sname}: matmul peak {common.fmt_stat(e['peak_gflops'])} GFLOP/s ({e['matmul_n']}² fp32)\n\n"
                     + common.md_table(["implementation", "model GFLOP/s", "model FLOP/s / peak",
                                        "padded FLOP/s / peak"], rows))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
