"""Properties of the learner's whole model on their own inputs (the watched run): each one a positive
identification when it fails, never a guess.

在你自己的输入上检查整个模型的性质：解码器看到未来、忽略源句、加性掩码方向反了、因果掩码挡住对角线、eval 时 dropout 没关、
损失没有右移或算进了 padding、最后的归一化缺了或多了。

- a decoder that reads the future (`no-causal-mask`, wherever its mask is built, when its attention was checked);
- a decoder that ignores its source, or a one-input model that ignores its input (`cross-attention-kv`);
- an additive mask their model builds that hides the words (`mask-inverted`);
- a causal mask their model passes that hides the diagonal (`no-causal-mask`);
- the same input giving two outputs in eval (`attention-dropout-in-eval`), read with their own dropout rates;
- the loss inside the model or in their training step: not shifted (`target-not-shifted`), counting the
  padding (`loss-on-padding`);
- the end of the stack: a Pre-LN stack with no final norm, a Post-LN one with another (`missing-final-norm`,
  `extra-final-norm`).
"""
from __future__ import annotations

import inspect
import re

import torch
from torch import nn

from .facts import safe_copy
from .report import Component, finding


def run_properties(report, facts, source: str) -> None:
    """Each property on its own: one that cannot be read on their run (a model that cannot be copied or called
    again) is left out, never a crash of the check."""
    try:
        _run_properties(report, facts, source)
    except Exception:
        return


def _run_properties(report, facts, source: str) -> None:
    """A decoder that reads the future on their own input (`no-causal-mask`), wherever its mask is built; an
    additive mask their model builds that hides the real tokens and keeps the padding (`mask-inverted`)."""
    if not facts:
        return
    top = facts.watch.top()
    if top is None:
        return
    name = type(top.obj).__name__

    def add(id_, detail):
        report.findings.append(finding(id_, "model", f"{name}.forward", detail))
        try:
            report.findings[-1].line = inspect.getsourcelines(type(top.obj).forward)[1]
        except (OSError, TypeError):
            pass
        comp = next((c for c in report.components if c.name == name), None)
        if comp is None:
            report.components.append(Component("model", name, "differs", [id_], "the whole model on your own input"))
        else:
            comp.status, comp.ids = "differs", comp.ids + [id_]

    attention_bug = any(c.kind in ("attention", "scaled_dot_product") and set(c.ids) - {"unknown-difference"}
                        for c in report.components)
    deaf = facts.ignores_its_input()
    if deaf is not None and not report.bug_ids():
        if deaf:
            add("cross-attention-kv", f"on your own input, changing the input did not change the output at all: "
                                      f"`{deaf}` reads the model's own states, not the input")
        else:
            add("unknown-difference", "on your own input, changing the input did not change the output at all")
    if facts.decoder_ignores_source() and "cross-attention-kv" not in report.ids():
        add("cross-attention-kv", "on your own input, changing the source did not change the decoder's output at "
                                  "all: its cross-attention reads the decoder's own states, not the memory")
        attention_bug = True  # attending to its own states also reads the future: that is this bug, not the mask
    attention_bug = attention_bug or "cross-attention-kv" in report.ids()
    if "no-causal-mask" not in report.ids() and not attention_bug:  # an attention bug already explains it
        got = facts.decoder_reads_future(source)
        # the id needs its cause seen: an attention checked equal to ours cannot be what mixes the positions
        checked = any(c.kind in ("attention", "scaled_dot_product") and c.status == "ok" for c in report.components)
        if got and got[0] and got[2] in ("all", "one ahead") and checked:
            add("no-causal-mask", f"on your own input, changing the last token of `{got[1]}` changed the outputs at "
                                  + ("every earlier position" if got[2] == "all" else "the position just before it")
                                  + ": the decoder reads the future")
        elif got and got[0]:
            add("unknown-difference", f"on your own input, changing the last token of `{got[1]}` changed the outputs at "
                                      f"some earlier positions (not all, not just the one before: positions mixed?): "
                                      f"the decoder reads the future")
    if "attention-dropout-in-eval" not in report.ids():
        wet = dropping_in_eval(facts)
        if wet is not None and re.search(r"attention|attn|注意力", wet, re.I):
            name_ = wet
            comp = next((c for c in report.components if c.name == name_), None)
            report.findings.append(finding("attention-dropout-in-eval", "attention", f"{name_}.forward",
                                           "put in eval(), the same input from your own run gave two different "
                                           "outputs: F.dropout(..., training=self.training)?"))
            if comp is None:
                report.components.append(Component("attention", name_, "differs", ["attention-dropout-in-eval"], ""))
            else:
                comp.status, comp.ids = "differs", [i for i in comp.ids if i != "unknown-difference"] + ["attention-dropout-in-eval"]
                comp.detail = ""
                report.findings = [x for x in report.findings if not (x.id == "unknown-difference"
                                                                      and x.where.startswith(name_ + "."))]
    for id_, detail in loss_in_their_loop(facts):
        if id_ not in report.ids():
            add(id_, detail)
    for id_, who, detail in square_masks_in_use(facts):
        if id_ not in report.ids():
            report.findings.append(finding(id_, "decoder_layer", f"{who}.forward", detail))
            comp = next((c for c in report.components if c.name == who), None)
            if comp is None:
                report.components.append(Component("decoder_layer", who, "differs", [id_], "the mask your model passed it"))
            else:
                comp.status, comp.ids = "differs", [i for i in comp.ids if i != "unknown-difference"] + [id_]
    if not {"missing-final-norm", "extra-final-norm"} & set(report.ids()):
        got = final_norm_in_use(report, facts)
        if got is not None:
            add(*got)
    loss = lm_loss_property(facts)
    if loss is not None:
        for id_, detail in loss:
            if id_ not in report.ids():
                add(id_, detail)
    inverted = facts.inverted_masks()
    if inverted and "mask-inverted" not in report.ids():
        add("mask-inverted", f"the additive mask your model passed to {inverted} for your own padded input is 0 on the "
                             f"padding and large negative on the real tokens: it hides the words and keeps the padding")


def lm_loss_property(facts):
    """Their model's own loss on their own first call (ids, targets), against cross-entropy computed from its
    logits: shifted by one unless their data already is (targets[:, :-1] == ids[:, 1:]), padding left out
    when their targets hold the padding id. [(id, detail)] for what differs, [] when it matches, None
    when the run cannot tell (no loss, no targets, or no variant reproduces it)."""
    import torch.nn.functional as F
    top = facts.watch.top()
    if top is None or not top.calls:
        return None
    args = dict(top.calls[0].args)
    from .facts import _TARGET, _token_ids
    inputs = [(n, v) for n, v in args.items() if _token_ids(n, v)]
    targets_ = [(n, v) for n, v in args.items() if _TARGET.search(n) and isinstance(v, torch.Tensor) and v.dim() == 2
                and not v.is_floating_point()]
    if len(inputs) != 1 or len(targets_) != 1:
        return None
    (_, ids), (tname, targets) = inputs[0], targets_[0]
    if ids.shape != targets.shape or ids.shape[1] < 2:
        return None
    try:
        mod = safe_copy(top.obj).eval()
        from .facts import recall
        with torch.no_grad():
            out = recall(mod, args)
    except Exception:
        return None
    if not isinstance(out, (tuple, list)):
        return None
    logits = next((t for t in out if isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[:2] == ids.shape), None)
    loss = next((t for t in out if isinstance(t, torch.Tensor) and t.dim() == 0), None)
    if logits is None or loss is None:
        return None
    if torch.equal(targets, ids):
        shift_expected = True
    elif torch.equal(targets[:, :-1], ids[:, 1:]):
        shift_expected = False
    else:
        return None
    pads = [p for p in facts.pad_ids(declared=True) if bool((targets == p).any())]
    pad = pads[0] if pads else None

    def ce(shift, ignore):
        lg, tg = (logits[:, :-1], targets[:, 1:]) if shift else (logits, targets)
        kw = {"ignore_index": pad} if ignore and pad is not None else {}
        return F.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(), tg.reshape(-1), **kw)

    def same(a, b):
        return bool(torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5))
    right = ce(shift_expected, True)
    if same(loss, right):
        return []
    found = []
    for shift in (shift_expected, not shift_expected):
        for ignore in ((True, False) if pad is not None else (True,)):
            if (shift, ignore) == (shift_expected, True) or not same(loss, ce(shift, ignore)):
                continue
            if shift != shift_expected and shift_expected:
                found.append(("target-not-shifted", f"its loss equals cross-entropy of logits[t] against targets[t] "
                                                    f"(`{tname}` is your input itself): position t must predict t+1"))
            if not ignore:
                found.append(("loss-on-padding", f"its loss equals cross-entropy with the padding id {pad} counted: "
                                                 f"leave it out with ignore_index={pad}"))
            return found or None
    return None


def dropping_in_eval(facts) -> str | None:
    """The innermost class of theirs whose instance, put in eval(), gives two outputs for the same input of
    their own run (dropout left on): its name, else None."""
    from .facts import _same_output, recall
    w = facts.watch
    seen = [s for s in facts.seen if s.calls]
    depth = {id(s.obj): sum(id(m) in w.instances for m in s.obj.modules()) for s in seen}
    done = set()
    module, drops = getattr(facts, "module", None), getattr(facts, "dropout_constants", {})
    saved = {n: vars(module)[n] for n in drops} if module is not None else {}
    try:  # their module-level rates as they wrote them (the checks run with 0)
        for n, v in drops.items():
            setattr(module, n, v)
        return _first_wet(seen, depth, done, recall, _same_output)
    finally:
        for n, v in saved.items():
            setattr(module, n, v)


def _first_wet(seen, depth, done, recall, _same_output):
    for s in sorted(seen, key=lambda s: depth[id(s.obj)]):
        if type(s.obj) in done:
            continue
        done.add(type(s.obj))
        try:
            mod = safe_copy(s.obj).eval()
            with torch.no_grad():
                torch.manual_seed(1)
                a = recall(mod, s.calls[0].args)
                torch.manual_seed(2)
                b = recall(mod, s.calls[0].args)
        except Exception:
            continue
        if not _same_output(a, b) and (isinstance(a, torch.Tensor) or isinstance(a, (tuple, list))):
            return type(s.obj).__name__
    return None


def loss_in_their_loop(facts) -> list:
    """F.cross_entropy as their own training step called it: its target is the model's own decoder input
    (not shifted by one), or it counts the padding id their data pads with (no ignore_index for it)."""
    from .facts import _token_ids, padding_value
    w = facts.watch
    top = w.top()
    if not w.losses or top is None or not top.calls:
        return []
    seqs = [v for n, v in top.calls[0].args.items() if _token_ids(n, v)]
    if not seqs:
        return []
    dec = seqs[-1]  # the decoder's (or the language model's) input
    out = []
    call = w.losses[0]
    target = call.get("target")
    if not isinstance(target, torch.Tensor) or target.is_floating_point():
        return []
    from .facts import causal_intent
    try:
        source = inspect.getsource(facts.module) if getattr(facts, "module", None) is not None else ""
    except (OSError, TypeError):
        source = ""
    predicts_next = len(seqs) >= 2 or causal_intent(source)  # an autoencoder's target is its input, rightly
    if predicts_next and target.numel() == dec.numel() and torch.equal(target.reshape(dec.shape), dec):
        out.append(("target-not-shifted", "the loss your training step computes takes the model's own input as "
                                          "the target: position t must predict token t+1"))
    if target.numel() != dec.numel() and target.numel() != dec.shape[0] * (dec.shape[1] - 1):
        return out  # not a loss per token (a classifier's labels): padding is not its question
    declared = facts.pad_ids(declared=True)
    batches = seqs + ([target.reshape(dec.shape)] if target.numel() == dec.numel() else [])
    pad = declared[0] if declared else padding_value(batches)
    ignore = call.get("ignore_index")
    data = [target] + seqs + [v for v in vars(facts.module).values() if isinstance(v, torch.Tensor) and v.dim() == 2
                              and not v.is_floating_point()] if getattr(facts, "module", None) is not None else [target]
    padded = pad is not None and any(bool((t == pad).any()) for t in data)  # their data has padding, this batch or not
    if ignore is not None and bool((target == ignore).any()):
        padded = False  # they left the padding out through the labels themselves (-100 where the padding was)
    if pad is not None and call.get("reduction", "mean") == "mean" and ignore != pad and padded:
        out.append(("loss-on-padding", f"the loss your training step computes counts the padding id {pad} "
                                       f"(ignore_index={ignore}): leave it out with ignore_index={pad}"))
    return out


def square_masks_in_use(facts) -> list:
    """The causal masks their model passed its layers for their own input, read as they are: the diagonal
    hidden (a position cannot see itself), or a later position visible, is `no-causal-mask`."""
    out = []
    seen_cls = set()
    for s in sorted(facts.seen, key=lambda s: s.calls[0].order if s.calls else 1 << 30):
        if not s.calls or type(s.obj) in seen_cls:
            continue
        for n, m in s.calls[0].args.items():
            if not isinstance(m, torch.Tensor) or "mask" not in n.lower() or m.dim() < 2 or m.shape[-1] != m.shape[-2] \
                    or m.shape[-1] < 3:
                continue
            rows = m.reshape(-1, m.shape[-2], m.shape[-1])
            if all(torch.equal(r[0:1].expand_as(r), r) for r in rows):
                continue  # the same row for every query: a padding mask, not a triangle
            hidden = _hidden(m, s, facts)
            if hidden is None:
                continue
            T = m.shape[-1]
            hid = hidden.reshape(-1, T, T)
            upper = torch.ones(T, T, dtype=torch.bool).triu(1)
            diag_hidden = ahead_seen = False
            for h0 in hid:
                real = ~h0.all(0)  # a padding column is hidden from every row: leave it out
                pairs = upper & real[None, :] & real[:, None]
                if bool((h0.diagonal() & real).any()):
                    diag_hidden = True
                if bool((~h0 & pairs).any()):
                    ahead_seen = True
            if diag_hidden and not ahead_seen:
                out.append(("no-causal-mask", type(s.obj).__name__, "the causal mask your model passed it hides the "
                            "diagonal too: a position cannot see itself (triu with k=0 where k=1 was meant?)"))
            seen_cls.add(type(s.obj))
            break
    return out[:1]


def _hidden(m: torch.Tensor, s, facts):
    """The mask as True = hidden: read from its own padding columns where it has them (hidden in every row), else
    from the convention their run showed."""
    if m.is_floating_point():
        if bool(((m == 0) | (m <= -1e4)).all()):
            return m <= -1e4
        return None
    b = m.bool()
    lower = torch.ones(m.shape[-1], m.shape[-1], dtype=torch.bool).tril(-1)
    vals = b.reshape(-1, m.shape[-1], m.shape[-1])[:, lower]
    if bool(vals.all()):
        return ~b  # the strict lower triangle is True: True = may attend
    if not bool(vals.any()):
        return b   # the strict lower triangle is False: True = hidden
    return None


def final_norm_in_use(report, facts):
    """The end of their stack as their own model runs it: after Pre-LN layers the last layer's output must go
    through one norm before the head (`missing-final-norm` when no norm of the model outside the layers
    receives it); after Post-LN layers, none (`extra-final-norm` when one does). (id, detail) or None."""
    from .facts import recall
    if any(x.severity == "bug" and x.component in ("layer_norm", "rms_norm") for x in report.findings):
        return None
    top = facts.watch.top()
    module = getattr(facts, "module", None)
    if top is None or not top.calls or module is None:
        return None
    order = {x.id for x in report.findings if x.component in ("block", "encoder_layer") and x.id in ("pre-ln", "post-ln")}
    if len(order) != 1:
        return None
    layer_names = {c.name for c in report.components if c.kind in ("block", "encoder_layer") and c.status == "ok"}
    classes = [getattr(module, n, None) for n in layer_names]
    classes = tuple(c for c in classes if isinstance(c, type))
    if not classes:
        return None
    mod = safe_copy(top.obj).eval()
    layers = [m for m in mod.modules() if isinstance(m, classes)]
    if len(layers) < 1:
        return None
    inside = {id(m) for layer in layers for m in layer.modules()}
    norms = [m for m in mod.modules() if id(m) not in inside and m is not mod
             and (isinstance(m, (nn.LayerNorm, nn.RMSNorm)) or re.search(r"norm", type(m).__name__, re.I))
             and not any(True for _ in m.children())]
    last, fed = [], []
    hooks = [layers[-1].register_forward_hook(lambda m, i, o: last.append(o[0] if isinstance(o, (tuple, list)) else o))]
    hooks += [n.register_forward_hook(lambda m, i, o: fed.append(i[0])) for n in norms]
    try:
        with torch.no_grad():
            recall(mod, top.calls[0].args)
    except Exception:
        return None
    finally:
        for h in hooks:
            h.remove()
    if not last or not isinstance(last[-1], torch.Tensor):
        return None
    h_last = last[-1]
    normed = any(isinstance(t, torch.Tensor) and t.shape == h_last.shape and torch.allclose(t, h_last) for t in fed)
    if "pre-ln" in order and not normed:
        return ("missing-final-norm", "Pre-LN layers, and on your own input the last layer's output reaches the head "
                                      "without a norm")
    if "post-ln" in order and normed:
        return ("extra-final-norm", "Post-LN layers already end in a norm; on your own input the model normalises "
                                    "the last layer's output again")
    return None
