"""Verdicts: does the measurement support a claim, contradict it, or not decide at this noise?

A check compares two cells of the grid (`a` and `b`, each picked by axis values) on one column
of the runs table, over their seeds:
  - `diff`: d = mean(a) − mean(b);
  - `ratio`: d = log(mean_geo(a) / mean_geo(b)), reported as the ratio a/b;
(`value`: one cell `a` alone, d = mean(a), with a one-sample t interval)
and states the region the claim puts d in: `{">": t}`, `{"<": t}` or `{"within": m}` (|d| <= m;
for ratios the thresholds are ratios, e.g. `{">": 1.5}`).
The 95% confidence interval of d is Welch's (unequal variances, t distribution with the
Welch–Satterthwaite degrees of freedom, over seeds). Verdict:
  - **supported**: the whole interval lies inside the claimed region;
  - **not supported**: the whole interval lies outside it;
  - **inconclusive at this noise level**: the interval straddles the region's edge (more seeds
    or a larger effect would be needed), a cell has fewer than 2 finished seeds, or every seed
    gave the same value (a zero-width interval; a deterministic column may say `"exact": true`);
  - **not run**: the grid lacks a cell the check needs (the `--quick` grids are smaller).
`diverged_more`: the runs of the cells matching `a` (pooled) diverge more often than those
matching `b`; one-sided Fisher exact test at 5% (supported if p < 0.05; not supported if the
opposite one-sided test has p < 0.05; otherwise inconclusive).
"""
from __future__ import annotations

import dataclasses

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import UserError
from .grid import label_of

SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "supported", "not supported", "inconclusive at this noise level"
NOT_RUN = "not run"  # a cell the check needs is not in this grid (e.g. the smaller --quick grid)
SMOKE = "smoke run (--quick): no verdict"  # what a --quick run says in place of a verdict


@dataclass
class Outcome:
    says: str  # the claim in words
    verdict: str
    measured: str  # "a − b = 0.012 [−0.004, 0.028] (95% CI, Welch, p = 0.12)"
    a: str
    b: str
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None


def welch_ci(a: np.ndarray, b: np.ndarray, level: float = 0.95) -> tuple[float, float, float, float] | None:
    """(difference of means, low, high, two-sided p) of Welch's t-test; None with < 2 values in either."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    d = float(a.mean() - b.mean())
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return d, d, d, (1.0 if d == 0 else 0.0)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = stats.t.ppf(0.5 + level / 2, df)
    p = float(2 * stats.t.sf(abs(d) / se, df))
    return d, d - t * se, d + t * se, p


def _region(region: dict, log: bool) -> tuple[str, float]:
    if len(region) != 1 or next(iter(region)) not in (">", "<", "within"):
        raise UserError(f"check region {region}: use {{'>': t}}, {{'<': t}} or {{'within': m}}")
    kind, t = next(iter(region.items()))
    return kind, (math.log(t) if log else float(t))


def classify_interval(low: float, high: float, kind: str, t: float) -> str:
    if kind == ">":
        return SUPPORTED if low > t else NOT_SUPPORTED if high <= t else INCONCLUSIVE
    if kind == "<":
        return SUPPORTED if high < t else NOT_SUPPORTED if low >= t else INCONCLUSIVE
    if -t <= low and high <= t:
        return SUPPORTED
    return NOT_SUPPORTED if low > t or high < -t else INCONCLUSIVE


def _select(runs: pd.DataFrame, selector: dict, axes: list[str], one: bool) -> pd.DataFrame:
    mask = pd.Series(True, index=runs.index)
    for axis, value in selector.items():
        if axis not in axes:
            raise UserError(f"check selector {selector}: no grid axis {axis!r}; axes: {', '.join(axes)}")
        mask &= runs[axis].astype(str) == label_of(value)
    picked = runs[mask]
    if one and picked["cell"].nunique() != 1:
        raise UserError(f"check selector {selector} matches {picked['cell'].nunique()} cells; it must pick one")
    return picked


def _name(selector: dict) -> str:
    return ", ".join(f"{k}={label_of(v)}" for k, v in selector.items())


def evaluate_check(check: dict, runs: pd.DataFrame, axes: list[str], quick: bool = False) -> Outcome:
    """The check's outcome on `runs`. `quick`: a smoke run (tiny model, few steps) measures but
    judges nothing: its verdict is SMOKE, never a verdict word (its numbers are not evidence)."""
    outcome = _evaluate_check(check, runs, axes)
    if quick and outcome.verdict != NOT_RUN:
        outcome = dataclasses.replace(outcome, verdict=SMOKE)
    return outcome


def _evaluate_check(check: dict, runs: pd.DataFrame, axes: list[str]) -> Outcome:
    kind = check.get("kind", "diff")
    if kind == "value":
        return _value(check, runs, axes)
    a_sel, b_sel = check["a"], check["b"]
    a_name, b_name = _name(a_sel), _name(b_sel)
    says = check.get("says", "")
    for sel in (a_sel, b_sel):
        if any(k not in axes for k in sel) or _select(runs, sel, axes, False).empty:
            return Outcome(says, NOT_RUN, f"this grid has no cell {_name(sel)}", a_name, b_name)
    if kind == "diverged_more":
        return _diverged_more(says, _select(runs, a_sel, axes, False), _select(runs, b_sel, axes, False), a_name, b_name)
    col = check["column"]
    a = _select(runs, a_sel, axes, True)
    b = _select(runs, b_sel, axes, True)
    if col not in runs.columns:
        return Outcome(says, INCONCLUSIVE, f"no {col} measured", a_name, b_name)
    xa = a.loc[~a["diverged"], col].dropna().to_numpy(float)
    xb = b.loc[~b["diverged"], col].dropna().to_numpy(float)
    log = kind == "ratio"
    if log:
        xa, xb = np.log(xa[xa > 0]), np.log(xb[xb > 0])
    res = welch_ci(xa, xb)
    if res is None:
        return Outcome(says, INCONCLUSIVE, f"{col}: fewer than 2 finished seeds ({len(xa)} vs {len(xb)})", a_name, b_name)
    if res[1] == res[2] and not check.get("exact", False):  # every seed gave the same value
        return Outcome(says, INCONCLUSIVE, f"{col}: a − b = {res[0]:+.4g} with no spread over seeds (a zero-width "
                       "interval is no evidence: the seeds did not vary it; mark a deterministic column \"exact\")",
                       a_name, b_name)
    d, low, high, p = res
    region_kind, t = _region(check["region"], log)
    verdict = classify_interval(low, high, region_kind, t)
    if log:
        measured = f"{col} ratio a/b = {math.exp(d):.3g} [{math.exp(low):.3g}, {math.exp(high):.3g}]"
        d, low, high = math.exp(d), math.exp(low), math.exp(high)
    else:
        measured = f"{col}: a − b = {d:+.4g} [{low:+.4g}, {high:+.4g}]"
    measured += f" (95% CI, Welch, p = {p:.2g}, n = {len(xa)} vs {len(xb)})"
    return Outcome(says, verdict, measured, a_name, b_name, d, low, high, p)


def _value(check: dict, runs: pd.DataFrame, axes: list[str]) -> Outcome:
    """One cell's mean of a column against the region: a one-sample t interval over seeds."""
    from scipy import stats

    sel, says, col = check["a"], check.get("says", ""), check["column"]
    name = _name(sel)
    if any(k not in axes for k in sel) or _select(runs, sel, axes, False).empty:
        return Outcome(says, NOT_RUN, f"this grid has no cell {name}", name, "")
    a = _select(runs, sel, axes, True)
    x = a.loc[~a["diverged"], col].dropna().to_numpy(float) if col in runs.columns else np.zeros(0)
    if len(x) < 2:
        return Outcome(says, INCONCLUSIVE, f"{col}: fewer than 2 finished seeds ({len(x)})", name, "")
    d, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))
    half = float(stats.t.ppf(0.975, len(x) - 1)) * se
    region_kind, t = _region(check["region"], False)
    verdict = classify_interval(d - half, d + half, region_kind, t)
    measured = f"{col} = {d:+.4g} [{d - half:+.4g}, {d + half:+.4g}] (95% CI, t, n = {len(x)})"
    return Outcome(says, verdict, measured, name, "", d, d - half, d + half)


def _diverged_more(says: str, a: pd.DataFrame, b: pd.DataFrame, a_name: str, b_name: str) -> Outcome:
    from scipy import stats

    ka, na, kb, nb = int(a["diverged"].sum()), len(a), int(b["diverged"].sum()), len(b)
    table = [[ka, na - ka], [kb, nb - kb]]
    p_more = float(stats.fisher_exact(table, alternative="greater")[1])
    p_less = float(stats.fisher_exact(table, alternative="less")[1])
    verdict = SUPPORTED if p_more < 0.05 else NOT_SUPPORTED if p_less < 0.05 else INCONCLUSIVE
    measured = f"diverged {ka}/{na} vs {kb}/{nb} (Fisher exact, one-sided p = {p_more:.2g})"
    return Outcome(says, verdict, measured, a_name, b_name, ka / max(na, 1) - kb / max(nb, 1), p=p_more)
