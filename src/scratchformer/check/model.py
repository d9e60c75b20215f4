"""The whole decoder-only model (GPT, LLaMA): embedding, the learner's blocks, final norm, head.

    logits = W_head · norm_f(Block_L(… Block_1(E[tokens] + P[positions]) …))     整个模型：嵌入、各层、最后的归一化、输出层
    loss   = CE(logits[:, t], tokens[t+1]), padding left out                      损失：目标右移一位，忽略 padding

Checked with the learner's own parts (their blocks were checked on their own): one forward on their
sizes against this composition, with the final norm missing or doubled as the switches
(`missing-final-norm`, `extra-final-norm`); then their loss against cross-entropy with the targets
shifted by one and the padding ignored (`target-not-shifted`, `loss-on-padding`).
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F
from torch import nn

from .checks import _is_norm, block_runner
from .compare import Ctx, close, departure, randomize, where
from .discover import CannotCheck, Found, call, call_plan
from .report import Component


def lm_parts(model: nn.Module, ctx: Ctx):
    """(token embedding, position embedding | None, [blocks], final norm | None, head) by structure, or None
    when the module is not a language model (no token embedding, or no head back to the vocabulary)."""
    mods = list(model.named_modules())
    embs = [(n, m) for n, m in mods if isinstance(m, nn.Embedding)]
    if not embs:
        return None
    tok = max(embs, key=lambda e: e[1].num_embeddings)
    d, V = tok[1].embedding_dim, tok[1].num_embeddings
    heads = [(n, m) for n, m in mods if isinstance(m, nn.Linear) and m.out_features == V and m.in_features == d]
    if not heads:
        return None
    pos = next(((n, m) for n, m in embs if m is not tok[1] and m.embedding_dim == d), None)
    if pos is None:  # minGPT: a learned nn.Parameter (1, block_size, d) added to the embeddings
        table = next(((n, p) for n, p in model.named_parameters(recurse=False) if p.dim() in (2, 3)
                      and p.shape[-1] == d and p.shape[-2] >= 2 and (p.dim() == 2 or p.shape[0] == 1)), None)
        if table is not None:
            pos = (table[0], lambda idx, t=table[1]: t.reshape(-1, d)[idx])
    pe = ctx.found.get("positional_encoding")
    if pos is None and pe is not None and isinstance(pe.obj, type):  # their sinusoid module: x -> x + PE (checked above)
        inner = next(((n, m) for n, m in mods if isinstance(m, pe.obj)), None)
        if inner is not None:
            pos = (inner[0], inner[1], "wraps")
    cls = ctx.found.get("block")
    if cls is None or not isinstance(cls.obj, type):
        raise CannotCheck("its blocks were not found as a component; --map block=YourBlock")
    blocks = [(n, m) for n, m in mods if isinstance(m, cls.obj)]
    if not blocks:
        raise CannotCheck(f"no {cls.name} inside")
    inside = [n for n, _ in blocks]
    last_block = max(i for i, (n, m) in enumerate(mods) if any(n == b or n.startswith(b + ".") for b in inside))
    norms = [(n, m) for i, (n, m) in enumerate(mods) if i > last_block and _is_norm(m)
             and not any(n.startswith(b + ".") for b in inside)]
    return tok, pos, blocks, (norms[0] if norms else None), heads[-1]


def check_model(ctx: Ctx, f: Found):
    try:
        plan = call_plan(f.obj.forward, "model")
    except CannotCheck:
        return None
    if sum(1 for _, r, req in plan if r in ("x", "m") and req) != 1:
        return None  # (src, tgt): an encoder-decoder, not a decoder-only language model
    model = ctx.build(f)
    parts = lm_parts(model, ctx)
    if parts is None:
        return None  # not a language model: not a component
    (tn, tok), pos, blocks, norm, (hn, head) = parts
    plan = call_plan(model.forward, "model")
    roles = {r for _, r, _ in plan}
    model.double()
    randomize(model, 7)
    V, T = tok.num_embeddings, min(7, ctx.sizes.max_len)
    tokens = torch.randint(1, V, (2, T), generator=ctx.gen)
    vals = {"x": tokens}
    out = call(model, plan, vals)
    logits = _logits(out, V)
    run_block = block_runner(ctx, blocks[0][1])
    pre = any(x.id == "pre-ln" and x.component == "block" for x in ctx.report.findings)
    post = any(x.id == "post-ln" and x.component == "block" for x in ctx.report.findings)

    def stack(scale):
        h = tok(tokens) * scale
        if pos is not None and len(pos) == 3:
            h = pos[1](h)  # their positional module adds its table itself
        elif pos is not None:
            h = h + pos[1](torch.arange(T))
        for _, b in blocks:
            h = run_block(b, h)
        return h

    words = f"E←{tn}" + (f", P←{pos[0]}" if pos else "") + f", {len(blocks)} × {type(blocks[0][1]).__name__}" \
        + (f", norm_f←{norm[0]}" if norm else ", no final norm") + f", head←{hn}"
    comp = Component(f.kind, f.name, "ok", [], words)
    found = None
    for scale in (1.0, math.sqrt(tok.embedding_dim)):
        try:
            h = stack(scale)
        except Exception as e:
            raise CannotCheck(f"its blocks could not be run the way it runs them ({type(e).__name__}: {e})") from None
        finals = {"ok": norm[1](h) if norm else h, "missing-final-norm": h}
        if norm:
            finals["extra-final-norm"] = norm[1](norm[1](h))
        for what, hf in finals.items():
            ref = head(hf)
            if logits.shape[1] == 1:
                ref = ref[:, -1:]  # only the last position's logits (generation style)
            if close(logits, ref):
                found = what
                break
        if found:
            break
    if found is None and run_block.takes_mask:
        run_block = block_runner(ctx, blocks[0][1], no_mask=True)
        try:
            h = stack(1.0)
            if close(logits, _last(head(norm[1](h) if norm else h), logits)):
                ctx.add("no-causal-mask", f, where(f), "your model calls its blocks without the causal mask")
                comp.status, comp.ids = "differs", ["no-causal-mask"]
                return comp
        except Exception:
            pass
        run_block = block_runner(ctx, blocks[0][1], flip=True)
        try:
            h = stack(1.0)
            if close(logits, _last(head(norm[1](h) if norm else h), logits)):
                ctx.add("mask-inverted", f, where(f), "the mask your model builds marks the other positions with "
                        "1/True than your attention hides: the model's mask and the attention disagree")
                comp.status, comp.ids = "differs", ["mask-inverted"]
                return comp
        except Exception:
            pass
    if found is None and ctx.report.bug_ids():
        comp.status, comp.detail = "skipped", "the whole model's comparison means nothing while the bugs above are there"
        return comp
    if found is None:
        # not reproduced from its parts (a positional parameter, a scale, an extra step we do not model):
        # never a verdict on the model as a whole, its parts were checked on their own
        ref = head(norm[1](stack(1.0)) if norm else stack(1.0))
        comp.status = "skipped"
        comp.detail = ("its logits are not head(norm_f(blocks(embedding))) as the checker composes them ("
                       + departure(logits, ref if logits.shape[1] != 1 else ref[:, -1:])
                       + "); its parts were checked above")
        return comp
    if found == "ok" and norm is None and pre:
        found = "missing-final-norm"
    if found == "ok" and norm is not None and post:
        found = "extra-final-norm"
    if found != "ok":
        detail = {"missing-final-norm": f"{norm[0]} is never applied" if norm else
                  "Pre-LN blocks and no norm before the head",
                  "extra-final-norm": "the final norm runs twice" if not post else
                  "Post-LN blocks already end in a norm"}[found]
        ctx.add(found, f, where(f), detail)
        comp.status, comp.ids = "differs", [found]
    if found == "ok" and not ctx.report.bug_ids():
        later = tokens.clone()
        later[:, -1] = (later[:, -1] % (V - 1)) + 1  # another last token: nothing before it may change
        moved = _logits(call(model, plan, {"x": later}), V)
        if moved.shape == logits.shape and logits.shape[1] > 1 and not close(moved[:, :-1], logits[:, :-1]):
            ctx.add("no-causal-mask", f, where(f), "the logits at position t change when the last token changes: "
                    "the model sees the future")
            comp.status, comp.ids = "differs", comp.ids + ["no-causal-mask"]
            return comp
    if found == "ok" and not ctx.report.bug_ids():
        try:
            _check_cache(ctx, f, model, plan, tokens, V, comp)
        except Exception as e:  # their cache could not be driven the way we tried: not judged, said so
            comp.detail += f"; the KV cache was not judged ({type(e).__name__}: {str(e)[:80]})"
    _check_loading(ctx, f, comp)
    if "want_loss" in roles and not {"targets", "labels"} & roles:
        try:
            _check_own_loss(ctx, f, model, plan, tokens, V, comp)
        except Exception as e:
            comp.detail += f"; the loss was not judged ({type(e).__name__}: {str(e)[:80]})"
    if {"targets", "labels"} & roles:
        try:
            _check_loss(ctx, f, model, plan, tokens, V, comp)
        except Exception as e:  # their loss could not be called the way we tried: not judged, said so
            comp.detail += f"; the loss was not judged ({type(e).__name__}: {str(e)[:80]})"
    return comp


def _last(ref, logits):
    return ref[:, -1:] if logits.shape[1] == 1 and ref.shape[1] != 1 else ref


def _logits(out, V, shape=None):
    """The (B, T, vocab) logits among what forward returned; (B·T, vocab) (the GPT video flattens them
    when it computes the loss) is viewed back as (B, T, vocab) when `shape` (B, T) is given."""
    for o in (out if isinstance(out, (tuple, list)) else [out]):
        if isinstance(o, torch.Tensor) and o.dim() == 3 and o.shape[-1] == V:
            return o
        if shape is not None and isinstance(o, torch.Tensor) and o.dim() == 2 and tuple(o.shape) == (shape[0] * shape[1], V):
            return o.view(shape[0], shape[1], V)
    raise CannotCheck("its forward gives no (B, T, vocab) logits")


def _loss(out):
    for o in (out if isinstance(out, (tuple, list)) else [out]):
        if isinstance(o, torch.Tensor) and o.dim() == 0:
            return o
    if isinstance(out, dict) and "loss" in out:
        return out["loss"]
    raise CannotCheck("its forward with targets gives no scalar loss")


def _check_loss(ctx, f, model, plan, tokens, V, comp):
    role = "labels" if any(r == "labels" for _, r, _ in plan) else "targets"
    src = ""
    try:
        import inspect
        src = inspect.getsource(type(model))
    except (OSError, TypeError):
        pass
    m = re.search(r"ignore_index\s*=\s*(-?\d+)", src)
    pad = int(m.group(1)) if m else _pad_id(ctx, model)
    Y = torch.randint(1, V, tokens.shape, generator=ctx.gen)
    out = call(model, plan, {"x": tokens, role: Y})
    logits, loss = _logits(out, V, tokens.shape), _loss(out)
    if logits.shape[:2] != tokens.shape:
        logits = _logits(call(model, plan, {"x": tokens}), V)
    if logits.shape[:2] != tokens.shape:
        return  # only the last position's logits either way: the loss is not judged
    flat = lambda lg, y, **kw: F.cross_entropy(lg.reshape(-1, V), y.reshape(-1), **kw)  # noqa: E731
    as_given, shifted = flat(logits, Y), flat(logits[:, :-1], Y[:, 1:])
    if close(loss, shifted):
        pass  # shifts inside (labels = the input ids)
    elif close(loss, as_given):
        if role == "labels" and close(Y, Y):  # HF convention: labels are the inputs, the model shifts them
            ctx.add("target-not-shifted", f, where(f), "forward(…, labels) compares position t with labels[t]; "
                    "shift: logits[:, :-1] against labels[:, 1:]")
            comp.status, comp.ids = "differs", comp.ids + ["target-not-shifted"]
            return
    else:
        return  # another loss (label smoothing, a z-loss): not judged
    shift = close(loss, shifted) and not close(loss, as_given)
    if pad is None:
        return
    Yp = Y.clone()
    Yp[1, -3:] = pad
    try:
        lossp = _loss(call(model, plan, {"x": tokens, role: Yp}))
    except Exception:
        return
    lg, yy = (logits[:, :-1], Yp[:, 1:]) if shift else (logits, Yp)
    if pad >= 0 and close(lossp, flat(lg, yy)) and not close(lossp, flat(lg, yy, ignore_index=pad)):
        ctx.add("loss-on-padding", f, where(f), f"the padding id {pad} is counted in the loss; "
                f"F.cross_entropy(..., ignore_index={pad})")
        comp.status, comp.ids = "differs", comp.ids + ["loss-on-padding"]


_SAVE = re.compile(r"save|保存|存储|dump", re.I)
_LOAD = re.compile(r"load|restore|加载|载入|读取", re.I)


def _check_loading(ctx, f, comp):
    """Their own save and load functions, `save(model, path)` then `load(fresh_model, path)`: the fresh
    model must end with the saved weights. `load_state_dict(..., strict=False)` with keys that match
    nothing loads nothing and says nothing (`weights-not-loaded`)."""
    import inspect
    import os
    import tempfile

    fns = [(n, o) for n, o in vars(ctx.module).items() if inspect.isfunction(o)
           and getattr(o, "__module__", None) == ctx.module.__name__]

    def two_args(fn):
        try:
            ps = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty]
        except (TypeError, ValueError):
            return False
        return len(ps) == 2

    save = next((o for n, o in fns if _SAVE.search(n) and two_args(o)), None)
    load = next((o for n, o in fns if _LOAD.search(n) and two_args(o)), None)
    if save is None or load is None:
        return
    try:
        a, b = ctx.build(f), ctx.build(f)
        randomize(a, 8)
        randomize(b, 9)
        before = {k: v.clone() for k, v in b.state_dict().items()}
        with tempfile.TemporaryDirectory(prefix="scratchformer-check-") as d:
            path = os.path.join(d, "ckpt.pt")
            save(a, path)
            load(b, path)
    except Exception:
        return  # their save / load could not be called this way: not judged
    after, want = b.state_dict(), a.state_dict()
    params = [k for k, _ in b.named_parameters()]
    if params and all(torch.equal(after[k], before[k]) for k in params) \
            and not all(torch.equal(want[k], before[k]) for k in params):
        ctx.add("weights-not-loaded", f, f"{load.__name__}()", f"{save.__name__}() then {load.__name__}(): "
                "not one parameter changed; the keys of the state dict match none of the model's")
        comp.status, comp.ids = "differs", comp.ids + ["weights-not-loaded"]


def _check_own_loss(ctx, f, model, plan, tokens, V, comp):
    """forward(ids, compute_loss=True): the loss of predicting ids[t+1] from position t, padding left out."""
    out = call(model, plan, {"x": tokens, "want_loss": True})
    logits, loss = _logits(out, V), _loss(out)
    flat = lambda lg, y, **kw: F.cross_entropy(lg.reshape(-1, V), y.reshape(-1), **kw)  # noqa: E731
    if close(loss, flat(logits, tokens)) and not close(loss, flat(logits[:, :-1], tokens[:, 1:])):
        ctx.add("target-not-shifted", f, where(f), "position t is scored against token t, not token t+1")
        comp.status, comp.ids = "differs", comp.ids + ["target-not-shifted"]
        return
    if not close(loss, flat(logits[:, :-1], tokens[:, 1:])):
        return
    pad = _pad_id(ctx, model)
    if pad is None or pad < 0 or pad >= V:
        return
    t2 = tokens.clone()
    t2[1, -3:] = pad
    out = call(model, plan, {"x": t2, "want_loss": True})
    lg, ls = _logits(out, V), _loss(out)
    if close(ls, flat(lg[:, :-1], t2[:, 1:])) and not close(ls, flat(lg[:, :-1], t2[:, 1:], ignore_index=pad)):
        ctx.add("loss-on-padding", f, where(f), f"the padding id {pad} is counted in the loss; "
                f"F.cross_entropy(..., ignore_index={pad})")
        comp.status, comp.ids = "differs", comp.ids + ["loss-on-padding"]


def _pad_id(ctx, model):
    for n, v in ctx.sizes.consts.items():
        if re.fullmatch(r"pad(_?(idx|id|token_id|token))?", n.lower()) and isinstance(v, int):
            return v
    for obj in (ctx.sizes.config, getattr(model, "cfg", None), getattr(model, "config", None)):
        for n in ("pad_token_id", "pad_id", "pad_idx", "padding_idx"):
            if isinstance(getattr(obj, n, None), int):
                return getattr(obj, n)
    return None


def _cache_step(model, plan, tokens, V, split):
    """Logits of tokens[:, split:] fed after tokens[:, :split] went through the KV cache, or None when
    the model takes no cache (Meta's `forward(tokens, start_pos)` with cache buffers, or HF's
    `past_key_values` / `use_cache`)."""
    import inspect
    names = list(inspect.signature(model.forward).parameters)
    roles = {r for _, r, _ in plan}
    if "start_pos" in roles:
        call(model, plan, {"x": tokens[:, :split], "start_pos": 0})
        return _logits(call(model, plan, {"x": tokens[:, split:], "start_pos": split}), V)
    if "past_key_values" in names and "use_cache" in names:
        first = model(tokens[:, :split], use_cache=True)
        past = next((o for o in (first if isinstance(first, (tuple, list)) else [])
                     if isinstance(o, (tuple, list)) and o and not isinstance(o, torch.Tensor)), None)
        if past is None:
            return None
        return _logits(model(tokens[:, split:], past_key_values=past, use_cache=True), V)
    return None


def _neutral_rotary(model):
    """Turn every rotary table of the model into the identity (angle 0) and return a function that
    restores them: with no rotation left, a difference that stays is the mask's, not the positions'."""
    saved = []
    for mod in model.modules():
        for name, b in list(mod._buffers.items()):
            if b is None or not re.search(r"freq|cos|sin|rope|rotary|cis", name, re.I):
                continue
            saved.append((mod, name, b.clone()))
            with torch.no_grad():
                if b.is_complex():
                    b.copy_(torch.ones_like(b))
                elif re.search(r"cos", name, re.I):
                    b.fill_(1.0)
                else:  # sin tables, inverse frequencies, angles: 0
                    b.zero_()

    def restore():
        with torch.no_grad():
            for mod, name, b in saved:
                mod._buffers[name].copy_(b)
    return restore, bool(saved)


def _check_cache(ctx, f, model, plan, tokens, V, comp):
    """Generation with a KV cache must give the logits of the full forward: the new tokens at their own
    positions (`rope-wrong-positions`), seeing the cached ones (`kv-cache-mask-offset`)."""
    split = 4
    full = _logits(call(model, plan, {"x": tokens}), V)
    inc = _cache_step(model, plan, tokens, V, split)
    if inc is None:
        return
    want = full[:, split:] if inc.shape[1] == full.shape[1] - split else full[:, -1:]
    if close(inc[:, -want.shape[1]:], want):
        comp.detail += "; the KV cache gives the full forward's logits"
        return
    restore, had = _neutral_rotary(model)
    try:
        full0 = _logits(call(model, plan, {"x": tokens}), V)
        inc0 = _cache_step(model, plan, tokens, V, split)
    finally:
        restore()
    want0 = full0[:, split:] if inc0.shape[1] == full0.shape[1] - split else full0[:, -1:]
    if had and close(inc0[:, -want0.shape[1]:], want0):
        ctx.add("rope-wrong-positions", f, where(f), f"the tokens after a cached prefix of {split} are turned as if "
                f"they stood at position 0: slice the rotary table at [start_pos : start_pos + T]")
        comp.status, comp.ids = "differs", comp.ids + ["rope-wrong-positions"]
    else:
        ctx.add("kv-cache-mask-offset", f, where(f), f"after a cached prefix of {split}, the new tokens' causal "
                f"mask ignores the cached length: tril(diagonal=kv_len - q_len)")
        comp.status, comp.ids = "differs", comp.ids + ["kv-cache-mask-offset"]
