"""Measurements of a finished run beyond its metrics, made from the run folder.

Head redundancy (for the claim "many heads become redundant"): for one text and one layer,
flatten each head's attention map (T × T) and take the mean cosine similarity over all pairs
of heads; average over the layers and the texts. 1.0: every head attends alike (redundant);
lower: heads look at different places. Attention maps are non-negative, so even unrelated heads
score above 0 (two uniform maps score 1). Undefined (NaN) for a single head.

Attention distance by layer (for the claim "shallow heads attend locally, deep heads more
broadly"): for one text and one layer, the mean over heads and queries of sum_k p_k |q − k| in
tokens, divided by the same for uniform weights over the text (1 = as far as a uniform head,
near 0 = the neighbours); columns `distance_layer1` .. `distance_layerL` and
`distance_last_minus_first` (> 0: the last layer looks further than the first), averaged over
the texts.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch


def mean_pairwise_cosine(maps: torch.Tensor) -> float:
    """maps `(H, T, T)` (one layer's heads) -> the mean cosine similarity over the H·(H−1)/2
    pairs of flattened maps; NaN for H < 2."""
    h = maps.shape[0]
    if h < 2:
        return math.nan
    flat = torch.nn.functional.normalize(maps.reshape(h, -1).double(), dim=1)  # (H, T·T)
    sim = flat @ flat.T  # (H, H)
    upper = torch.triu_indices(h, h, offset=1)
    return float(sim[upper[0], upper[1]].mean())


def head_redundancy(layers: list[torch.Tensor]) -> float:
    """Mean over layers of `mean_pairwise_cosine`; `layers` as returned by
    `Classifier.attention(text)[1]`: one `(H, T, T)` tensor per layer."""
    values = [mean_pairwise_cosine(w) for w in layers]
    return sum(values) / len(values) if values else math.nan


def classifier_head_redundancy(run_dir: Path, texts: list[str]) -> float:
    """Head redundancy of a classification run over `texts` (through the public
    `Classifier.load(run).attention(text)`)."""
    from ..tasks.classify import Classifier

    clf = Classifier.load(run_dir, blend=False)  # the Transformer, not its blend with TF-IDF
    values = [head_redundancy(clf.attention(t)[1]) for t in texts if t.strip()]
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def layer_distances(layers: list[torch.Tensor]) -> list[float]:
    """Per layer: mean attention distance / the uniform row's, `layers` one `(H, T, T)` each."""
    T = layers[0].shape[-1]
    dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).abs().double()  # (T, T)
    uniform = float(dist.mean())
    return [float((w.double() * dist).sum(-1).mean()) / uniform if uniform > 0 else math.nan for w in layers]


def classifier_attention_distance(run_dir: Path, texts: list[str]) -> dict[str, float]:
    """`layer_distances` of a classification run, averaged over `texts` (texts of 3+ tokens)."""
    from ..tasks.classify import Classifier

    clf = Classifier.load(run_dir, blend=False)
    rows = []
    for t in texts:
        weights = clf.attention(t)[1]
        if t.strip() and weights[0].shape[-1] >= 3:
            rows.append(layer_distances(weights))
    if not rows:
        return {}
    mean = [sum(col) / len(col) for col in zip(*rows)]
    out = {f"distance_layer{i + 1}": v for i, v in enumerate(mean)}
    out["distance_last_minus_first"] = mean[-1] - mean[0]
    return out


def lm_extrapolation(run_dir: Path, texts: list[str]) -> dict[str, float]:
    """Loss at 1-8x the training context, per position bucket (several columns; extrapolation.py)."""
    from .extrapolation import lm_extrapolation as measure

    return measure(run_dir, texts)


def length_buckets(run_dir: Path, texts: list[str]) -> dict[str, float]:
    """Test accuracy per third of the texts by length, and time per epoch (several columns; lengths.py)."""
    from .lengths import classifier_length_buckets

    return classifier_length_buckets(run_dir, texts)


# A measure gives one number (a column named after it) or a dict of numbers (one column each).
MEASURES = {"head_redundancy": classifier_head_redundancy, "attention_distance": classifier_attention_distance, "extrapolation": lm_extrapolation,
            "length_buckets": length_buckets}
