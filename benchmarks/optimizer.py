"""AdamW's step on CPU: torch's single-tensor loop, its multi-tensor (foreach) path, and fused.

The model is `recipes/thucnews100k-scratch.json`'s classifier with a BPE vocabulary of 8,000:
d128, 2 layers and 200,000 hashed-bigram buckets, so 25.6M of its 27M parameters sit in one
embedding table. In a profile of its training (py-spy, one thread) the single-tensor AdamW
loop was 58% of the step. The trainer now asks for the fused kernel (train/optim.py: `adamw`).

Contenders (same parameters, same gradients, interleaved, one process):
  - single: `AdamW(foreach=False, fused=False)`, what the trainer used before;
  - foreach: `AdamW(foreach=True)`;
  - fused: `AdamW(fused=True)`, what the trainer uses now.
Also recorded: the largest difference in any weight between fused and single after 20 steps
(the same update, rounded differently).
"""
from __future__ import annotations

import torch

from scratchformer.models.classifier import ClassifierConfig, build_classifier
from scratchformer.train.optim import param_groups

from . import common

CONTENDERS = {"single": dict(foreach=False, fused=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}


def plan(quick: bool) -> dict:
    if quick:
        return dict(vocab=300, buckets=1000, d_model=32, d_ff=64, reps=3, budget=None, check_steps=3)
    return dict(vocab=8000, buckets=200_000, d_model=128, d_ff=512, reps=15, budget=60.0, check_steps=20)


def _model(p: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ClassifierConfig.from_dict({"vocab_size": p["vocab"], "n_classes": 10, "pooling": "mean",
                                      "bigram_buckets": p["buckets"],
                                      "encoder": {"d_model": p["d_model"], "n_heads": 4, "d_ff": p["d_ff"],
                                                  "n_layers": 2, "norm_first": True, "activation": "gelu"}})
    return build_classifier(cfg)


def _optimizers(p: dict) -> dict:
    """One model and optimizer per contender, each parameter with the same fixed gradient."""
    out = {}
    for name, kw in CONTENDERS.items():
        model = _model(p)
        g = torch.Generator().manual_seed(1)
        for prm in model.parameters():
            prm.grad = torch.randn(prm.shape, generator=g) * 1e-3
        out[name] = (model, torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, **kw))
    return out


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    opts = _optimizers(p)
    n_params = sum(x.numel() for x in opts["single"][0].parameters())
    log(f"[optimizer] {n_params / 1e6:.1f}M parameters, {p['check_steps']} steps for the difference")
    for _ in range(p["check_steps"]):
        for _, opt in opts.values():
            opt.step()
    diff = {n: max(float((a - b).detach().abs().max()) for a, b in zip(opts[n][0].parameters(), opts["single"][0].parameters()))
            for n in ("foreach", "fused")}
    times = common.interleaved({n: opt.step for n, (_, opt) in opts.items()}, p["reps"], budget_s=p["budget"])
    res = {"title": "AdamW step on CPU: single-tensor, foreach, fused", "machine": common.machine_info(),
           "settings": {**{k: p[k] for k in ("vocab", "buckets", "d_model", "d_ff")}, "parameters": n_params,
                        "layers": 2, "weight_decay": 0.01},
           "reps": len(times["single"]),
           "ms_per_step": {n: common.summary([t * 1e3 for t in ts]) for n, ts in times.items()},
           "speedup_over_single": {n: common.paired_ratio(times["single"], times[n]) for n in ("foreach", "fused")},
           "max_weight_difference_vs_single": diff}
    res["targets"] = [common.target("fused / single-tensor AdamW step", res["speedup_over_single"]["fused"]["median"],
                                    3.0),
                      common.target(f"largest weight difference after {p['check_steps']} steps",
                                    diff["fused"], 1e-6, higher_is_better=False, unit="")]
    common.write_result("optimizer", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"{common.classifier_line(s)}; weight decay {s['weight_decay']}. "
                              f"{res['reps']} interleaved repetitions, median (min–max); "
                              "speed-up per repetition.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = [[n, common.fmt_stat(res["ms_per_step"][n], 3, " ms"),
             "1" if n == "single" else common.fmt_stat(res["speedup_over_single"][n], 3, "×"),
             "0" if n == "single" else f"{res['max_weight_difference_vs_single'][n]:.1e}"]
            for n in CONTENDERS]
    parts.append("## One AdamW step\n\n" + common.md_table(
        ["AdamW", "time per step", "× vs single", "largest weight difference vs single"], rows))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
