"""One training step of the THUCNews-100k recipe with dense and with sparse n-gram gradients.

The model is `recipes/thucnews100k-scratch.json`'s classifier: d128, 2 layers and 200,000 hashed
bigram buckets, so 25.6M of its 26.6M parameters sit in one table. Its step is what the trainer
runs for that recipe: R-Drop's two forward passes in one loss, a backward, then adversarial
training's second forward/backward at moved embeddings (train/adversarial.py), clipping and the
fused AdamW step, on a batch of 64 headlines of 22 characters.

Contenders (same weights, same batch, interleaved, one process):
  - dense: each backward through the bigram table fills a 200,000 × 128 zero gradient and adds
    it into `.grad`: four times a step, for the ~1,400 rows the batch touches;
  - sparse: what the trainer does now (train/sparse_embeddings.py): the marked tables return
    sparse gradients, and they are made dense once, before clipping.
Also recorded: the largest difference in any weight after a few steps (in eval mode, without
dropout, so the two are the same computation up to the order of float sums).
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from scratchformer.models.classifier import ClassifierConfig, build_classifier
from scratchformer.train.adversarial import EmbeddingAdversary
from scratchformer.train.optim import adamw, param_groups
from scratchformer.train.sparse_embeddings import SparseEmbeddings, densify_gradients

from . import common

CONTENDERS = ("dense", "sparse")


def plan(quick: bool) -> dict:
    if quick:
        return dict(vocab=300, buckets=1000, d_model=32, d_ff=64, batch=8, length=10, reps=3, budget=None,
                    check_steps=2)
    return dict(vocab=4446, buckets=200_000, d_model=128, d_ff=512, batch=64, length=22, reps=12, budget=90.0,
                check_steps=5)


def _model(p: dict, dropout: float) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = ClassifierConfig.from_dict({"vocab_size": p["vocab"], "n_classes": 10, "pooling": "mean",
                                      "bigram_buckets": p["buckets"], "token_dropout": 0.1,
                                      "encoder": {"d_model": p["d_model"], "n_heads": 4, "d_ff": p["d_ff"],
                                                  "n_layers": 2, "norm_first": True, "activation": "gelu",
                                                  "dropout": dropout}})
    return build_classifier(cfg)


def _batch(p: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, p["vocab"], (p["batch"], p["length"]), generator=g)  # (B, T)
    bigrams = torch.randint(1, p["buckets"], (p["batch"], p["length"]), generator=g)  # (B, T)
    return ids, bigrams, torch.randint(0, 10, (p["batch"],), generator=g)


def _stepper(p: dict, sparse: bool, dropout: float):
    """The step function of one contender: its own model, optimizer and adversary."""
    model = _model(p, dropout).train(dropout > 0)  # eval mode: no head or token dropout either
    opt, _ = adamw(param_groups(model, 0.01), 1e-3, (0.9, 0.999), 1e-8)
    adversary = EmbeddingAdversary(model, 2.0)
    tables = SparseEmbeddings(model) if sparse else None
    ids, bigrams, labels = _batch(p)
    params = list(model.parameters())

    def backward():
        first, second = model(ids, bigrams), model(ids, bigrams)  # R-Drop: two dropout draws, (B, 10) each
        lp, lq = F.log_softmax(first, -1), F.log_softmax(second, -1)
        kl = F.kl_div(lq, lp, log_target=True, reduction="sum") + F.kl_div(lp, lq, log_target=True, reduction="sum")
        loss = (F.cross_entropy(first, labels, reduction="sum") + F.cross_entropy(second, labels, reduction="sum")
                + 0.5 * kl) / 2
        (loss / len(labels)).backward()

    def step():
        with tables.active() if tables else contextlib.nullcontext():
            with adversary.record():
                backward()
            with adversary.perturb():
                backward()
        densify_gradients(params)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    exact = {n: _stepper(p, n == "sparse", dropout=0.0) for n in CONTENDERS}
    for _ in range(p["check_steps"]):
        for _, step in exact.values():
            step()
    diff = max(float((a - b).detach().abs().max())
               for a, b in zip(exact["dense"][0].parameters(), exact["sparse"][0].parameters()))
    steppers = {n: _stepper(p, n == "sparse", dropout=0.2)[1] for n in CONTENDERS}
    n_params = sum(x.numel() for x in exact["dense"][0].parameters())
    log(f"[sparse_embeddings] {n_params / 1e6:.1f}M parameters, {p['reps']} interleaved steps each")
    times = common.interleaved(steppers, p["reps"], budget_s=p["budget"])
    res = {"title": "A training step with dense and sparse n-gram gradients (R-Drop + adversarial)",
           "machine": common.machine_info(),
           "settings": {**{k: p[k] for k in ("vocab", "buckets", "d_model", "d_ff", "batch", "length")},
                        "parameters": n_params, "layers": 2, "backward_passes": 2, "forward_passes": 4},
           "reps": len(times["dense"]),
           "ms_per_step": {n: common.summary([t * 1e3 for t in ts]) for n, ts in times.items()},
           "speedup_over_dense": common.paired_ratio(times["dense"], times["sparse"]),
           "max_weight_difference": diff}
    res["targets"] = [common.target("sparse / dense training step", res["speedup_over_dense"]["median"], 1.15),
                      common.target(f"largest weight difference after {p['check_steps']} steps", diff, 1e-6,
                                    higher_is_better=False, unit="")]
    common.write_result("sparse_embeddings", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"{common.classifier_line(s)}; a batch of {s['batch']} × {s['length']} tokens, "
                              f"{s['forward_passes']} forward and {s['backward_passes']} backward passes a step "
                              f"(R-Drop + adversarial), clipping and fused AdamW. {res['reps']} interleaved "
                              "repetitions, median (min–max); speed-up per repetition.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = [[n, common.fmt_stat(res["ms_per_step"][n], 3, " ms"),
             "1" if n == "dense" else common.fmt_stat(res["speedup_over_dense"], 3, "×")] for n in CONTENDERS]
    parts.append("## One training step\n\n" + common.md_table(["n-gram gradients", "time per step", "× vs dense"], rows)
                 + f"\n\nLargest weight difference after the check steps: {res['max_weight_difference']:.1e}.")
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
