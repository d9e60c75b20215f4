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
import statistics
from typing import Callable

import numpy as np
import torch
from torch import nn

from scratchformer.interop import from_torch

from . import common
from .textbook import TextbookEncoder

SIZES = {
    "d256": dict(d_model=256, n_heads=8, d_ff=1024, n_layers=4),
    "d512": dict(d_model=512, n_heads=8, d_ff=2048, n_layers=6),
}
TOY_SIZES = {"toy": dict(d_model=32, n_heads=4, d_ff=64, n_layers=2)}
IMPLS = ("ours", "torch", "bert", "textbook")
IMPL_LABEL = {
    "ours": "scratchformer Encoder",
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
    if "textbook" in impls:
        models["textbook"] = TextbookEncoder.from_torch(theirs)
    if "bert" in impls and bert_available() is None:
        models["bert"] = make_bert(size, dropout, attn_dropout)
    return {k: models[k] for k in impls if k in models}


def forward_fn(name: str, model: nn.Module, x: torch.Tensor, mask: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A no-argument call of `model` on (x, mask); every contender returns (B, T, C)."""
    if name in ("ours", "ours_compile", "textbook"):
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


def matmul_fn(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(MATMUL_N, MATMUL_N, generator=g).to(dtype)
    b = torch.randn(MATMUL_N, MATMUL_N, generator=g).to(dtype)
    return lambda: torch.mm(a, b)


# ----------------------------------------------------------------------------- measuring

def measure(fns: dict[str, Callable], reps: int, real_tokens: int, warmup: int = 1) -> dict:
    times = common.interleaved(fns, reps, warmup)
    out = {"seconds": times, "tokens_per_s": {}, "speedup_of_ours_over": {}}
    for name, ts in times.items():
        if name != "matmul":
            out["tokens_per_s"][name] = common.rate_summary(real_tokens, ts)
    if "ours" in times:
        for name, ts in times.items():
            if name not in ("ours", "matmul"):
                out["speedup_of_ours_over"][name] = common.paired_ratio(ts, times["ours"])
    if "matmul" in times:
        out["matmul_gflops"] = common.rate_summary(MATMUL_FLOPS / 1e9, times["matmul"])
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
        for name in ("ours", "textbook"):
            if name in models:
                out[f"{name}_vs_torch_regular"] = max_abs_diff_real(forward_fn(name, models[name], x, mask)(), ref, mask)
    return out


def _set_mode(models: dict, train: bool) -> None:
    for m in models.values():
        m.train(train)


def run_inference(size_name: str, size: dict, batch: int, seq: int, reps: int, seed: int = 0,
                  impls=IMPLS, with_matmul: bool = True, compile_ours: bool = False) -> dict:
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
        fns["matmul"] = matmul_fn()
    wrapped = {n: (lambda f=f: _infer(f)) if n != "matmul" else f for n, f in fns.items()}
    result.update(measure(wrapped, reps, int(mask.sum())))
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
                 impls=IMPLS, seed: int = 0) -> dict:
    x, mask, lengths = make_batch(batch, seq, size["d_model"], seed)
    models = build(size, dropout, attn_dropout, impls, seed)
    _set_mode(models, True)
    fns = {name: train_step_fn(name, m, x, mask) for name, m in models.items()}
    result = measure(fns, reps, int(mask.sum()))
    result["model_flops"] = encoder_flops(size, lengths, backward=True)
    return result


# ----------------------------------------------------------------------------- plan

def plan(quick: bool) -> dict:
    if quick:
        return dict(sizes=TOY_SIZES, batch=4, seq=16, infer_reps={"toy": 2}, train_reps={"toy": 2},
                    train_cases=[("dropout 0.1, attn-dropout 0", 0.1, 0.0, IMPLS),
                                 ("dropout 0", 0.0, 0.0, ("ours", "torch"))],
                    preln=True, compile=False)
    return dict(
        sizes=SIZES, batch=32, seq=128,
        infer_reps={"d256": 9, "d512": 5}, train_reps={"d256": 5, "d512": 3},
        train_cases=[
            # the like-for-like case of the target: residual/FFN dropout 0.1 for everyone,
            # attention-probability dropout 0 (our default; keeps SDPA's flash kernel)
            ("dropout 0.1, attn-dropout 0", 0.1, 0.0, IMPLS),
            ("dropout 0", 0.0, 0.0, ("ours", "torch")),
            # nn.TransformerEncoderLayer's default: attention dropout = dropout
            ("dropout 0.1, attn-dropout 0.1 (torch default)", 0.1, 0.1, ("ours", "torch")),
        ],
        preln=True, compile=False,
    )


def run(quick: bool = False, out_dir=None, compile_ours: bool | None = None, log=print) -> dict:
    p = plan(quick)
    if compile_ours is not None:
        p["compile"] = compile_ours
    machine = common.machine_info()
    _, mask, lengths = make_batch(p["batch"], p["seq"], 8)
    res = {
        "title": "Encoder throughput: inference and training step",
        "machine": machine,
        "settings": {
            "batch": p["batch"], "seq_len": p["seq"], "layout": "Post-LN, ReLU, batch-first",
            "lengths": lengths.tolist(), "padding_fraction": 1 - float(mask.float().mean()),
            "real_tokens": int(mask.sum()), "sizes": p["sizes"],
            "bert": bert_available() or "transformers BertModel, attn_implementation='sdpa', random init",
            "inference_reps": p["infer_reps"], "train_reps": p["train_reps"],
            "tokens_per_s": "real (non-padding) tokens per second",
            "speedup_of_ours_over": "per repetition: peer's time / our time (>1: ours faster)",
        },
        "inference": {}, "inference_preln": {}, "training": {},
    }
    for sname, size in p["sizes"].items():
        log(f"[encoder] inference {sname}")
        res["inference"][sname] = run_inference(sname, size, p["batch"], p["seq"], p["infer_reps"][sname],
                                                compile_ours=p["compile"] and sname == "d256")
    if p["preln"]:
        sname = next(iter(p["sizes"]))
        log(f"[encoder] inference Pre-LN {sname}")
        size = p["sizes"][sname]
        x, m, _ = make_batch(p["batch"], p["seq"], size["d_model"])
        models = build(size, 0.1, 0.0, ("ours", "torch"), norm_first=True)
        _set_mode(models, False)
        fns = {n: (lambda f=forward_fn(n, mod, x, m): _infer(f)) for n, mod in models.items()}
        res["inference_preln"][sname] = measure(fns, p["infer_reps"][sname], int(m.sum()))
    for label, dp, adp, impls in p["train_cases"]:
        res["training"][label] = {}
        for sname, size in p["sizes"].items():
            log(f"[encoder] training {sname} {label}")
            res["training"][label][sname] = run_training(size, p["batch"], p["seq"], p["train_reps"][sname],
                                                         dp, adp, impls)
    res["targets"] = targets(res)
    common.write_result("encoder", res, to_markdown(res), out_dir)
    return res


def _speedup(block: dict, peer: str) -> float | None:
    s = block.get("speedup_of_ours_over", {}).get(peer)
    return None if s is None else s["median"]


def targets(res: dict) -> list[dict]:
    t = []
    for sname, r in res["inference"].items():
        t.append(common.target(f"inference {sname}: ours / nn.TransformerEncoder fast path", _speedup(r, "torch"), 1.0))
        t.append(common.target(f"inference {sname}: ours / BertModel", _speedup(r, "bert"), 1.2))
        t.append(common.target(f"inference {sname}: ours / textbook", _speedup(r, "textbook"), 2.0))
    first = next(iter(res["training"].values()), {})
    label = next(iter(res["training"]), "")
    for sname, r in first.items():
        t.append(common.target(f"training {sname} ({label}): ours / nn.TransformerEncoder", _speedup(r, "torch"), 1.1))
    return t


def _block_rows(block: dict, order=("ours", "ours_compile", "torch", "bert", "textbook")) -> list[list[str]]:
    rows = []
    for name in order:
        if name not in block["tokens_per_s"]:
            continue
        sp = block["speedup_of_ours_over"].get(name)
        rows.append([IMPL_LABEL.get(name, name), common.fmt_stat(block["tokens_per_s"][name]),
                     "1 (reference)" if name == "ours" else common.fmt_stat(sp, 3, "×")])
    return rows


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Batch {s['batch']} × {s['seq_len']}, {s['layout']}; padding {s['padding_fraction']:.0%} "
                              f"of slots ({s['real_tokens']} real tokens). Tokens/s = real tokens per second, "
                              "median (min–max) over interleaved repetitions; speed-up = peer time / our time "
                              "per repetition. BertModel: " + s["bert"] + ".")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    for sname, r in res["inference"].items():
        size = s["sizes"][sname]
        parts.append(f"## Inference {sname} (d_model {size['d_model']}, {size['n_heads']} heads, d_ff {size['d_ff']}, "
                     f"{size['n_layers']} layers), eval + inference_mode\n\n"
                     + common.md_table(["implementation", "tokens/s", "ours is × faster"], _block_rows(r)))
        extra = []
        if "matmul_gflops" in r:
            extra.append(f"2048² fp32 matmul in the same loop: {common.fmt_stat(r['matmul_gflops'])} GFLOP/s.")
        if "compile" in r:
            extra.append(f"torch.compile: {r['compile']}.")
        c = r.get("correctness", {})
        if c:
            extra.append("Max |diff| at real tokens vs nn.TransformerEncoder's regular path: "
                         + ", ".join(f"{k.replace('_vs_torch_regular', '')} {v:.1e}" for k, v in c.items()) + ".")
        if extra:
            parts[-1] += "\n\n" + " ".join(extra)
    for sname, r in res.get("inference_preln", {}).items():
        parts.append(f"## Inference {sname}, Pre-LN (torch's fast path runs without nested tensors)\n\n"
                     + common.md_table(["implementation", "tokens/s", "ours is × faster"], _block_rows(r)))
    for label, by_size in res["training"].items():
        for sname, r in by_size.items():
            parts.append(f"## Training step {sname}, {label} (forward + backward + AdamW)\n\n"
                         + common.md_table(["implementation", "tokens/s", "ours is × faster"], _block_rows(r)))
    return "\n\n".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile(ours) at d256")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    run(a.quick, a.out, compile_ours=a.compile or None)


if __name__ == "__main__":
    main()
