"""One training step of the THUCNews-100k recipe with dense and with sparse n-gram gradients.

The model is `recipes/thucnews100k-scratch.json`'s classifier: d128, 2 layers and 200,000 hashed
bigram buckets (the recipe's table when this was measured; 600,000 since 2026-12-04), so 25.6M of
its 26.6M parameters sit in one table. Its step is what the trainer runs for that recipe: R-Drop's
two forward passes in one loss, a backward, then adversarial training's second forward/backward at
moved embeddings (train/adversarial.py), clipping and the fused AdamW step, on a batch of 64
headlines of 22 characters.

Contenders (same weights, same batch, interleaved, one process):
  - dense: each backward through the bigram table fills a 200,000 × 128 zero gradient and adds
    it into `.grad`: four times a step, for the ~1,400 rows the batch touches;
  - sparse: what the trainer does now (train/sparse_embeddings.py): the marked tables return
    sparse gradients, and they are made dense once, before clipping.
The loss is the recipe's own (`ClassificationTask.loss_sum`). Also recorded: the largest
difference in any weight after one step (in eval mode, without dropout or R-Drop's second pass,
so the two are the same computation up to the order of float sums). After one step, not several:
a parameter whose true gradient is zero (attention's key bias) gets only rounding noise, which
Adam scales up to lr-sized moves, so over 5 steps the two runs drift apart by ~7e-6 in that bias
without either being wrong.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

from scratchformer.models.classifier import build_classifier
from scratchformer.tasks.classify.data import ClassifyBatch
from scratchformer.tasks.classify.recipe import ClassifyRecipe
from scratchformer.tasks.classify.task import ClassificationTask
from scratchformer.train.adversarial import EmbeddingAdversary
from scratchformer.train.optim import adamw, param_groups
from scratchformer.train.sparse_embeddings import SparseEmbeddings, densify_gradients

from . import common

CONTENDERS = ("dense", "sparse")
RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "thucnews100k-scratch.json"


def plan(quick: bool) -> dict:
    if quick:
        return dict(vocab=300, buckets=1000, d_model=32, d_ff=64, batch=8, length=10, reps=3, budget=None,
                    check_steps=1)
    return dict(vocab=4446, buckets=200_000, d_model=128, d_ff=512, batch=64, length=22, reps=12, budget=90.0,
                check_steps=1)


def _recipe(p: dict):
    """The scratch recipe as shipped (R-Drop, label smoothing, token dropout, adversarial eps), at `p`'s sizes."""
    recipe = ClassifyRecipe.from_dict(json.loads(RECIPE.read_text()))
    m = recipe.model
    m.vocab_size, m.n_classes, m.bigram_buckets = p["vocab"], 10, p["buckets"]
    m.encoder.d_model, m.encoder.d_ff = p["d_model"], p["d_ff"]
    return recipe


def _batch(p: dict) -> ClassifyBatch:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, p["vocab"], (p["batch"], p["length"]), generator=g)  # (B, T)
    bigrams = torch.randint(1, p["buckets"], (p["batch"], p["length"]), generator=g)  # (B, T)
    return ClassifyBatch(ids, torch.randint(0, 10, (p["batch"],), generator=g), bigrams)


def _stepper(p: dict, sparse: bool, train: bool):
    """The step function of one contender: its own model, optimizer and adversary. `train=False`
    runs it in eval mode: no dropout draws (nor R-Drop's second pass), so two contenders compute
    the same thing."""
    recipe = _recipe(p)
    torch.manual_seed(0)
    model = build_classifier(recipe.model).train(train)
    task = ClassificationTask(model, recipe, None, [])  # the recipe's loss, R-Drop included
    opt, _ = adamw(param_groups(model, 0.01), 1e-3, (0.9, 0.999), 1e-8)
    adversary = EmbeddingAdversary(model, recipe.train.adversarial)
    tables = SparseEmbeddings(model) if sparse else None
    b = _batch(p)
    params = list(model.parameters())

    def backward():
        loss, _ = task.loss_sum(b)
        (loss / len(b.labels)).backward()

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
    exact = {n: _stepper(p, n == "sparse", train=False) for n in CONTENDERS}
    for _ in range(p["check_steps"]):
        for _, step in exact.values():
            step()
    diff = max(float((a - b).detach().abs().max())
               for a, b in zip(exact["dense"][0].parameters(), exact["sparse"][0].parameters()))
    steppers = {n: _stepper(p, n == "sparse", train=True)[1] for n in CONTENDERS}
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
                      common.target(f"largest weight difference after {p['check_steps']} step(s)", diff, 1e-6,
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
