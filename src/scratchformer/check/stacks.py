"""The stacks: an encoder checked for padding invariance and for its end (one final norm after Pre-LN layers,
none more after Post-LN ones), a decoder stack for its end; the layers themselves are checked in `checks.py`.

编码器和解码器的堆叠：padding 不变性，以及结尾的归一化（Pre-LN 之后要有一个，Post-LN 之后不能再多一个）。
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from .checks import _is_norm
from . import reference as R
from .compare import Ctx, close, departure, key_keep, randomize, where
from .discover import CannotCheck, Found, call, call_plan, first_tensor
from .report import Component


def pad_id(ctx: Ctx, mod: nn.Module) -> int:
    """The padding id: an embedding's padding_idx, a `pad` argument their program built the module with, else 0."""
    for m in mod.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            return int(m.padding_idx)
    run = getattr(ctx, "run", None)
    if run:
        for s in run.seen:
            for n, v in s.ctor.items():
                if "pad" in n.lower() and isinstance(v, int) and not isinstance(v, bool) and 0 <= v:
                    return v
    return 0


def check_encoder(ctx: Ctx, f: Found) -> Component:
    enc = ctx.build(f)
    d = ctx.sizes.d_model
    plan = call_plan(enc.forward, "encoder")
    tokens_in = any(isinstance(m, nn.Embedding) for m in enc.modules())
    mask_role = next((r for _, r, _ in plan if r in ("mask", "lens")), None)
    if not tokens_in and mask_role is None:
        raise CannotCheck("an encoder over vectors needs a mask argument to be checked")
    enc.double()
    randomize(enc, 6)
    if tokens_in:  # ids its own embedding can read; the padding id their program uses (else 0)
        vocab = min([ctx.sizes.vocab] + [m.num_embeddings for m in enc.modules() if isinstance(m, nn.Embedding)])
        pad = pad_id(ctx, enc)
        inputs = torch.randint(1, max(2, vocab), (2, 7), generator=ctx.gen)
        inputs[inputs == pad] = (pad + 1) % max(2, vocab)
        inputs[1, 4:] = pad
    else:
        inputs = ctx.randn(2, 7, d)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 4:] = False
    ndims = [None]

    def run(x, keep):
        vals = {"x": x}
        if mask_role is not None:
            vals[mask_role] = ctx.form.keys(keep, ndims[0])
        return first_tensor(call(enc, plan, vals), ndim=3)

    for nd in dict.fromkeys([ctx.form.ndim, 4, 3, 2]):
        ndims[0] = nd
        try:
            full = run(inputs, keep)
            break
        except NotImplementedError:
            raise
        except Exception as e:  # the learner's code: this mask rank is not theirs
            err = e
    else:
        raise CannotCheck(f"no mask shape worked ({type(err).__name__}: {err})")
    alone = run(inputs[1:, :4], keep[1:, :4])
    comp = Component(f.kind, f.name, "ok", [], "padding invariance: a padded row equals the same row unpadded")
    final = _final_norm(ctx, f, enc, lambda: run(inputs, keep))
    if final is not None:
        comp.status, comp.ids = "differs", [final]
        return comp
    if not close(full[1:, :4], alone):
        if any(x.severity == "bug" for x in ctx.report.findings):
            comp.status, comp.detail = "skipped", "its padding test means nothing while the bugs above are there"
            return comp
        ctx.add("mask-inverted" if mask_role is None else "unknown-difference", f, where(f),
                "the real tokens' outputs change when padding is added: the padding is not masked "
                "(is the mask built the wrong way round?) " + departure(full[1:, :4], alone))
        comp.status, comp.ids = "differs", [ctx.report.findings[-1].id]
    return comp


def check_decoder(ctx: Ctx, f: Found) -> Component | None:
    """A decoder stack over vectors, forward(x, memory, src_mask, tgt_mask) as in the Annotated
    Transformer: its end is checked like the encoder's (one final norm after Pre-LN layers, none after
    Post-LN ones); the layers themselves are checked as decoder_layer. A decoder the checker cannot call
    (token ids in, other arguments) is left out, as before: None."""
    if "decoder_layer" not in ctx.found:
        return None
    dec = ctx.build(f)
    try:
        plan = call_plan(dec.forward, "decoder_layer")
    except CannotCheck:
        return None
    roles = {r for _, r, _ in plan}
    if not {"x", "m"} <= roles or any(isinstance(m, nn.Embedding) for m in dec.modules()):
        return None
    dec.double()
    randomize(dec, 6)
    B, T, d = 2, 5, ctx.sizes.d_model
    x, mem = ctx.randn(B, T, d), ctx.randn(B, T, d)
    src_keep = key_keep(B, T)
    src_keep[:] = True  # no padding: only the stack's end is looked at here
    tgt_keep = R.causal_keep(T)[None].expand(B, T, T)

    def run(nd):
        vals = {"x": x, "m": mem, "src_mask": ctx.form.keys(src_keep, nd), "tgt_mask": ctx.form.square(tgt_keep, nd)}
        return first_tensor(call(dec, plan, vals), shape=tuple(x.shape))

    for nd in dict.fromkeys([ctx.form.ndim, 4, 3, 2]):
        try:
            run(nd)
            break
        except NotImplementedError:
            raise
        except Exception:  # the learner's code: this mask rank is not theirs
            continue
    else:
        return None
    comp = Component(f.kind, f.name, "ok", [], "the stack's end: its final norm")
    if any(x.severity == "bug" for x in ctx.report.findings):
        # a wrong norm or layer above makes any final norm look wrong: not judged beside those bugs
        comp.status, comp.detail = "skipped", "its final-norm test means nothing while the bugs above are there"
        return comp
    final = _final_norm(ctx, f, dec, lambda: run(nd), layer_kind="decoder_layer")
    if final is not None:
        comp.status, comp.ids = "differs", [final]
    return comp


def _final_norm(ctx: Ctx, f: Found, stack: nn.Module, run, layer_kind: str = "encoder_layer") -> str | None:
    """The end of a stack: Pre-LN layers need one final norm (`missing-final-norm` without it); Post-LN
    layers already end in one (`extra-final-norm` with another). The last layer's output is caught with
    a hook and compared with what the stack returns."""
    lf = ctx.found.get(layer_kind)
    if lf is None or not inspect.isclass(lf.obj):
        return None
    if any(x.severity == "bug" and x.component in ("layer_norm", "rms_norm") for x in ctx.report.findings):
        return None  # a wrong norm (over the positions, say) can be idempotent: the count of norms means nothing
    layers = [m for m in stack.modules() if isinstance(m, lf.obj)]
    if not layers:
        return None
    seen = []
    hook = layers[-1].register_forward_hook(lambda m, i, o: seen.append(first_tensor(o, ndim=3)))
    try:
        out = run()
    finally:
        hook.remove()
    if not seen or tuple(seen[-1].shape) != tuple(out.shape):
        return None
    last = seen[-1]
    if last.shape[1] != out.shape[1]:
        return None
    inside = {id(m) for layer in layers for m in layer.modules()}
    norms = [m for m in stack.modules() if id(m) not in inside and _is_norm(m)]
    order = {x.id for x in ctx.report.findings if x.component == layer_kind and x.id in ("pre-ln", "post-ln")}
    plain = torch.nn.functional.layer_norm(last, last.shape[-1:])
    normed = [n(last) for n in norms] + [plain]
    if "pre-ln" in order and close(out, last):
        ctx.add("missing-final-norm", f, where(f), "Pre-LN layers and the stack returns the last layer's output "
                "unnormalised" + (f" ({type(norms[0]).__name__} is never applied)" if norms else ""))
        return "missing-final-norm"
    twice = [n(n(last)) for n in norms]
    if "post-ln" in order and any(close(out, t) for t in normed) or any(close(out, t) for t in twice):
        ctx.add("extra-final-norm", f, where(f), "Post-LN layers already end in a norm; the stack adds another"
                if "post-ln" in order else "the final norm runs twice")
        return "extra-final-norm"
    return None
