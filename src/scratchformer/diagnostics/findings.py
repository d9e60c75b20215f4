"""From measurements to findings: what was measured, what is normal, what it means, what to
try. Thresholds are stated in each finding so a reader can disagree with them."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

LEVELS = ("error", "warning", "note", "ok")  # most serious first

PAD_TOL = 1e-4  # a masked key gets exactly 0; allow float noise only
GREEDY_GAP = 0.3  # teacher-forced minus greedy token accuracy that says "the decoder cheated"
DUPLICATE = 0.95  # 1 - mean total-variation distance between two heads' rows
IDENTITY = 0.9  # mean weight of a token on itself
FIXED = 0.9  # mean weight all queries give one key position
SPECIAL_HEAVY = 0.5
LOCAL, GLOBAL = 0.35, 0.7  # mean distance / distance of a uniform head
UNK_WARN = 0.05
GRAD_SPREAD = 1e3  # largest / smallest per-layer gradient norm
BARELY_MOVED = 1e-3  # median relative change of trained embedding rows


@dataclass
class Finding:
    key: str  # stable id, e.g. "padding_mass"
    level: str  # error | warning | note | ok
    title: str
    measured: str
    normal: str
    meaning: str
    action: str
    where: list[str] = field(default_factory=list)  # e.g. ["encoder self-attention L1 H2"]


def head_name(view: str, layer: int, head: int) -> str:
    return f"{view} L{layer + 1} H{head + 1}"


def _where(view: str, mask: torch.Tensor) -> list[str]:
    return [head_name(view, li, h) for li, h in mask.nonzero().tolist()]


def padding(view: str, stats) -> Finding:
    m = stats["pad_mass"]
    if stats["padded_keys"] == 0:
        return Finding("padding_mass", "note", f"{view}: no padding in the samples", "no padded keys in these batches",
                       "0 attention on padding", "the padding mask could not be checked here",
                       "run with more --samples (batches mix lengths, so padding appears)")
    bad = m > PAD_TOL
    worst = float(m.max())
    if not bool(bad.any()):
        return Finding("padding_mass", "ok", f"{view}: no attention on padding",
                       f"largest mean attention mass on padding keys {worst:.2e}", "exactly 0",
                       "the padding mask works", "nothing")
    return Finding("padding_mass", "error", f"{view}: attention leaks onto padding",
                   f"mean attention mass on padding keys up to {worst:.3f} (per head, per real query)",
                   "exactly 0: masked keys get probability 0",
                   "the padding mask is not applied (or applied with the wrong polarity or dtype): outputs "
                   "depend on how much padding a batch has, so the same text scores differently in another batch",
                   "pass a boolean key-padding mask with True = real token to every attention layer; check it "
                   "is not an integer 0/1 mask added to the scores", _where(view, bad))


def future(view: str, stats) -> Finding:
    """A causal view (decoder self-attention) must put no weight on keys after the query."""
    m = stats["future_mass"]
    worst = float(m.max())
    if not bool((m > PAD_TOL).any()):
        return Finding("future_mass", "ok", f"{view}: no attention on future positions",
                       f"largest mean attention mass on later positions {worst:.2e}", "exactly 0",
                       "the causal mask works", "nothing")
    return Finding("future_mass", "error", f"{view}: attention on future positions",
                   f"mean attention mass on positions after the query up to {worst:.3f} (per head, per real query)",
                   "exactly 0: a decoder may read only the tokens before the one it predicts",
                   "the causal mask is missing: in training each position reads the next target token, so the "
                   "loss collapses, but at generation there is no future to read and the output fails",
                   "mask the decoder's self-attention causally (is_causal=True, or a lower-triangular bool mask "
                   "with True = may attend)", _where(view, m > PAD_TOL))


def greedy_gap(teacher_forced: float, greedy: float) -> Finding:
    """Token accuracy when the decoder is given the true prefix vs when it reads its own output."""
    gap = teacher_forced - greedy
    measured = f"token accuracy teacher-forced {teacher_forced:.1%}, greedy decoding {greedy:.1%} (gap {gap:+.1%})"
    if gap <= GREEDY_GAP:
        return Finding("greedy_gap", "ok", "greedy decoding close to teacher-forced accuracy", measured,
                       f"a gap below {GREEDY_GAP:.0%} (decoding compounds its own errors, so some gap is normal)",
                       "what the model learned in training carries over to generation", "nothing")
    return Finding("greedy_gap", "error", "greedy decoding far below teacher-forced accuracy", measured,
                   f"a gap below {GREEDY_GAP:.0%}",
                   "the decoder learned from something it does not have when it generates: the target it "
                   "predicts was visible in training (no causal mask, or a decoder input not shifted right by "
                   "<bos>)", "check the causal mask and that the decoder input is <bos> + target[:-1] while the "
                   "labels are target")


def specials(view: str, stats) -> list[Finding]:
    out = []
    for key, m in stats.items():
        if not key.startswith("special_mass["):
            continue
        tok = key[len("special_mass["):-1]
        heavy = m > SPECIAL_HEAVY
        level = "note" if bool(heavy.any()) else "ok"
        out.append(Finding("special_mass", level, f"{view}: attention on {tok}",
                           f"mean mass on {tok} per head: mean {float(m.mean()):.3f}, max {float(m.max()):.3f}; "
                           f"{int(heavy.sum())} head(s) above {SPECIAL_HEAVY}",
                           "a few heads resting on a special token is common (BERT's [SEP]/[CLS] heads, "
                           "'attention sinks'); most heads should look at content",
                           "a head that parks its mass on a special token mostly adds a constant: it is "
                           "doing little for this input",
                           "check the head's importance below; if removing it costs nothing it can be pruned",
                           _where(view, heavy)))
    return out


def shapes(view: str, stats) -> Finding:
    """Entropy and distance per layer: which heads are local, which global."""
    ent = stats["entropy"]
    lines = []
    for li in range(ent.shape[0]):
        part = f"layer {li + 1}: entropy " + " ".join(f"{float(x):.2f}" for x in ent[li])
        if "distance" in stats:
            ratio = stats["distance"][li] / stats["uniform_distance"][li].clamp(min=1e-9)
            kinds = ["local" if r < LOCAL else "global" if r > GLOBAL else "mixed" for r in ratio.tolist()]
            part += "; distance " + " ".join(f"{float(d):.1f}" for d in stats["distance"][li]) + \
                    " tokens (" + " ".join(kinds) + ")"
        lines.append(part)
    return Finding("head_shapes", "ok", f"{view}: entropy and reach of each head", "; ".join(lines),
                   "entropy 0 = one key, 1 = uniform over the allowed keys; a trained model usually has "
                   "some local heads (neighbours, small distance) in early layers and broader heads later",
                   "all heads near 1 = they average everything (undertrained, or the task needs only a bag "
                   "of words); all near 0 with distance ~0 = they copy their own token",
                   "compare with the importance table: focused heads that matter are the interesting ones")


def duplicates(view: str, stats) -> Finding:
    sim = stats["similarity"]  # (L, H, H)
    pairs = []
    for li in range(sim.shape[0]):
        for a in range(sim.shape[1]):
            for b in range(a + 1, sim.shape[2]):
                if float(sim[li, a, b]) >= DUPLICATE:
                    pairs.append((li, a, b, float(sim[li, a, b])))
    off = sim.clone()
    for li in range(sim.shape[0]):
        off[li].fill_diagonal_(0.0)
    top = float(off.max()) if off.numel() else 0.0
    if not pairs:
        return Finding("redundant_heads", "ok", f"{view}: no duplicate heads",
                       f"largest similarity between two heads of a layer {top:.3f}",
                       f"below {DUPLICATE} (1 - mean total-variation distance of their rows)",
                       "each head attends in its own way", "nothing")
    return Finding("redundant_heads", "warning", f"{view}: near-duplicate heads",
                   "; ".join(f"layer {li + 1}: H{a + 1} ~ H{b + 1} ({s:.3f})" for li, a, b, s in pairs),
                   f"below {DUPLICATE}: heads of a trained layer usually differ",
                   "two heads with the same map spend parameters on one pattern (identical initialisation, "
                   "a copy bug, or collapse)",
                   "check that heads are initialised independently; prune one of each pair if its "
                   "importance is low; or use fewer heads",
                   [f"{head_name(view, li, a)} ~ H{b + 1}" for li, a, b, _ in pairs])


def identity_and_fixed(view: str, stats, fixed_name) -> list[Finding]:
    out = []
    if "diagonal" in stats:
        diag = stats["diagonal"]
        bad = diag >= IDENTITY
        out.append(Finding(
            "identity_heads", "warning" if bool(bad.any()) else "ok",
            f"{view}: heads attending only to themselves" if bool(bad.any()) else f"{view}: no identity heads",
            f"mean weight of a token on itself: max {float(diag.max()):.3f}", f"below {IDENTITY}",
            "such a head passes each token's own value through: it mixes no information between tokens",
            "look at its map; if it is unimportant prune it, otherwise it acts like an extra feed-forward",
            _where(view, bad)))
    top = stats["top_column"]
    bad = top >= FIXED
    if "diagonal" in stats:
        bad &= stats["diagonal"] < IDENTITY
    names = [f"{head_name(view, li, h)} -> {fixed_name(li, h)}" for li, h in bad.nonzero().tolist()]
    out.append(Finding(
        "fixed_position_heads", "note" if bool(bad.any()) else "ok",
        f"{view}: heads looking at one fixed position" if names else f"{view}: no fixed-position heads",
        f"largest mean weight that all queries give one key: max {float(top.max()):.3f}", f"below {FIXED}",
        "every token reads the same position (often <cls>, the first token or an end marker): "
        "a no-op or a 'sink' rather than a relation between tokens",
        "check its importance; if removing it costs nothing it can be pruned", names))
    return out


def importance(base: float, delta: dict[str, torch.Tensor], together: float | None,
               prunable: list[str], tol: float) -> Finding:
    lines = []
    for view, d in delta.items():
        for li in range(d.shape[0]):
            lines.append(f"{view} layer {li + 1}: " + " ".join(f"{float(x):+.4f}" for x in d[li]))
    together_txt = "" if together is None else f"; all {len(prunable)} removed together: loss {together:.4f} ({together - base:+.4f})"
    lower = sum(int((d < 0).sum()) for d in delta.values())
    meaning = f"heads whose removal raises the loss by at most {tol:.4f} do not contribute on these samples"
    if lower:
        meaning += (f"; removing {lower} head(s) even lowers it, a sign that the model fits its training data "
                    "more closely than these samples (overfitting)")
    if together is not None and together - base > tol:
        meaning += "; removed together they do cost: they stand in for one another"
    return Finding("head_importance", "note" if prunable else "ok",
                   f"head importance: {len(prunable)} head(s) can be removed one at a time at no cost",
                   f"loss {base:.4f} on the samples; loss change when one head is removed: " + "; ".join(lines)
                   + together_txt,
                   "in trained Transformers many heads can be removed with little loss (Michel et al. 2019)",
                   meaning, "fewer heads or layers, more dropout or head pruning; confirm on the full validation set",
                   prunable)


def layer_health(norms: dict, bad_params: list) -> list[Finding]:
    out = []
    if bad_params:
        out.append(Finding("non_finite_weights", "error", "non-finite values in the weights",
                           "; ".join(f"{n}: {k} of {s}" for n, k, s in bad_params[:10]), "all weights finite",
                           "NaN/inf weights make every output that touches them NaN: training diverged "
                           "(too high a learning rate, fp16 overflow, a log of 0 or a division by 0)",
                           "restart from an earlier checkpoint with a lower lr, warmup, grad clipping; "
                           "find the first step whose loss was NaN in metrics.jsonl",
                           [n for n, _, _ in bad_params]))
    layers = norms["layers"]
    bad_act = [r["name"] for r in layers if not r.get("act_finite", True)]
    bad_grad = [r["name"] for r in layers if not r.get("grad_finite", True)] + norms["non_finite_grads"]
    table = "; ".join(f"{r['name']}: activation rms {r.get('act_rms', float('nan')):.3g}, gradient rms "
                      f"{r.get('grad_rms', float('nan')):.3g}, parameter gradient {r['param_grad_norm']:.3g}" for r in layers)
    if bad_act or bad_grad or norms["loss"] != norms["loss"]:
        out.append(Finding("non_finite_values", "error", "non-finite activations or gradients",
                           f"loss {norms['loss']:.4g}; not finite: {', '.join(bad_act + bad_grad) or 'the loss'}",
                           "all finite", "the forward or backward pass produces NaN/inf",
                           "see the weights finding; else look for log(0), division by 0, or overflow "
                           "under fp16/bf16 in the first layer listed", bad_act + bad_grad))
        return out
    g = [r["param_grad_norm"] for r in layers if r["param_grad_norm"] > 0]
    spread = max(g) / min(g) if g else 1.0
    level = "warning" if spread > GRAD_SPREAD else "ok"
    out.append(Finding("layer_norms", level,
                       "gradients vanish or explode across layers" if level == "warning" else "activations and gradients per layer",
                       f"on the first sample batch: loss {norms['loss']:.4f}; {table}; largest / smallest parameter gradient {spread:.3g}",
                       f"per-layer gradient norms within a factor {GRAD_SPREAD:g} of each other",
                       "layers whose gradient is orders of magnitude smaller barely learn (vanishing); "
                       "much larger ones make training unstable (exploding)",
                       "Pre-LN (norm_first), warmup, gradient clipping, a smaller lr; check the "
                       "initialisation of the layers that stand out"))
    return out


def embeddings(table, rows: dict[str, list[int]], sample_ids: set[int]) -> Finding:
    n = table.weight.shape[0]
    seen, unseen, later = rows["seen"], rows["unseen"], rows.get("later", [])
    if table.hashed:
        share = (len(unseen) + len(rows["unknown_count"]) + len(seen) + len(later)) / max(n, 1)
        return Finding("embedding_rows", "ok", f"{table.name}: hash buckets never updated",
                       f"{share:.1%} of {n} buckets still at their initial values",
                       "hashed tables have buckets no training bigram falls into", "those buckets add "
                       "random noise only for bigrams unseen in training", "nothing (fewer buckets save memory)")
    typical = rows["typical_change"]
    if typical == typical and typical < BARELY_MOVED:
        return Finding("embedding_rows", "warning", f"{table.name}: barely moved from its initialisation",
                       f"median relative change of the rows of training tokens {typical:.1e}",
                       f"well above {BARELY_MOVED:g} after training",
                       "the embedding has hardly been trained: too few steps, a learning rate near 0 "
                       "(warmup not finished), or weights saved from an early checkpoint",
                       "train longer or with a larger lr; check which checkpoint the run keeps")
    show = lambda ids: ", ".join(f"{table.token(i)!r}" for i in ids[:12]) + (" ..." if len(ids) > 12 else "")  # noqa: E731
    if seen:
        counts = [int(table.train_counts[i]) for i in seen]
        return Finding("embedding_rows", "error", f"{table.name}: rows never updated although their tokens occur in training",
                       f"{len(seen)} row(s) equal their initial values: {show(seen)} (training occurrences: "
                       f"{', '.join(map(str, counts[:12]))})",
                       "every token seen in training gets gradient and moves",
                       "these rows receive no gradient: frozen embedding, a wrong padding_idx, ids "
                       "remapped before the model, or weights that did not load",
                       "check requires_grad and padding_idx of the embedding and the token ids the model sees",
                       [table.token(i) for i in seen])
    in_samples = [i for i in unseen if i in sample_ids]
    level = "warning" if in_samples else ("note" if unseen else "ok")
    # a token whose first training batch comes after the saved step has not been trained yet in
    # these weights: its row is still random, as it should be
    after = (f"; {len(later)} row(s) of tokens whose first training batch came after the saved weights "
             f"(step {table.saved_step}), so still at their initial values as they should be: {show(later)}"
             if later else "")
    dropped = rows.get("dropped", [])
    if dropped:
        after += (f"; {len(dropped)} row(s) of tokens seen so rarely that token dropout "
                  f"({table.token_dropout:g}) may have turned every occurrence into <unk>: {show(dropped)}")
    every = "every row seen before the saved step was trained" if later else "every used row was trained"
    return Finding("embedding_rows", level,
                   f"{table.name}: {len(unseen)} token(s) never seen in training" if unseen else f"{table.name}: {every}",
                   f"rows still at their initial values: {len(unseen)} never-seen token(s) {show(unseen)}; "
                   f"{len(rows['special'])} unused special token(s); {len(in_samples)} of the never-seen tokens occur in "
                   f"the samples{after}",
                   "the vocabulary comes from the training data, so no token should be unseen",
                   "a never-seen token's row is random: wherever it occurs, the model reads noise",
                   "build the vocabulary from the training split only (or with min_freq), map rare tokens to <unk>",
                   [table.token(i) for i in unseen])


def unk(unk_count: int, real: int, train_share: float | None) -> Finding:
    share = unk_count / max(real, 1)
    train = "" if train_share is None else f"; in the training data {train_share:.2%}"
    level = "warning" if share > UNK_WARN else "ok"
    return Finding("unk_share", level, f"<unk> share {share:.2%}",
                   f"{unk_count} of {real} tokens of the samples are <unk>{train}", f"below {UNK_WARN:.0%}",
                   "the model cannot tell <unk> tokens apart: the information is lost",
                   "lower min_freq, a larger vocabulary, or a subword tokenizer (bpe)")
