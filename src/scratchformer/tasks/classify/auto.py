"""The adaptive default of `train classify` (no --config): a recipe chosen from the data.

What earlier runs taught (README, "Classification results"):
  - CJK text: characters + hashed character bigrams, 2 layers of d128 (thucnews-demo: 83.6% in
    40 s; the tutorial's d256 / 4 layers / 10 epochs took 27 min and overfitted after epoch 4);
  - alphabetic text: lower-cased words (min_freq 2) + hashed word bigrams, 1 layer, dropout 0.5
    (rotten-tomatoes-scratch: 75.5%; BPE gave 71.8, no bigrams 73.7);
  - small data overfits: token dropout, label smoothing, early stopping on valid;
  - larger data carries a larger model (the tutorial's size from 100k texts).
Epochs are an upper bound: the time budget (`time_budget`, see budget.py) plans the steps
that fit, and early stopping ends a run that stopped improving. When one such run takes a
fraction of the budget, the rest trains more seeds (`ensemble` 0: as many as fit, at most 5),
whose averaged probabilities beat any one of them (thucnews: 85.7-86.4 against members 82-85).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ...train.distributed import world_size
from ...train.once import build_once, decide_once
from .baseline import is_alphabetic
from .budget import MAX_MEMBERS
from .recipe import ClassifyRecipe

DEFAULT_BUDGET_MIN = 8.0  # minutes for the whole `train classify`: baseline, training, test
MAX_BUCKETS = 50_000  # hashed bigram embeddings (the recipes that worked used 50k)
MIN_TEXTS_FOR_BIGRAMS = 2_000
PROFILE_SAMPLE = 200_000  # texts profiled for lengths and bigrams (and e5's estimate): a random sample of a bigger split


@dataclass(frozen=True)
class DataProfile:
    """What the choice depends on, measured on the training split."""

    n_train: int
    cjk: bool  # more than 30% of the characters are CJK
    p99_tokens: int  # characters (CJK) or words per text, 99th percentile
    distinct_bigrams: int  # character (CJK) or word bigrams seen in training

    @classmethod
    def of(cls, texts: Sequence[str]) -> "DataProfile":
        """The profile of `texts`; lengths and bigrams from the first PROFILE_SAMPLE of them
        (a training split is in seeded random order, so those are a random sample)."""
        cjk = not is_alphabetic(texts)
        units = [list(t.replace(" ", "")) if cjk else t.lower().split() for t in texts[:PROFILE_SAMPLE]]
        lengths = [len(u) for u in units] or [0]
        bigrams = {(a, b) for u in units for a, b in zip(u, u[1:])}
        return cls(len(texts), cjk, int(np.percentile(lengths, 99)), len(bigrams))

    @property
    def tier(self) -> str:
        return "small" if self.n_train < 20_000 else "medium" if self.n_train < 100_000 else "large"


def _round_up(x: float, to: int) -> int:
    return int(math.ceil(x / to) * to)


def choose(p: DataProfile, init: str | None = None) -> dict[str, Any]:
    """The recipe sections (only what differs from ClassifyRecipe's defaults) for data `p`;
    with `init` (a pretrained backbone) the backbone brings its tokenizer and size."""
    words_per_token = 1.0 if p.cjk else 1.25  # the word tokenizer splits punctuation off
    max_len = min(128, max(32, _round_up(p.p99_tokens * words_per_token + 2, 16)))
    data = {"max_len": max_len, "batch_size": 16 if p.n_train < 1000 else 32 if p.n_train < 4000 else 64,
            "label_smoothing": 0.1}
    train = {"lr": 1e-3, "warmup_steps": 100, "weight_decay": 0.01, "epochs": {"small": 8, "medium": 5, "large": 3}[p.tier],
             "early_stopping_patience": 4, "metric": "accuracy", "metric_mode": "max"}
    if init:
        # as rotten-tomatoes-minilm.json: the backbone at a tenth of the head's learning rate
        model = {"pooling": "mean", "head_dropout": 0.1, "encoder_lr_scale": 0.1, "bigram_buckets": 0,
                 "token_dropout": 0.0, "encoder": {"dropout": 0.1, "attn_dropout": 0.0}}
        data["batch_size"] = 32
        train.update(epochs=3, precision="bf16")
        return {"data": data, "model": model, "train": train}
    if p.cjk:
        data.update(tokenizer="char", min_freq=1)
    else:
        data.update(tokenizer="word", lowercase=True, min_freq=2 if p.n_train >= 2000 else 1)
    # below ~2k texts most bigrams are seen once or twice and their rows barely train (a
    # judgement, not a measurement: the recipes that gained from bigrams had 8-10k texts)
    buckets = 0 if p.n_train < MIN_TEXTS_FOR_BIGRAMS else min(MAX_BUCKETS, _round_up(2 * p.distinct_bigrams, 1000))
    sizes = {  # tier -> (d_model, heads, d_ff, layers CJK / alphabetic, dropout CJK / alphabetic, token dropout)
        "small": (128, 4, 256, (2, 1), (0.2, 0.5), (0.1, 0.2)),
        "medium": (256, 4, 512, (2, 2), (0.1, 0.3), (0.1, 0.1)),
        "large": (256, 8, 1024, (4, 4), (0.1, 0.1), (0.05, 0.05)),
    }[p.tier]
    d, heads, ff, layers, dropout, tok_drop = sizes
    k = 0 if p.cjk else 1
    model = {"pooling": "mean", "bigram_buckets": buckets, "head_dropout": dropout[k], "token_dropout": tok_drop[k],
             "encoder": {"d_model": d, "n_heads": heads, "d_ff": ff, "n_layers": layers[k], "dropout": dropout[k],
                         "norm_first": True, "activation": "gelu", "position": "sinusoidal"}}
    return {"data": data, "model": model, "train": train}


def auto_recipe(texts: Sequence[str], init: str | None = None,
                time_budget: float | None = DEFAULT_BUDGET_MIN) -> ClassifyRecipe:
    """The adaptive default for training texts `texts`: defaults, then `choose`'s sections."""
    d = ClassifyRecipe().to_dict()
    for section, values in choose(DataProfile.of(texts), init).items():
        _update(d[section], values)
    d["time_budget"] = time_budget
    # as many seeds as the budget fits: averaging 5 seeds gave +1.4 to +3 points on THUCNews
    # (README); a pretrained backbone is too slow for more than one here; under torchrun the
    # processes train one model together (members would train one after another)
    d["ensemble"] = 0 if time_budget is not None and not init and world_size() == 1 else 1
    # the run predicts with ours averaged with the TF-IDF baseline, the weight chosen on valid
    # (blend.py): on the five registered sets −0.1 to +1.7 points over TF-IDF, where ours alone
    # was −2.3 to +0.4 (README, "Your own data")
    d["blend"] = True
    return ClassifyRecipe.from_dict(d)


def _update(base: dict, new: dict) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _update(base[k], v)
        else:
            base[k] = v


def describe(r: ClassifyRecipe) -> str:
    """The recipe in one line (what a user needs to know to reproduce or change it)."""
    dc, m, t = r.data, r.model, r.train
    if m.init:
        arch = f"init {m.init} (its tokenizer and size), encoder lr x{m.encoder_lr_scale}"
    else:
        e = m.encoder
        tok = f"{dc.tokenizer}{' lower-cased' if dc.lowercase else ''}" + (f" + {m.bigram_buckets} hashed bigrams" if m.bigram_buckets else "") \
            + (f" + {m.trigram_buckets} hashed trigrams" if m.trigram_buckets else "")
        arch = (f"{tok}, d{e.d_model} x {e.n_layers} layer{'s' * (e.n_layers > 1)} ({e.n_heads} heads, ff {e.d_ff}), "
                f"dropout {e.dropout:g}, token dropout {m.token_dropout:g}")
    stop = f"<= {t.epochs} epochs" if t.epochs else f"{t.max_steps} steps"
    patience = f", early stopping after {t.early_stopping_patience} evals" if t.early_stopping_patience else ""
    budget = f", time budget {r.time_budget:g} min" if r.time_budget else ""
    if r.ensemble == 0:
        budget += f", as many seeds as fit (<= {MAX_MEMBERS}, probabilities averaged)"
    elif r.ensemble > 1:
        budget += f", ensemble of {r.ensemble} seeds"
    blend = ", blended with the TF-IDF baseline (weight chosen on valid)" if r.blend else ""
    return (f"{arch}, max_len {dc.max_len}, batch {dc.batch_size}, label smoothing {dc.label_smoothing:g}, "
            f"lr {t.lr:g}, {stop}{patience}{budget}{blend}")


def adaptive_recipe(sets: Sequence[str] = (), flags: dict[str, Any] | None = None,
                    time_budget: float = DEFAULT_BUDGET_MIN) -> ClassifyRecipe:
    """The recipe of a run without --config: the data (named by the `data.*` of `sets` and
    `flags`) is read and profiled, `auto_recipe` is the base, then every `--set` and flag
    applies on top as usual (defaults -> adaptive choice -> --set -> flags)."""
    from ..runs import resolve_recipe
    from .data import load_classification, texts_of

    data_sets = [s for s in sets if s.strip().startswith("data.")]
    data_flags = {k: v for k, v in (flags or {}).items() if k.startswith("data.")}
    where = resolve_recipe(ClassifyRecipe, None, data_sets, data_flags)
    texts = texts_of(build_once(lambda: load_classification(where.data)).train)  # may prepare into the cache
    if any(k.strip() == "time_budget" and v.strip().lower() in ("null", "none") for k, _, v in
           (s.partition("=") for s in sets)):
        time_budget = None  # no budget: one run (ensemble 0 needs a budget to count members)
    base = auto_recipe(texts, (flags or {}).get("model.init"), time_budget)
    return resolve_recipe(ClassifyRecipe, None, sets, flags, base=base)


# ----------------------------------------------------------------------------- e5 as a candidate

E5_SHARE = 0.5  # of the budget: e5 trains in one half, today's choice in the other
E5_MIN_BUDGET = 2.0  # minutes: below, e5 is not even estimated (loading it alone takes ~20 s)
E5_NON_EMBEDDING_PARAMS = 21.3e6  # multilingual-e5-small without its word embeddings
E5_EPOCHS = 1  # what one fine-tuning pass needs (a whole epoch of the training texts): the fit test
E5_MAX_EPOCHS = 4  # what the candidate trains when its share of the budget allows (THUCNews: 89.5% at 3, 90.6% at 4)
E5_TOKENS_EXTRA = 6  # <s>, </s> and "query: " (4 pieces) around each text
# Below this many valid texts "the better on valid" is noise (the standard error of an accuracy
# near 85% is ~2.5 points at 200 texts, ~7 at 24), and fetching + decoding e5 costs more than the
# whole run: e5 is not considered.
E5_MIN_VALID = 200


@dataclass(frozen=True)
class E5Estimate:
    """What fine-tuning e5 on these texts would take here, from a timed matmul (no download)."""

    minutes: float  # one epoch of training + one pass over valid and test
    gflops: float  # this machine's measured fp32 matmul throughput

    def fits(self, budget_min: float) -> bool:
        return self.minutes <= E5_SHARE * budget_min


def estimate_e5(texts: Sequence[str], n_eval: int, gflops: float | None = None) -> E5Estimate:
    """Training costs ~6 FLOPs per parameter per token (forward + backward), evaluation 2; the
    word embeddings are lookups. ~20 tokens per Chinese headline: tokens ≈ characters × 0.8 +
    the specials and prefix (measured on THUCNews: 21.4 per headline). Overheads (attention,
    LayerNorm, Python) are taken as 1.5x."""
    if gflops is None:
        gflops = measured_gflops()
    cjk = not is_alphabetic(texts)
    chars = float(np.mean([len(t) for t in texts[:PROFILE_SAMPLE]])) if len(texts) else 0.0
    tokens_per_text = (0.8 * chars if cjk else 0.3 * chars) + E5_TOKENS_EXTRA
    flops = E5_NON_EMBEDDING_PARAMS * tokens_per_text * (6 * E5_EPOCHS * len(texts) + 2 * n_eval)
    return E5Estimate(1.5 * flops / (gflops * 1e9) / 60, gflops)


def measured_gflops(seconds: float = 0.3) -> float:
    """fp32 matmul throughput of e5's FFN shape (batch 768 tokens x 384 -> 1536), now, here."""
    import time

    import torch

    a, w = torch.randn(768, 384), torch.randn(1536, 384)
    torch.nn.functional.linear(a, w)  # warm up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        torch.nn.functional.linear(a, w)
        n += 1
    return 2 * 768 * 384 * 1536 * n / (time.perf_counter() - t0) / 1e9


def e5_recipe(base: ClassifyRecipe, time_budget: float) -> ClassifyRecipe:
    """The e5 candidate of the adaptive default: recipes/thucnews-e5.json's settings on the
    user's data, in its share of the budget: at least the one epoch the fit test asked for, up to
    `E5_MAX_EPOCHS` when the budget planner finds the time."""
    d = base.to_dict()
    _update(d, {"model": {"init": "e5", "pooling": "mean", "head_dropout": 0.1, "encoder_lr_scale": 0.1,
                          "bigram_buckets": 0, "token_dropout": 0.0, "encoder": {"dropout": 0.0, "attn_dropout": 0.0}},
                "data": {"batch_size": 32, "label_smoothing": 0.1},
                "train": {"epochs": E5_MAX_EPOCHS, "precision": "fp32", "schedule": "linear", "warmup_steps": 6}})
    d.update(time_budget=time_budget, ensemble=1, plan=None)
    return ClassifyRecipe.from_dict(d)


def user_chosen_model(sets: Sequence[str]) -> str | None:
    """The first `--set model.…` key: the user chose (or shaped) the model themselves."""
    return next((k.strip() for k, _, _ in (s.partition("=") for s in sets) if k.strip().startswith("model.")), None)


def e5_decision(texts: Sequence[str], n_eval: int, budget_min: float | None, log,
                estimate: E5Estimate | None = None, n_valid: int | None = None,
                sets: Sequence[str] = ()) -> E5Estimate | None:
    """Whether the adaptive default trains e5 beside today's choice: the estimate when it fits
    `E5_SHARE` of the budget and the valid split can tell the two apart, else None (the log says
    why either way). A `--set model.…` in `sets` means the user chose the model: no other
    candidate. Under torchrun the estimate is rank 0's (its timed matmul), for every process."""
    chosen = user_chosen_model(sets)
    if chosen is not None:
        log(f"adaptive default: e5 not considered: --set {chosen} chose the model (today's choice with your "
            "settings trains alone; --init e5 asks for e5)")
        return None
    if budget_min is None:
        log("adaptive default: e5 not considered (no time budget to plan it in)")
        return None
    if n_valid is not None and n_valid < E5_MIN_VALID:
        log(f"adaptive default: e5 not considered: {n_valid} valid texts cannot tell two models apart "
            f"(it needs at least {E5_MIN_VALID}; today's choice stands)")
        return None
    # one timed matmul, whose answer every process shares
    est = decide_once(lambda: estimate or estimate_e5(texts, n_eval), as_=E5Estimate)
    if not est.fits(budget_min):
        need = math.ceil(est.minutes / E5_SHARE)
        log(f"adaptive default: e5 not considered: fine-tuning it needs ~{est.minutes:.0f} min here "
            f"({est.gflops:.0f} GFLOP/s measured), more than {E5_SHARE:.0%} of the {budget_min:g}-min budget; "
            f"--time-budget {need} lets it compete (today's choice stands)")
        return None
    log(f"adaptive default: e5 fits ({est.minutes:.1f} min estimated of {budget_min:g}): it trains in half the "
        f"budget beside today's choice, and the one better on valid is kept")
    return est


def e5_candidate(recipe: ClassifyRecipe, log=print, chosen: bool = False,
                 sets: Sequence[str] = ()) -> ClassifyRecipe | None:
    """The adaptive default's second candidate: multilingual-e5-small fine-tuned in `E5_SHARE`
    of the budget (`e5_recipe`), or None: when the user chose the recipe themselves (`chosen`:
    --config, --resume, --init or --teacher), when the budget is under `E5_MIN_BUDGET`, or when
    `e5_decision` says it does not fit or could not be told apart on valid (the log says why)."""
    if chosen or (recipe.time_budget or 0) < E5_MIN_BUDGET:
        return None
    from .data import load_classification, texts_of

    data = build_once(lambda: load_classification(recipe.data))
    est = e5_decision(texts_of(data.train), len(data.valid) + len(data.test), recipe.time_budget, log,
                      n_valid=len(data.valid), sets=sets)
    return e5_recipe(recipe, E5_SHARE * recipe.time_budget) if est else None

