"""Encoder throughput: ours vs `nn.TransformerEncoder` vs `transformers.BertModel` vs textbook.

Inference (eval, `torch.inference_mode`) and a training step (forward + backward + AdamW),
batch 32 × 128 with a key-padding mask drawn from a realistic length distribution. All
contenders are Post-LN (the paper's and BERT's layout, and the one for which
`nn.TransformerEncoder`'s eval fast path uses nested tensors) with ReLU. Ours, torch's and
the textbook's hold the same weights (`from_torch`); BertModel is randomly initialised at
the same size (it adds an embedding LayerNorm and position embeddings: one extra norm).

Tokens/s counts *real* (non-padding) tokens. The 2048² float32 matmul that defines the
machine's peak runs inside the same interleaved loop as the inference contenders, so
`mfu` can divide achieved by peak per repetition.
"""
from __future__ import annotations

import argparse
import math
import warnings
from typing import Callable

import numpy as np
import torch
from torch import nn

from scratchformer.interop import from_torch
from scratchformer.nn import linear, use_onednn

from . import common
from .textbook import TextbookEncoder

# torch's nested-tensor fast path warns on every construction; the benchmark knows.
warnings.filterwarnings("ignore", message=".*nested tensors is in prototype.*")
warnings.filterwarnings("ignore", message=".*enable_nested_tensor is True.*")

SIZES = {
    "d256": dict(d_model=256, n_heads=8, d_ff=1024, n_layers=4),
    "d512": dict(d_model=512, n_heads=8, d_ff=2048, n_layers=6),
}
TOY_SIZES = {"toy": dict(d_model=32, n_heads=4, d_ff=64, n_layers=2)}
IMPLS = ("ours", "ours_plain", "torch", "bert", "textbook")
OURS = ("ours", "ours_plain")  # the references every speed-up is computed against
IMPL_LABEL = {
    "ours": "scratchformer Encoder (default: packing, oneDNN)",
    "ours_plain": "scratchformer Encoder, packing off, torch's matmul",
    "torch": "nn.TransformerEncoder",
    "bert": "transformers BertModel (sdpa)",
    "textbook": "textbook (tutorial code)",
    "ours_compile": "scratchformer Encoder + torch.compile",
}


# ----------------------------------------------------------------------------- inputs

def realistic_lengths(batch: int, max_len: int, seed: int = 0) -> torch.Tensor:
    """Sentence-like lengths: log-normal around 0.6 × max_len (σ = 0.45), clipped to
    [max_len/16, max_len]; one sequence is full so the batch is max_len wide. About a third
    of the slots end up padding, as in an unbucketed batch of real text."""
    rng = np.random.default_rng(seed)
    lens = np.exp(rng.normal(math.log(0.6 * max_len), 0.45, batch))
    lens = np.clip(np.round(lens), max(1, max_len // 16), max_len).astype(np.int64)
    lens[0] = max_len
    return torch.from_numpy(lens)


def make_batch(batch: int, max_len: int, d_model: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, max_len, d_model, generator=g)
    lengths = realistic_lengths(batch, max_len, seed)
    mask = torch.arange(max_len)[None, :] < lengths[:, None]  # (B, T) True = real
    return x, mask, lengths


# ----------------------------------------------------------------------------- contenders

def bert_available() -> str | None:
    """None when transformers.BertModel can be used, else why not."""
    try:
        import transformers  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the environment
        return f"transformers not installed ({type(e).__name__}); `make bench` installs it"
    return None


def make_bert(size: dict, dropout: float, attn_dropout: float):
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=128, hidden_size=size["d_model"], num_hidden_layers=size["n_layers"],
        num_attention_heads=size["n_heads"], intermediate_size=size["d_ff"], hidden_act="relu",
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=attn_dropout,
        layer_norm_eps=1e-5, max_position_embeddings=512, attn_implementation="sdpa",
    )
    return BertModel(cfg, add_pooling_layer=False)


def build(size: dict, dropout: float, attn_dropout: float, impls=IMPLS, seed: int = 0,
          norm_first: bool = False) -> dict[str, nn.Module]:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(size["d_model"], size["n_heads"], size["d_ff"], dropout,
                                       batch_first=True, norm_first=norm_first)
    layer.self_attn.dropout = attn_dropout
    theirs = nn.TransformerEncoder(layer, size["n_layers"], enable_nested_tensor=True)
    models = {"torch": theirs, "ours": from_torch(theirs)}
    if "ours_plain" in impls:
        plain = from_torch(theirs)
        plain.set_padding_packing(False)
        models["ours_plain"] = WithoutOneDNN(plain)
    if "textbook" in impls:
        models["textbook"] = TextbookEncoder.from_torch(theirs)
    if "bert" in impls and bert_available() is None:
        models["bert"] = make_bert(size, dropout, attn_dropout)
    return {k: models[k] for k in impls if k in models}


class WithoutOneDNN(nn.Module):
    """Runs the wrapped model with our oneDNN projections off (torch's default matmul, MKL
    on x86); the backward then follows the same kernels."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args, **kwargs):
        previous = use_onednn(False)
        try:
            return self.model(*args, **kwargs)
        finally:
            use_onednn(previous)


def forward_fn(name: str, model: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A no-argument call of `model` on (x, mask); every contender returns (B, T, C)."""
    if name in ("ours", "ours_plain", "ours_compile", "textbook"):
        return lambda: model(x, mask)
    if name == "torch":
        pad = ~mask  # torch polarity: True = ignore
        return lambda: model(x, src_key_padding_mask=pad)
    if name == "bert":
        am = mask.long()
        return lambda: model(inputs_embeds=x, attention_mask=am).last_hidden_state
    raise KeyError(name)


def compiled_ours(model: nn.Module, call_check: Callable[[nn.Module], object]):
    """`torch.compile(model)`, or (None, reason) when compiling fails here (no compiler, ...)."""
    try:
        cm = torch.compile(model, dynamic=False)
        call_check(cm)
        return cm, None
    except Exception as e:  # the option must never break the benchmark
        return None, f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"


# ----------------------------------------------------------------------------- FLOPs

def encoder_flops(size: dict, lengths: torch.Tensor, padded_len: int | None = None,
                  backward: bool = False) -> float:
    """Matmul FLOPs of one forward (×3 with backward). With `padded_len`, every sequence
    counts as that long (the work a dense implementation executes); otherwise only real
    tokens count (the model FLOPs)."""
    d, f, L = size["d_model"], size["d_ff"], size["n_layers"]
    lens = [padded_len] * len(lengths) if padded_len else [int(n) for n in lengths]
    n_tok = sum(lens)
    per_layer = 2 * n_tok * (4 * d * d + 2 * d * f) + sum(4 * n * n * d for n in lens)
    return L * per_layer * (3 if backward else 1)


MATMUL_N = 2048
MATMUL_FLOPS = 2 * MATMUL_N ** 3


def matmul_fn(dtype=torch.float32, n: int = MATMUL_N):
    """An n×n×n product on the fastest float32 kernel we have (`linear`: oneDNN where
    available; torch.mm's MKL sgemm runs ~2x slower on AMD CPUs), so "peak" is the
    machine's, not one library's."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    return lambda: linear(a, b)  # a @ b.T


# ----------------------------------------------------------------------------- measuring

def measure(fns: dict[str, Callable], reps: int, real_tokens: int, warmup: int = 1,
            budget_s: float | None = None, matmul_n: int = MATMUL_N) -> dict:
    times = common.interleaved(fns, reps, warmup, budget_s=budget_s)
    out = {"seconds": times, "reps": len(next(iter(times.values()))), "tokens_per_s": {}, "speedup": {}}
    for name, ts in times.items():
        if name != "matmul":
            out["tokens_per_s"][name] = common.rate_summary(real_tokens, ts)
    for ref in OURS:
        if ref in times:
            out["speedup"][ref] = {name: common.paired_ratio(ts, times[ref]) for name, ts in times.items()
                                   if name not in (ref, "matmul")}
    if "matmul" in times:
        out["matmul_n"] = matmul_n
        out["matmul_flops"] = 2 * matmul_n ** 3
        out["matmul_gflops"] = common.rate_summary(out["matmul_flops"] / 1e9, times["matmul"])
    return out


def max_abs_diff_real(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return float((a[mask] - b[mask]).abs().max())


def correctness(models: dict, x, mask) -> dict:
    """Max |difference| at real tokens against nn.TransformerEncoder's regular (non-fast)
    path, eval mode. The textbook LayerNorm differs by design (x.std)."""
    out = {}
    with torch.no_grad():
        ref_model = models["torch"]
        x_grad = x.clone().requires_grad_(False)
        # the regular path: grad mode enabled disables torch's fast path
        with torch.enable_grad():
            ref = ref_model(x_grad, src_key_padding_mask=~mask).detach()
        fast = ref_model(x, src_key_padding_mask=~mask)
        out["torch_fastpath_vs_regular"] = max_abs_diff_real(fast, ref, mask)
        for name in ("ours", "ours_plain", "textbook"):
            if name in models:
                out[f"{name}_vs_torch_regular"] = max_abs_diff_real(forward_fn(name, models[name], x, mask)(), ref, mask)
    return out


def _set_mode(models: dict, train: bool) -> None:
    for m in models.values():
        m.train(train)


def run_inference(size_name: str, size: dict, batch: int, seq: int, reps: int, seed: int = 0,
                  impls=IMPLS, with_matmul: bool = True, compile_ours: bool = False,
                  budget_s: float | None = None, matmul_n: int = MATMUL_N) -> dict:
    x, mask, lengths = make_batch(batch, seq, size["d_model"], seed)
    models = build(size, 0.1, 0.0, impls, seed)
    _set_mode(models, False)
    result = {"correctness": correctness(models, x, mask)}
    fns = {name: forward_fn(name, m, x, mask) for name, m in models.items()}
    if compile_ours:
        cm, why = compiled_ours(models["ours"], lambda m: _infer(lambda: m(x, mask)))
        if cm is None:
            result["compile"] = why
        else:
            fns["ours_compile"] = forward_fn("ours_compile", cm, x, mask)
            result["compile"] = "ok"
    if with_matmul:
        fns["matmul"] = matmul_fn(n=matmul_n)
    wrapped = {n: (lambda f=f: _infer(f)) if n != "matmul" else f for n, f in fns.items()}
    result.update(measure(wrapped, reps, int(mask.sum()), budget_s=budget_s, matmul_n=matmul_n))
    result["model_flops"] = encoder_flops(size, lengths)
    result["padded_flops"] = encoder_flops(size, lengths, padded_len=seq)
    return result


def _infer(f):
    with torch.inference_mode():
        return f()


def train_step_fn(name: str, model: nn.Module, x, mask) -> Callable[[], float]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fwd = forward_fn(name, model, x, mask)
    w = mask.float()
    denom = w.sum()

    def step():
        opt.zero_grad(set_to_none=True)
        out = fwd()
        loss = (out.float().square().mean(-1) * w).sum() / denom  # padded rows carry no loss
        loss.backward()
        opt.step()
        return loss

    return step


def run_training(size: dict, batch: int, seq: int, reps: int, dropout: float, attn_dropout: float,
                 impls=IMPLS, seed: int = 0, budget_s: float | None = None) -> dict:
    x, mask, lengths = make_batch(batch, seq, size["d_model"], seed)
    models = build(size, dropout, attn_dropout, impls, seed)
    _set_mode(models, True)
    fns = {name: train_step_fn(name, m, x, mask) for name, m in models.items()}
    result = measure(fns, reps, int(mask.sum()), budget_s=budget_s)
    result["model_flops"] = encoder_flops(size, lengths, backward=True)
    return result


# ----------------------------------------------------------------------------- plan

def plan(quick: bool) -> dict:
    """Repetitions (at most) and seconds per block; a loaded machine gets fewer repetitions
    (never below 3 in the full run) instead of a longer run. About 5 minutes when quiet."""
    if quick:
        return dict(sizes=TOY_SIZES, batch=4, seq=16, infer=[("toy", 2, None)], preln=("toy", 2, None),
                    train_cases=[("dropout 0.1, attn-dropout 0", 0.1, 0.0, IMPLS, [("toy", 2, None)]),
                                 ("dropout 0", 0.0, 0.0, ("ours", "ours_plain", "torch"), [("toy", 2, None)])],
                    compile=False, matmul=True, matmul_n=256)
    ours_torch = ("ours", "ours_plain", "torch")
    return dict(
        sizes=SIZES, batch=32, seq=128,
        infer=[("d256", 9, 25), ("d512", 7, 60)], preln=("d256", 7, 10),
        train_cases=[
            # the like-for-like case of the target: residual/FFN dropout 0.1 for everyone,
            # attention-probability dropout 0 (our default; keeps SDPA's flash kernel)
            ("dropout 0.1, attn-dropout 0", 0.1, 0.0, IMPLS, [("d256", 5, 35)]),
            ("dropout 0.1, attn-dropout 0", 0.1, 0.0, ours_torch, [("d512", 3, 45)]),
            ("dropout 0", 0.0, 0.0, ours_torch, [("d256", 5, 20)]),
            # nn.TransformerEncoderLayer's default: attention dropout = dropout
            ("dropout 0.1, attn-dropout 0.1 (torch's default)", 0.1, 0.1, ours_torch, [("d256", 5, 20)]),
        ],
        compile=False, matmul=True, matmul_n=MATMUL_N,
    )


def run(quick: bool = False, out_dir=None, compile_ours: bool | None = None, log=print) -> dict:
    p = plan(quick)
    if compile_ours is not None:
        p["compile"] = compile_ours
    _, mask, lengths = make_batch(p["batch"], p["seq"], 8)
    res = {
        "title": "Encoder throughput: inference and training step",
        "machine": common.machine_info(),
        "settings": {
            "batch": p["batch"], "seq_len": p["seq"], "layout": "Post-LN, ReLU, batch-first",
            "lengths": lengths.tolist(), "padding_fraction": 1 - float(mask.float().mean()),
            "real_tokens": int(mask.sum()), "sizes": p["sizes"],
            "bert": bert_available() or "transformers BertModel, attn_implementation='sdpa', random init",
            "tokens_per_s": "real (non-padding) tokens per second",
            "speedup": "speedup[ref][peer], per repetition: peer's time / ref's time (>1: ref faster)",
        },
        "inference": {}, "inference_preln": {}, "training": {},
    }
    for sname, reps, budget in p["infer"]:
        log(f"[encoder] inference {sname}")
        res["inference"][sname] = run_inference(sname, p["sizes"][sname], p["batch"], p["seq"], reps,
                                                with_matmul=p["matmul"], budget_s=budget, matmul_n=p["matmul_n"],
                                                compile_ours=p["compile"] and sname == "d256")
    if p["preln"]:
        sname, reps, budget = p["preln"]
        log(f"[encoder] inference Pre-LN {sname}")
        size = p["sizes"][sname]
        x, m, _ = make_batch(p["batch"], p["seq"], size["d_model"])
        models = build(size, 0.1, 0.0, ("ours", "ours_plain", "torch"), norm_first=True)
        _set_mode(models, False)
        fns = {n: (lambda f=forward_fn(n, mod, x, m): _infer(f)) for n, mod in models.items()}
        res["inference_preln"][sname] = measure(fns, reps, int(m.sum()), budget_s=budget)
    for label, dp, adp, impls, runs in p["train_cases"]:
        res["training"].setdefault(label, {})
        for sname, reps, budget in runs:
            log(f"[encoder] training {sname} {label}")
            res["training"][label][sname] = run_training(p["sizes"][sname], p["batch"], p["seq"], reps,
                                                         dp, adp, impls, budget_s=budget)
    res["targets"] = targets(res)
    common.write_result("encoder", res, to_markdown(res), out_dir)
    return res


def speedup(block: dict, ref: str, peer: str) -> float | None:
    s = block.get("speedup", {}).get(ref, {}).get(peer)
    return None if s is None else s["median"]


PEER_GOALS = (("torch", "nn.TransformerEncoder (fast path)", 1.0), ("bert", "BertModel", 1.2),
              ("textbook", "textbook", 2.0))


def targets(res: dict) -> list[dict]:
    t = []
    for sname, r in res["inference"].items():
        for peer, label, goal in PEER_GOALS:
            t.append(common.target(f"inference {sname}: ours / {label}", speedup(r, "ours", peer), goal))
    label = next(iter(res["training"]), "")
    for sname, r in res["training"].get(label, {}).items():
        t.append(common.target(f"training {sname} ({label}): ours / nn.TransformerEncoder",
                               speedup(r, "ours", "torch"), 1.1))
    return t


ROW_ORDER = ("ours", "ours_plain", "ours_compile", "torch", "bert", "textbook")


def _block_rows(block: dict) -> list[list[str]]:
    rows = []
    for name in ROW_ORDER:
        if name not in block["tokens_per_s"]:
            continue
        row = [IMPL_LABEL.get(name, name), common.fmt_stat(block["tokens_per_s"][name])]
        for ref in OURS:
            sp = block["speedup"].get(ref, {}).get(name)
            row.append("1" if name == ref else common.fmt_stat(sp, 3, "×"))
        rows.append(row)
    return rows


TABLE_HEADER = ["implementation", "tokens/s", "ours (default) is × faster", "ours (plain) is × faster"]


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(
        res["title"], res["machine"],
        f"Batch {s['batch']} × {s['seq_len']}, {s['layout']}; {s['padding_fraction']:.0%} of the slots are "
        f"padding ({s['real_tokens']} real tokens). Tokens/s = real tokens per second, median (min–max) over "
        "interleaved repetitions; '× faster' = peer's time / ours, per repetition. "
        "Ours by default packs padding (norms, FFN and projections run on real tokens only; padded output "
        "rows are zeros, as in torch's nested-tensor fast path) and runs float32 projections on oneDNN "
        "(`scratchformer.nn.fast_linear`); 'plain' turns both off (`set_padding_packing(False)`, "
        "`use_onednn(False)`): the same model on torch's default kernels. "
        f"BertModel: {s['bert']}.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    for sname, r in res["inference"].items():
        size = s["sizes"][sname]
        parts.append(f"## Inference {sname} (d_model {size['d_model']}, {size['n_heads']} heads, d_ff {size['d_ff']}, "
                     f"{size['n_layers']} layers), eval + inference_mode\n\n"
                     + common.md_table(TABLE_HEADER, _block_rows(r)))
        extra = []
        if "matmul_gflops" in r:
            extra.append(f"{r['matmul_n']}² fp32 matmul in the same loop: {common.fmt_stat(r['matmul_gflops'])} GFLOP/s.")
        if "compile" in r:
            extra.append(f"torch.compile: {r['compile']}.")
        c = r.get("correctness", {})
        if c:
            extra.append("Max |diff| at real tokens vs nn.TransformerEncoder's regular path: "
                         + ", ".join(f"{k.replace('_vs_torch_regular', '').replace('_vs_regular', '')} {v:.1e}"
                                     for k, v in c.items()) + " (textbook: x.std LayerNorm).")
        if extra:
            parts[-1] += "\n\n" + " ".join(extra)
    for sname, r in res.get("inference_preln", {}).items():
        parts.append(f"## Inference {sname}, Pre-LN (torch's fast path runs without nested tensors)\n\n"
                     + common.md_table(TABLE_HEADER, _block_rows(r)))
    for label, by_size in res["training"].items():
        for sname, r in by_size.items():
            parts.append(f"## Training step {sname}, {label} (forward + backward + AdamW)\n\n"
                         + common.md_table(TABLE_HEADER, _block_rows(r)))
    return "\n\n".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes, seconds (the smoke test)")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(ours) at d256")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    a = ap.parse_args(argv)
    run(a.quick, a.out, compile_ours=a.compile or None)


if __name__ == "__main__":
    main()
