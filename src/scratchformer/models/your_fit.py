"""Deciding, once, how a learner's model is built and called in our task (models/your_model.py says what and
why): their sizes with ours put in place, and their calling convention read from behaviour.

一次性决定：用你自己的尺寸（换上我们的词表、类别数、上下文长度）构造模型，并从行为判断调用方式和掩码约定。
"""
from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import torch

from ..errors import UserError
from .your_model import (CLASSES, LENGTH, MASK, TARGETS, VOCAB, YourModelConfig, build_net, call_net,
                         global_names, make_mask)


# a global that counts something we own (never `vocab`, a dict, or `labels`, a list)
COUNT = re.compile(r"(vocab|token|word|class|label|categor)(ulary)?s?_?(size|count|num|len)$|"
                   r"^n_?(vocab|tokens?|words|classes|labels|cls)$|^num_(tokens|words|classes|labels)$|^ntokens?$",
                   re.I)


def _leaves(kwargs: dict, path=()):
    """(path, name, value) of every number in their constructor's arguments, config fields included."""
    for k, v in kwargs.items():
        if isinstance(v, dict) and "__config__" in v:
            yield from _leaves(v["fields"], path + (k, "fields"))
        elif isinstance(v, dict) and not any(str(x).startswith("__") for x in v):
            yield from _leaves(v, path + (k,))
        elif isinstance(v, int) and not isinstance(v, bool):
            yield path + (k,), k, v


def _set(kwargs: dict, path: tuple, value) -> None:
    d = kwargs
    for p in path[:-1]:
        d = d[p]
    d[path[-1]] = value


def place_sizes(desc: dict, causal: bool, vocab: int, n_out: int, context: int, constants: dict,
                free: set[str], read: set[str] = frozenset()) -> tuple[dict, dict, int | None, list[str]]:
    """(kwargs, overrides, max_len, notes): their constructor's arguments and the globals their classes read,
    with our vocabulary, classes and context in place."""
    kwargs = copy.deepcopy(desc.get("ctor") or {})
    notes: list[str] = []
    placed = {"vocab": False, "classes": causal, "length": False}
    max_len = None
    leaves = list(_leaves(kwargs))
    tables = desc.get("tables") or []
    for path, name, value in leaves:
        if VOCAB.search(name) and not LENGTH.search(name):
            _set(kwargs, path, vocab)
            placed["vocab"] = True
        elif not causal and CLASSES.search(name):
            _set(kwargs, path, n_out)
            placed["classes"] = True
        elif LENGTH.search(name):
            max_len = max(value, context)
            _set(kwargs, path, max_len)
            placed["length"] = True
    if not placed["vocab"] and tables:  # by value: the one argument equal to the size of their token table
        same = [p for p, _, v in leaves if v == max(tables)]
        if len(same) == 1:
            _set(kwargs, same[0], vocab)
            placed["vocab"] = True
            notes.append(f"the vocabulary size is {'.'.join(same[0][-1:])} (the size of its token table)")
    overrides = {}
    for name in sorted(free | {n for n in read if COUNT.search(n)}):
        # globals their classes read that only their script sets (or that count what we own, however set)
        if VOCAB.search(name) and not LENGTH.search(name) and (COUNT.search(name) or name in free):
            overrides[name] = vocab
            placed["vocab"] = True
        elif not causal and CLASSES.search(name) and (COUNT.search(name) or name in free):
            overrides[name] = n_out
            placed["classes"] = True
        elif LENGTH.search(name):
            overrides[name] = max_len = max(int(constants.get(name, 0) or 0), context)
            placed["length"] = True
        elif name in constants:
            overrides[name] = constants[name]
    for name, value in constants.items():  # their constants that their model reads and that are sizes we own
        if name in overrides or name not in read or not isinstance(value, int) or isinstance(value, bool):
            continue
        if VOCAB.search(name) and not LENGTH.search(name):
            overrides[name], placed["vocab"] = vocab, True
        elif not causal and CLASSES.search(name) and not placed["classes"]:
            overrides[name], placed["classes"] = n_out, True
        elif LENGTH.search(name):
            overrides[name] = max_len = max(value, context)
            if value < context:
                notes.append(f"{name} = {value} is raised to {context}, the context of this run")
    if not placed["vocab"]:
        raise UserError(f"could not find where {desc['entry']} takes its vocabulary size: give its constructor an "
                        f"argument such as vocab_size (or write a function build(vocab_size, n_classes) that returns "
                        f"the model and pass --model FILE.py:build)")
    return kwargs, overrides, max_len, notes


def _mask_forms(desc: dict, param: str, causal: bool) -> list[dict]:
    """Candidate forms of their mask argument: the watched call's shape and dtype where it was seen, else all."""
    seen = ((desc.get("call") or {}).get(param) or {}).get("tensor")
    if causal:
        shapes = ["TT", "11TT"]
    else:
        shapes = ["BT", "B11T", "B1T"]
    dtypes = ["bool", "float", "long"]
    additive = [False, True]
    if seen:
        s, dt = seen["shape"], seen["dtype"]
        nd = len(s)
        shapes = {2: ["TT"] if causal else ["BT"],
                  3: ["B1T"] if s[1] == 1 else ["BTT"], 4: ["11TT"] if s[0] == 1 and s[2] == s[3] and causal
                  else ["B11T"]}.get(nd, shapes)
        dtypes = ["bool"] if dt == "bool" else ["long"] if dt.startswith("int") and dt != "int32" else \
            ["int"] if dt == "int32" else ["float"]
        vals = seen.get("values")
        if dt.startswith("float") and vals is not None and any(v < -1e3 or math.isinf(v) for v in vals):
            additive = [True]
        elif not dt.startswith("float"):
            additive = [False]
    forms = []
    for shape in shapes:
        for add in additive:
            if add:
                forms.append({"param": param, "shape": shape, "dtype": "float", "additive": True,
                              "fill": float("-inf") if causal else -1e9})
                continue
            for dt in dtypes:
                for true in ("keep", "pad"):
                    forms.append({"param": param, "shape": shape, "dtype": dt, "true": true})
    return forms


def _probe_ids(vocab: int, T: int, pad_id: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of ids and a copy that differs where it should not matter: the second row's padding (classify),
    the last position (lm)."""
    g = torch.Generator().manual_seed(0)
    lo = max(pad_id + 1, 4)
    ids = torch.randint(lo, max(lo + 1, vocab), (2, T), generator=g)
    other = ids.clone()
    if causal:
        other[:, -1] = torch.randint(lo, max(lo + 1, vocab), (2,), generator=g)
        return ids, other
    n = max(1, T // 3)
    other[1, T - n:] = torch.randint(lo, max(lo + 1, vocab), (n,), generator=g)
    ids[1, T - n:] = pad_id
    return ids, other


def _moved(net, call: dict, ids, other, pad_id: int, causal: bool, front) -> float | None:
    """How much what should not matter moves the output under `call` (None: the call fails or is not finite)."""
    try:
        with torch.no_grad():
            a = call_net(net, call, front(ids) if front else ids, ids, pad_id)
            b = call_net(net, call, front(other) if front else other, ids, pad_id)  # the same mask: `ids`'
    except Exception:  # noqa: BLE001 - a form their code does not take
        return None
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()) or a.shape[0] != 2:
        return None
    if causal:
        if a.dim() != 3:
            return None
        return float((a[:, :-1] - b[:, :-1]).abs().max())  # the last token changed: earlier outputs must not move
    return float((a[1] - b[1]).abs().max())


def find_call(net, desc: dict, causal: bool, vocab: int, pad_id: int, front=None) -> tuple[dict, list[str]]:
    """Their calling convention (models/your_model.py's docstring) and what the run should say about it."""
    params = [p for p in desc.get("forward", []) if p["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD",
                                                                   "KEYWORD_ONLY")]
    if not params:
        raise UserError(f"{desc['entry']}.forward takes no named inputs; it needs the token ids first")
    ids_param = params[0]["name"]
    seen = desc.get("call") or {}
    masks, targets, missing = [], None, []
    for p in params[1:]:
        t = (seen.get(p["name"]) or {}).get("tensor")
        if TARGETS.search(p["name"]) and not p["required"]:
            targets = p["name"]
        elif t is not None and (MASK.search(p["name"]) or t["dtype"] in ("bool",) or len(t["shape"]) >= 2):
            masks.append(p["name"])
        elif MASK.search(p["name"]):
            masks.append(p["name"])
        elif p["required"]:
            missing.append(p["name"])
    if missing:
        raise UserError(f"{desc['entry']}.forward({', '.join(p['name'] for p in params)}) needs "
                        f"{', '.join(missing)} besides the ids and a mask: an encoder-decoder or a model with other "
                        f"inputs. `--model` trains a model that reads token ids (and a padding or causal mask)")
    T = 12
    ids, other = _probe_ids(vocab, T, pad_id, causal)
    base = {"ids": ids_param, "output": 0}
    notes: list[str] = []

    def with_output(call: dict) -> dict | None:
        """The call with the index of the tensor to read in what it returns; None if nothing fits."""
        try:
            with torch.no_grad():
                out = net(**{ids_param: front(ids) if front else ids,
                             **({call["mask"]["param"]: make_mask(call["mask"], ids, pad_id)} if call.get("mask") else {}),
                             **({call["targets"]: ids} if call.get("targets") else {})})
        except Exception:  # noqa: BLE001
            return None
        outs = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (tuple, list)) else [out]
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and o.dim() in (2, 3) and o.shape[0] == 2 and o.is_floating_point():
                if causal and (o.dim() != 3 or o.shape[1] != T):
                    continue
                return {**call, "output": i}
        return None

    candidates = []
    for m in masks:
        candidates += [{**base, "mask": f} for f in _mask_forms(desc, m, causal)]
    required_mask = any(p["name"] in masks and p["required"] for p in params)
    if not required_mask:
        candidates.append(dict(base))
    scored = []
    for c in candidates:
        for t in ([None, targets] if targets else [None]):
            call = with_output({**c, **({"targets": t} if t else {})})
            if call is None:
                continue
            moved = _moved(net, call, ids, other, pad_id, causal, front)
            if moved is not None:
                scored.append((moved, len(scored), call))
            break
    if not scored:
        raise UserError(f"{desc['entry']} could not be called with token ids (B, T){' and a mask' if masks else ''} "
                        f"in any form tried; its forward is ({', '.join(p['name'] for p in params)})")
    scored.sort(key=lambda s: (round(s[0], 6), s[1]))
    best = scored[0][2]
    if causal and scored[0][0] > 1e-4:
        raise UserError(f"{desc['entry']} lets a position read the next tokens in every form tried (output at "
                        f"position t moves when token t+1 changes by {scored[0][0]:.3g}): a language model must be "
                        f"causal; `scratchformer check` names where")
    if best.get("mask"):
        f = best["mask"]
        masked = "True/1 = masked (the future)" if f["shape"] in ("TT", "11TT") else "True/1 = padding"
        how = "additive (0 keep, -inf/-1e9 masked)" if f.get("additive") else \
            f"{f['dtype']}, {'True/1 = may attend' if f['true'] == 'keep' else masked}"
        notes.append(f"its mask `{f['param']}` is passed as shape {f['shape']}, {how} (read from how its output moves)")
    if best.get("targets"):
        notes.append(f"`{best['targets']}` is passed so that it returns logits at every position (its loss is not used)")
    return best, notes


def fit_yours(cfg: YourModelConfig, desc: dict, folder: Path, causal: bool, vocab: int, n_out: int, context: int,
              pad_id: int = 0, log=print) -> YourModelConfig:
    """`cfg` (source, sha256, entry) completed: sizes placed, call and output decided (module docstring)."""
    cfg = cfg.copy() if hasattr(cfg, "copy") else copy.deepcopy(cfg)
    if desc.get("kind") == "function":  # their factory: called with our sizes by its parameters' names
        kw = {}
        for p in desc["params"]:
            kw[p] = vocab if VOCAB.search(p) else n_out if CLASSES.search(p) else context if LENGTH.search(p) else None
        if any(v is None for v in kw.values()):
            raise UserError(f"{desc['entry']}({', '.join(desc['params'])}): a factory takes only the sizes we give "
                            f"(vocab_size, n_classes, max_len by name)")
        desc = {**desc, "ctor": {}, "forward": []}
        cfg.kwargs = kw
    else:
        if desc.get("ctor") is None and desc.get("init"):
            raise UserError(f"{desc['entry']} is never built by your file and its constructor "
                            f"({', '.join(desc['init'])}) has no defaults for every size: add a demo that builds it")
        parts = [k for k, v in (desc.get("ctor") or {}).items() if isinstance(v, dict) and "__part__" in v]
        if parts:
            raise UserError(f"{desc['entry']} is built from ready-made parts ({', '.join(parts)}), which cannot be "
                            f"rebuilt from its file's sizes: write a function build(vocab_size, n_classes) that "
                            f"returns the model and pass --model FILE.py:build")
        free, read = global_names(folder, cfg)
        constants = {**(desc.get("constants") or {}), **(desc.get("size_globals") or {})}
        cfg.kwargs, cfg.overrides, cfg.max_len, notes = place_sizes(desc, causal, vocab, n_out, context,
                                                                    constants, free, read)
        for name, value in (desc.get("size_globals") or {}).items():  # --size NAME=N for a global it reads
            cfg.overrides.setdefault(name, value)
        cfg.notes = list(notes)
    torch.manual_seed(0)
    net = build_net(cfg, folder).eval()
    first = ((desc.get("call") or {}).get((desc.get("forward") or [{}])[0].get("name", "")) or {}).get("tensor")
    front = None
    if first and first["dtype"].startswith("float") and len(first["shape"]) == 3:  # it takes embeddings
        from .your_model import _front
        cfg.front = int(first["shape"][-1])
        front = _front(cfg, vocab, pad_id)
        cfg.notes.append(f"it takes embeddings (B, T, {cfg.front}): ours (tokens + sinusoidal positions) go in front")
    if not desc.get("forward"):
        import inspect
        desc = {**desc, "forward": [{"name": p.name, "required": p.default is p.empty, "kind": p.kind.name}
                                    for p in inspect.signature(net.forward).parameters.values()]}
    cfg.call, notes = find_call(net, desc, causal, vocab, pad_id if not causal else -1, front)
    cfg.notes += notes
    with torch.no_grad():
        ids = torch.randint(4, max(5, vocab), (2, context))  # a whole window: a table too short says so now
        try:
            out = call_net(net, cfg.call, front(ids) if front else ids, ids, pad_id)
        except Exception as e:  # noqa: BLE001 - their forward on a window of our length
            raise UserError(f"{desc['entry']} fails on a window of {context} tokens ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}): a position table or causal mask shorter "
                            f"than {context}? give it a larger size, or use a smaller "
                            f"{'data.context' if causal else 'data.max_len'}") from None
    width = out.shape[-1]
    if causal and width != vocab:
        cfg.head = int(width)
        cfg.notes.append(f"it returns hidden states of width {width}: our output layer ({width} -> {vocab}) reads them")
    elif not causal and (width != n_out or out.dim() == 3 and width != n_out):
        cfg.head = int(width)
        cfg.notes.append(f"it returns {'per-token ' if out.dim() == 3 else ''}features of width {width}: "
                         f"{'their mean over the real tokens, then ' if out.dim() == 3 else ''}our linear head "
                         f"({width} -> {n_out}) reads them")
    elif not causal and out.dim() == 3:
        cfg.notes.append("it returns per-token logits: their mean over the real tokens is the text's")
    return cfg
