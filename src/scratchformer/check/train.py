"""`check --train`: the learner's encoder layer trained beside ours, same initial weights, same batches.

Both sit in the same tiny classifier harness (embedding, the sinusoid table, two encoder layers,
a masked mean pool, a linear head). Ours is the reference with the learner's own weights copied in
(the mapping of the check: W_Q..W_O, W₁, W₂, γ, β; their Post-LN or Pre-LN, their activation), so at
step 0 both give the same loss; from there a correct layer follows our curve and a buggy one parts
from it. The task is synthetic and offline (no download at run time): does a keyword token occur in
a padded sequence; the padding is masked in the learner's own mask convention.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from . import reference as R
from .checks import parts
from .compare import AttnCaller, Ctx, map_attention
from .position_wise import _eps_of, ffn_params, norm_params
from .discover import CannotCheck, call, call_plan, first_tensor

KEYWORD, PAD = 3, 0


@dataclass
class TrainResult:
    verdict: str                 # "trains like the reference" | "does not learn"
    step: int | None             # where it parted: NaN, or behind ours for good
    why: str                     # "" | "nan" | "flat" | "behind"
    learner: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    png: str | None = None

    def line(self, lang: str) -> str:
        a, b = self.learner, self.reference
        nums = f"loss {a[0]:.3f} → {a[-1]:.3f}, ours {b[0]:.3f} → {b[-1]:.3f}" if a and b else ""
        if self.verdict == "trains like the reference":
            zh, en = "训练曲线和参考实现一致", "trains like the reference"
        else:
            what = {"nan": ("损失变成 NaN", "the loss became NaN"), "flat": ("损失不下降", "the loss stays flat"),
                    "behind": ("损失远高于参考实现", "the loss stays far above ours")}[self.why]
            zh, en = f"学不动：第 {self.step} 步起{what[0]}", f"does not learn: {what[1]} from step {self.step}"
        return f"train: {zh} / {en} ({nums})" + (f"; {self.png}" if self.png else "")


class _RefLayer(nn.Module):
    """Our encoder layer, holding copies of the learner's weights: the paper's formulas, their choices."""

    def __init__(self, w, ffn, norms, heads, order, act):
        super().__init__()
        P = lambda t: None if t is None else nn.Parameter(t.detach().clone().float())  # noqa: E731
        self.w = nn.ParameterDict({f"{r}{i}": P(t) for r, pair in w.items() for i, t in enumerate(pair) if t is not None})
        self.has = {f"{r}{i}" for r, pair in w.items() for i, t in enumerate(pair) if t is not None}
        self.ffn = nn.ParameterList([P(t) for t in ffn if t is not None])
        self.ffn_has = [t is not None for t in ffn]
        self.norms = nn.ParameterList([P(t) for g, b, _ in norms for t in (g, b)])
        self.eps = [e for _, _, e in norms]
        self.heads, self.order, self.act = heads, order, act

    def forward(self, x, keep):  # keep (B, 1, 1, S) bool
        w = {r: (self.w[f"{r}0"], self.w[f"{r}1"] if f"{r}1" in self.has else None) for r in "qkvo"}
        it = iter(self.ffn)
        f = [next(it) if h else None for h in self.ffn_has]
        n = [(self.norms[2 * i], self.norms[2 * i + 1], self.eps[i]) for i in range(2)]
        attn = lambda y: R.multi_head(y, y, y, w, self.heads, keep)  # noqa: E731
        ff = lambda y: R.feed_forward(y, *f, act=self.act)  # noqa: E731
        norm = [lambda y, i=i: R.layer_norm(y, n[i][0], n[i][1], n[i][2]) for i in range(2)]
        if self.order == "pre":
            x = x + attn(norm[0](x))
            return x + ff(norm[1](x))
        x = norm[0](x + attn(x))
        return norm[1](x + ff(x))


class _Harness(nn.Module):
    def __init__(self, layers, embed: nn.Embedding, head: nn.Linear, run_layer):
        super().__init__()
        self.layers, self.embed, self.head, self.run_layer = nn.ModuleList(layers), embed, head, run_layer
        self.register_buffer("pe", R.positional_table(64, embed.embedding_dim, dtype=torch.float32))

    def forward(self, tokens):
        keep = tokens != PAD  # (B, S)
        h = self.embed(tokens) * math.sqrt(self.embed.embedding_dim) + self.pe[: tokens.shape[1]]
        for layer in self.layers:
            h = self.run_layer(layer, h, keep)
        k = keep[..., None].float()
        return self.head((h * k).sum(1) / k.sum(1).clamp(min=1))  # (B, 2): a masked mean pool


def batches(steps: int, batch: int = 32, vocab: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        lens = torch.randint(4, 13, (batch,), generator=g)
        tok = torch.randint(KEYWORD + 1, vocab, (batch, 12), generator=g)
        y = torch.randint(0, 2, (batch,), generator=g)
        for i in range(batch):
            tok[i, lens[i]:] = PAD
            if y[i]:
                tok[i, torch.randint(0, int(lens[i]), (1,), generator=g)] = KEYWORD
        out.append((tok, y))
    return out


def _fit(model, data, lr=3e-3):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for tok, y in data:
        loss = nn.functional.cross_entropy(model(tok), y)
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            losses += [float("nan")] * (len(data) - len(losses))
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    return losses


def verdict(learner: list[float], ref: list[float]) -> tuple[str, int | None, str]:
    nan = next((i for i, v in enumerate(learner) if not math.isfinite(v)), None)
    if nan is not None:
        return "does not learn", nan, "nan"
    w = max(1, len(ref) // 10)
    smooth = lambda xs, i: sum(xs[max(0, i - w + 1): i + 1]) / len(xs[max(0, i - w + 1): i + 1])  # noqa: E731
    drop_ref = ref[0] - smooth(ref, len(ref) - 1)
    drop_l = learner[0] - smooth(learner, len(learner) - 1)
    if drop_ref > 0.05 and drop_l < 0.25 * drop_ref:
        step = next((i for i in range(len(ref)) if ref[0] - smooth(ref, i) > 0.25 * drop_ref), 0)
        return "does not learn", step, "flat"
    if drop_ref > 0.05 and smooth(learner, len(learner) - 1) > smooth(ref, len(ref) - 1) + 0.5 * drop_ref:
        step = next((i for i in range(len(ref)) if smooth(learner, i) > smooth(ref, i) + 0.5 * drop_ref), 0)
        return "does not learn", step, "behind"
    return "trains like the reference", None, ""


def train_beside(ctx: Ctx, steps: int = 300, png: str | None = None, n_layers: int = 2) -> TrainResult:
    f = ctx.found.get("encoder_layer")
    if f is None:
        raise CannotCheck("--train needs an encoder layer in the file")
    d, h = ctx.sizes.d_model, ctx.sizes.heads
    torch.manual_seed(0)
    learner_layers, ref_layers = [], []
    plan = caller = None
    order = "pre" if any(x.id == "pre-ln" and x.component == "encoder_layer" for x in ctx.report.findings) else "post"
    probe = torch.randn(2, 5, d)
    for i in range(n_layers):
        layer = ctx.build(f).float()
        plan = call_plan(layer.forward, "encoder_layer")
        attn, ffn, norms = parts(layer, ctx)
        if len(attn) != 1 or ffn is None or len(norms) != 2:
            raise CannotCheck("--train needs one attention, one feed-forward and two norms in the encoder layer")
        caller = AttnCaller(attn[0][1], ctx.form)
        caller.settle(probe, probe, probe, torch.ones(2, 5, dtype=torch.bool))
        w, _, _, _ = map_attention(attn[0][1], d)
        W, _ = ffn_params(ffn[1], d)
        nps = []
        for _, m in norms:
            _, g, b = norm_params(m, d)
            nps.append((g, b, _eps_of(m) or 1e-5))
        with torch.no_grad():
            y = ffn[1](probe)
            act = next((a for a in ("relu", "gelu", "gelu-tanh") if torch.allclose(y, R.feed_forward(probe, *W, act=a), atol=1e-5)), "relu")
        learner_layers.append(layer)
        ref_layers.append(_RefLayer(w, W, nps, h, order, act))
    mask_role = next((r for _, r, _ in plan if r in ("mask", "lens")), None)
    form, nd = caller.form, caller.ndim

    def run_learner(layer, x, keep):
        vals = {"x": x}
        if mask_role is not None:
            m = form.keys(keep, nd)
            vals[mask_role] = m.float() if m.is_floating_point() else m
        return first_tensor(call(layer, plan, vals), shape=tuple(x.shape))

    vocab = ctx.sizes.vocab
    torch.manual_seed(1)
    embed, head = nn.Embedding(vocab, d), nn.Linear(d, 2)
    with torch.no_grad():
        embed.weight.mul_(d ** -0.5)
    ours = _Harness(ref_layers, _clone(embed), _clone(head), lambda layer, x, keep: layer(x, keep[:, None, None, :]))
    theirs = _Harness(learner_layers, _clone(embed), _clone(head), run_learner)
    data = batches(steps, vocab=vocab)
    ref_losses, learner_losses = _fit(ours, data), _fit(theirs, data)
    v, step, why = verdict(learner_losses, ref_losses)
    result = TrainResult(v, step, why, learner_losses, ref_losses)
    if png:
        result.png = str(draw(result, png, f.name))
    return result


def _clone(m: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(m)


def draw(result: TrainResult, path: str, name: str):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ..fileio import save_figure

    fig = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(result.reference, label="reference (ours)", color="#3f51b5")
    ax.plot(result.learner, label=f"yours ({name})", color="#e65100", alpha=0.85)
    if result.step is not None:
        ax.axvline(result.step, color="gray", linestyle=":", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(result.verdict)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)
