"""What the learner's own run tells the checks (`RunFacts`), and the helpers that read a run again: a module
copied safely, a recorded call repeated (`recall`), token ids told from masks and targets, the padding id.

看运行得到的事实：尺寸、代表实例、按调用者的方式调用、每个组件的掩码约定、使用中的因果性、padding 编号。

Every answer is None where the run did not show it; the checks then fall back to what they did before. This
module imports nothing of the checker's (the watch imports it; discover and in_use read from it).
"""
from __future__ import annotations

import inspect
import re

import torch
from torch import nn

def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensors(x)


def _plain(v) -> bool:
    """A value a call can be given again as it was: a number, a switch, a word, None."""
    return v is None or isinstance(v, (bool, int, float, str))


class RunFacts:
    """The checks' questions, answered from one watched run (`Watch`); every answer is None where the run
    did not show it, and the checks then fall back to what they did before (names, probing)."""

    def __init__(self, watch):  # a watch.Watch, or None (no run)
        self.watch = watch
        self.seen = list(watch.instances.values()) if watch is not None else []
        self._causal: dict = {}
        self.inverted: dict = {}  # classes their model passed an additive mask that hides the words

    def __bool__(self) -> bool:
        return any(s.calls for s in self.seen) or bool(self.watch is not None and self.watch.functions)

    # which instance of a class stands for it: one that was called, a causal one first (the stronger check)
    def representative(self, cls):
        if self.watch is None or not isinstance(cls, type):
            return None
        called = self.watch.called(cls)
        if not called:
            built = self.watch.of_class(cls)
            return built[0] if built else None
        inside = [s for s in called if s.calls[0].parent is not None]  # as the model uses it, not a side demo
        # the configuration their model repeats most (its layers' attention, not the one cross-attention)
        def config(s):
            return tuple(sorted((k, v) for k, v in s.ctor.items() if _plain(v) and "drop" not in k.lower()))
        counts = {}
        for s in inside:
            counts[config(s)] = counts.get(config(s), 0) + 1
        inside.sort(key=lambda s: -counts[config(s)])
        called = inside + [s for s in called if s not in inside]
        for s in called:
            if self.causal_instance(s):
                return s
        return called[0]

    def ctor(self, cls) -> dict | None:
        """The arguments their program built `cls` with: the representative's, else another instance's (copies
        made with copy.deepcopy, as `clones()` makes them, never pass through __init__)."""
        s = self.representative(cls)
        if s is not None and s.ctor:
            return s.ctor
        if self.watch is None or not isinstance(cls, type):
            return None
        return next((x.ctor for x in self.watch.of_class(cls) if x.ctor), None)

    def call_args(self, cls) -> dict:
        s = self.representative(cls)
        return s.calls[0].args if s is not None and s.calls else {}

    def raised_in(self, name: str) -> str | None:
        w = self.watch
        return w.raised if w is not None and w.raised and w.raised_in == name else None

    # causality as used: does output i move when input j > i changes, on their own call?
    def causal_instance(self, s) -> bool | None:
        key = id(s.obj)
        if key not in self._causal:
            self._causal[key] = _reads_only_past(s)
        return self._causal[key]

    def causal_in_use(self, cls) -> bool | None:
        """True: some instance of it is causal where the program uses it; False: every use reads the future;
        None: not called, or not a sequence-to-sequence shape."""
        if self.watch is None or not isinstance(cls, type):
            return None
        got = [self.causal_instance(s) for s in self.watch.called(cls)]
        got = [g for g in got if g is not None]
        if not got:
            return None
        return any(got)

    def decoder_reads_future(self, source: str):
        """(True, the input changed) when their top model, on its own first call, moves an earlier output
        position as the last token of its decoder input changes, and the model is a decoder: two token
        sequences in (an encoder-decoder), or one with a causal intent in the file (a `tril`, `is_causal`,
        `generate`, ...). (False, name) when it does not; None when the run cannot tell."""
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        args = dict(top.calls[0].args)
        seqs = [n for n, v in args.items() if _token_ids(n, v)]
        if not seqs:
            return None
        if len(seqs) >= 2:  # an encoder-decoder: the target sequence is the decoder's input
            name = next((n for n in seqs if _TGT.search(n)), None)
            if name is None:
                return None
        else:
            if not causal_intent(source):
                return None
            name = seqs[0]
        ids = args[name]
        changed = dict(args)
        bumped = ids.clone()
        bumped[:, -1] = torch.where(bumped[:, -1] > 1, bumped[:, -1] - 1, bumped[:, -1] + 1)
        changed[name] = bumped
        for n, v in args.items():  # targets beside the ids (the loss): not the question here
            if n not in seqs and _TARGET.search(n) and isinstance(v, torch.Tensor) and not v.is_floating_point() \
                    and v.shape == ids.shape:
                changed[n] = args[n] = None
        try:
            mod = safe_copy(top.obj).eval()
            with torch.no_grad():
                a, b, a2 = recall(mod, args), recall(mod, changed), recall(mod, args)
        except Exception:
            return None
        if not _same_output(a, a2):
            return None  # not repeatable in eval (dropout left on): the property cannot be read
        a = a if isinstance(a, torch.Tensor) else next(_tensors(a), None)
        b = b if isinstance(b, torch.Tensor) else next(_tensors(b), None)
        if a is None or b is None or a.shape != b.shape or a.dim() < 3 or a.shape[:2] != ids.shape:
            return None
        real = _real_positions(args, ids)  # (B, T): a padded position may read anything (its output is not used)
        moved = [t for t in range(ids.shape[1] - 1)
                 if not torch.allclose(a[real[:, t], t], b[real[:, t], t], rtol=1e-5, atol=1e-6, equal_nan=True)]
        if not moved:
            return False, name
        # how it reads the future says why: every earlier position (no causal mask), or the one just before
        # (a mask one ahead); other patterns (positions mixed by a head split, say) are not the mask's
        T = ids.shape[1]
        why = "all" if 0 in moved else "one ahead" if moved == [T - 2] else "other"  # the first position reads the last
        return True, name, why

    def ignores_its_input(self) -> str | None:
        """A one-input model whose output does not move when its input changes at all: the name of its
        cross-attention when it holds one (called without the input as its keys and values), '' otherwise,
        None when the run cannot tell."""
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        args = dict(top.calls[0].args)
        xs = [n for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() >= 2 and "mask" not in n.lower()
              and not _TARGET.search(n)]
        if len(xs) != 1:
            return None
        x = args[xs[0]]
        changed = dict(args)
        if x.is_floating_point():
            changed[xs[0]] = x + 1.0 + x.abs()
        else:
            changed[xs[0]] = torch.where(x > 1, x - 1, x + 1)
        try:
            mod = safe_copy(top.obj).eval()
            with torch.no_grad():
                a, b, a2 = recall(mod, args), recall(mod, changed), recall(mod, args)
        except Exception:
            return None
        if not _same_output(a, a2) or not _same_output(a, b):
            return None
        cross = next((n for n, m in top.obj.named_modules() if re.search(r"cross|enc_?dec|src_attn", n.split(".")[-1], re.I)), None)
        return cross or ""

    def decoder_ignores_source(self) -> bool | None:
        """An encoder-decoder whose output does not move when its source changes (its cross-attention reads the
        decoder's own states, not the memory): True; False when it moves; None when the run cannot tell."""
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        args = dict(top.calls[0].args)
        seqs = [n for n, v in args.items() if _token_ids(n, v)]
        tgt = next((n for n in seqs if _TGT.search(n)), None)
        if len(seqs) < 2 or tgt is None:
            return None
        src = next(n for n in seqs if n != tgt)
        changed = dict(args)
        bumped = args[src].clone()
        bumped[:, 0] = torch.where(bumped[:, 0] > 1, bumped[:, 0] - 1, bumped[:, 0] + 1)
        changed[src] = bumped
        try:
            mod = safe_copy(top.obj).eval()
            with torch.no_grad():
                a, b, a2 = recall(mod, args), recall(mod, changed), recall(mod, args)
        except Exception:
            return None
        if not _same_output(a, a2):
            return None
        return _same_output(a, b)

    def top_reads_future(self) -> bool | None:
        """Their top model on its own first call, and again with the last token changed: True when an
        earlier position's output moved (it reads the future), False when none did, None when its call
        takes no token ids (B, T) or gives no (B, T, ...) output."""
        if "_top_future" in self._causal:
            return self._causal["_top_future"]
        top = self.watch.top() if self.watch is not None else None
        out = None
        if top is not None and top.calls:
            args = dict(top.calls[0].args)
            name = next((n for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 2
                         and not v.is_floating_point() and v.dtype != torch.bool and v.shape[1] > 1), None)
            if name is not None:
                ids = args[name]
                changed = dict(args)
                bumped = ids.clone()
                bumped[:, -1] = torch.where(bumped[:, -1] > 1, bumped[:, -1] - 1, bumped[:, -1] + 1)
                changed[name] = bumped
                for n, v in args.items():  # targets given beside the ids: the loss is not the question
                    if n != name and _TARGET.search(n) and isinstance(v, torch.Tensor) and not v.is_floating_point() \
                            and v.shape == ids.shape:
                        changed[n] = args[n] = None
                try:
                    mod = safe_copy(top.obj).eval()
                    with torch.no_grad():
                        a, b = recall(mod, args), recall(mod, changed)
                    a = a if isinstance(a, torch.Tensor) else next(_tensors(a), None)
                    b = b if isinstance(b, torch.Tensor) else next(_tensors(b), None)
                    if a is not None and b is not None and a.shape == b.shape and a.dim() >= 2 \
                            and a.shape[:2] == ids.shape:
                        out = not torch.allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6, equal_nan=True)
                except Exception:
                    out = None
        self._causal["_top_future"] = out
        return out

    # the mask convention, read from the masks their model built for their own padded input
    def mask_form(self, cls=None):
        """The convention of the masks their model passed (to `cls` only, when given; else to the innermost
        component that got one) for their own padded input: "keep", "pad" or "add", with dtype and rank."""
        from .masks import MaskForm, _dtype_of
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        ids = next((t for t in _tensors(list(top.calls[0].args.values()))
                    if t.dim() == 2 and not t.is_floating_point() and t.dtype != torch.bool), None)
        if ids is None:
            return None
        depth = {id(s.obj): sum(id(m) in self.watch.instances for m in s.obj.modules()) for s in self.seen}
        pool = [s for s in self.seen if cls is None or type(s.obj) is cls]
        for pad in self._pad_ids(top):
            P = ids == pad
            if not P.any() or P.all() or not (~P).any(dim=1).all():
                continue
            B, S = ids.shape
            for s in sorted(pool, key=lambda s: (depth[id(s.obj)], s.calls[0].order if s.calls else 1 << 30)):
                for c in s.calls[:1]:
                    for name, v in c.args.items():
                        if not isinstance(v, torch.Tensor) or "mask" not in name.lower() or "key_padding" in name.lower():
                            continue
                        form = _read_mask(v, P, B, S)
                        if form is not None:
                            kind, ndim = form
                            if kind == "add-inverted":
                                self.inverted.setdefault(type(s.obj).__name__, 1)
                                kind = "add"
                            who = type(s.obj).__name__
                            return MaskForm(kind, _dtype_of(v), ndim if ndim in (3, 4) else None,
                                            f"the mask your model passed to {who} for your own padded input",
                                            f"你的模型为你自己带 padding 的输入传给 {who} 的掩码")
        return None

    def inverted_masks(self) -> str | None:
        self.mask_form()
        for s in self.seen:
            self.mask_form(type(s.obj)) if s.calls else None
        return ", ".join(sorted(self.inverted)) or None

    def pad_ids(self, declared: bool = False) -> list[int]:
        """The padding ids their program names (a `pad` argument or config field, an embedding's padding_idx);
        0 last unless `declared` (then only what they named)."""
        top = self.watch.top() if self.watch is not None else None
        if top is None:
            return [] if declared else [0]
        return self._pad_ids(top, fallback=not declared)

    def _pad_ids(self, top, fallback: bool = True) -> list[int]:
        out = []
        for s in [top] + self.seen:
            for n, v in list(s.ctor.items()) + [kv for v in s.ctor.values() for kv in _fields(v).items()]:
                if isinstance(n, str) and "pad" in n.lower() and isinstance(v, int) and not isinstance(v, bool):
                    out.append(v)
        for m in top.obj.modules():
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                out.append(int(m.padding_idx))
        out += _vocabulary_pads(getattr(self, "module", None))
        if fallback:
            out.append(0)
        return list(dict.fromkeys(out))

    # the sizes their own modules were built with
    def sizes_into(self, sizes, module) -> None:
        """Fill `sizes` from the run: the top model's constructor arguments and config first, then every
        other instance's, then live attributes and shapes (heads on an attention, the embedding's width).
        Sizes the learner gave with --size or `# check:` keep winning."""
        from .sizes import SIZE_NAMES
        if not self.seen:
            return
        fixed = {k for k, v in sizes.came_from.items() if "--size" in v or "# check:" in v}
        if self.watch.synthetic:  # our call was built from the sizes their file states: those keep their source
            fixed |= set(sizes.came_from)
        got: dict = {}

        def take(size, value, where):
            if size not in got and size not in fixed and isinstance(value, int) and not isinstance(value, bool) \
                    and value > 0:
                got[size] = (value, where)

        def read(mapping: dict, where: str):
            for size, names in SIZE_NAMES.items():
                for n, v in mapping.items():
                    if isinstance(n, str) and n.lower() in names:
                        take(size, v, f"{n}={v} {where}")

        top = self.watch.top()
        reps = {id(r.obj) for r in (self.representative(type(s.obj)) for s in self.seen) if r is not None}
        rest = [s for s in self.seen if s is not top]
        order = ([top] if top is not None else []) + [s for s in rest if id(s.obj) in reps] \
            + [s for s in rest if id(s.obj) not in reps]  # each class's representative before its odd instances
        config = None
        whose = "the check's call of your model" if self.watch.synthetic else "your run"
        for s in order:
            cname = type(s.obj).__name__
            read(s.ctor, f"in {whose}: {cname}(...)")
            for n, v in s.ctor.items():
                fields = _fields(v)
                if fields:
                    read(fields, f"in the {n} passed to {cname}(...) in {whose}")
                    if config is None and not isinstance(v, nn.Module):
                        config = v
        for s in order:  # live attributes: self.n_heads = n_heads
            attrs = {k: v for k, v in vars(s.obj).items() if not k.startswith("_")}
            read({k: v for k, v in attrs.items() if k.lower() in SIZE_NAMES["heads"] + SIZE_NAMES["kv_heads"]},
                 f"on your {type(s.obj).__name__}")
            for m in s.obj.modules():
                if isinstance(m, nn.MultiheadAttention):
                    take("heads", m.num_heads, f"num_heads={m.num_heads} of the nn.MultiheadAttention in your run")
                    take("d_model", m.embed_dim, f"embed_dim={m.embed_dim} of the nn.MultiheadAttention in your run")
        if top is not None and "d_model" not in got:
            embs = [m for m in top.obj.modules() if isinstance(m, nn.Embedding)]
            if embs:
                e = max(embs, key=lambda m: m.num_embeddings)
                take("d_model", e.embedding_dim, f"the width of your run's embedding ({e.embedding_dim})")
                take("vocab", e.num_embeddings, f"the rows of your run's embedding ({e.num_embeddings})")
        d, h = (got.get("d_model") or (sizes.d_model,))[0], (got.get("heads") or (sizes.heads,))[0]
        if d % h:
            got.pop("heads", None)
            got.pop("d_model", None)
        for size, (value, where) in got.items():
            setattr(sizes, size, value)
            sizes.came_from[size] = where
        if config is not None:
            sizes.config = _without_dropout(config)


def _fields(v) -> dict:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if isinstance(k, str)}
    if isinstance(v, (nn.Module, torch.Tensor, type)) or _plain(v) or callable(v):
        return {}
    try:
        return {k: x for k, x in vars(v).items() if not k.startswith("_")}
    except TypeError:
        return {}


def _without_dropout(cfg):
    import copy
    try:
        out = copy.deepcopy(cfg)
    except Exception:
        return cfg
    items = out.items() if isinstance(out, dict) else list(_fields(out).items())
    for k, v in list(items):
        if "drop" in k.lower() and isinstance(v, float):
            try:
                if isinstance(out, dict):
                    out[k] = 0.0
                else:
                    setattr(out, k, 0.0)
            except Exception:
                pass
    return out


def _read_mask(m: torch.Tensor, P: torch.Tensor, B: int, S: int):
    """("keep" | "pad" | "add", rank) when the mask `m` marks exactly the padding `P` (B, S) along its keys."""
    if m.dim() < 2 or m.shape[-1] != S or m.shape[0] != B:
        return None
    rows = m.reshape(B, -1, S)  # (B, R, S): every query row, every head
    if not torch.equal(rows.amin(1), rows.amax(1)):
        return None  # a causal triangle in it: not the padding alone
    r = rows[:, 0, :]
    if r.is_floating_point():
        at_pad, at_tok = r[P], r[~P]
        if (at_tok == 0).all() and (at_pad <= -1e4).all():
            return "add", m.dim()
        if (at_pad == 0).all() and (at_tok <= -1e4).all():
            return "add-inverted", m.dim()  # added to the scores, it hides the words: inverted wherever it is used
        if (at_tok == 0).all() and (at_pad == 1).all():
            return "pad", m.dim()
        if (at_tok == 1).all() and (at_pad == 0).all():
            return "keep", m.dim()
        return None
    b = r.bool()
    if b[P].all() and not b[~P].any():
        return "pad", m.dim()
    if not b[P].any() and b[~P].all():
        return "keep", m.dim()
    return None


def _reads_only_past(s) -> bool | None:
    """Their instance on their own first call, and again with the last position of its sequence input
    changed: True when no earlier position's output moved (causal), False when one did, None when the call
    has no (B, T, C) input or cannot be repeated."""
    if not s.calls:
        return None
    args = dict(s.calls[0].args)
    first = next(((n, v) for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 3
                  and v.is_floating_point() and v.shape[1] > 1), None)
    if first is None:
        return None
    _, x = first
    T = x.shape[1]
    changed = dict(args)
    bump = torch.zeros_like(x)
    bump[:, -1] = 1.0 + x[:, -1].abs()
    for n, v in args.items():  # q, k, v given the same tensor: change it everywhere
        if isinstance(v, torch.Tensor) and v.shape == x.shape and torch.equal(v, x):
            changed[n] = v + bump
    others = [v for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point()
              and v is not x and not (v.shape == x.shape and torch.equal(v, x))]
    if others:
        return None  # keys from another sequence (cross-attention, memory): not a question of causality
    try:
        mod = safe_copy(s.obj).eval()
        with torch.no_grad():
            a = recall(mod, args)
            b = recall(mod, changed)
            a2 = recall(mod, args)
    except Exception:
        return None
    if not _same_output(a, a2):
        return None  # not repeatable in eval (dropout left on): causality cannot be read
    a = next(_tensors(a), None) if not isinstance(a, torch.Tensor) else a
    b = next(_tensors(b), None) if not isinstance(b, torch.Tensor) else b
    if a is None or b is None or a.shape != b.shape or a.dim() < 2 or a.shape[1] != T:
        return None
    return bool(torch.allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6, equal_nan=True))


def recall(mod: nn.Module, args: dict):
    """Call `mod` again with the arguments a watched call recorded (by parameter name; *args and **kwargs
    as they were)."""
    import copy
    params = list(inspect.signature(mod.forward).parameters.values())
    has_var = any(p.kind == p.VAR_POSITIONAL for p in params)
    try:  # a cache dict or list their call filled in place: each call gets its own copy, as it was
        args = copy.deepcopy(args)
    except Exception:
        pass
    pos, kw = [], {}
    for p in params:
        if p.name not in args:
            continue
        v = args[p.name]
        if p.kind == p.VAR_POSITIONAL:
            pos.extend(v)
        elif p.kind == p.VAR_KEYWORD:
            kw.update(v)
        elif p.kind == p.POSITIONAL_ONLY or has_var and p.kind == p.POSITIONAL_OR_KEYWORD:
            pos.append(v)
        else:
            kw[p.name] = v
    return mod(*pos, **kw)


_TGT = re.compile(r"tgt|trg|target_in|dec|decoder|^y$|output_ids|labels_in", re.I)


def _same_output(a, b) -> bool:
    a = a if isinstance(a, torch.Tensor) else next(_tensors(a), None)
    b = b if isinstance(b, torch.Tensor) else next(_tensors(b), None)
    return a is not None and b is not None and a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-7, equal_nan=True)


_TARGET = re.compile(r"target|label|^y(b|s|_true)?$|loss|gold|answer|dec_out|tgt_out|output_ids", re.I)


def _token_ids(name: str, v) -> bool:
    """A (B, T) tensor of token ids given as an input: not a mask (its name says mask, or it holds only 0 and 1),
    not the targets given beside the inputs."""
    if not isinstance(v, torch.Tensor) or v.dim() != 2 or v.shape[1] < 2 or v.is_floating_point() or v.dtype == torch.bool:
        return False
    if "mask" in name.lower() or _TARGET.search(name):
        return False
    return not bool(((v == 0) | (v == 1)).all())


def padding_value(seqs) -> int | None:
    """The id their data pads with, read from their own batches: a value that fills only a suffix of every row
    it is in, in every batch, and that is absent from some row or fills suffixes of different lengths (so a
    sentence-final '.' in every row, always one long, is not taken)."""
    seqs = [t for t in seqs if t is not None and t.dim() == 2 and t.shape[1] >= 2]
    if not seqs:
        return None
    ends = torch.unique(torch.cat([t[:, -1] for t in seqs])).tolist()
    for v in ends:
        ok, lengths, absent = True, set(), False
        for t in seqs:
            hit = t == v
            if not bool((hit[:, 1:] >= hit[:, :-1]).all()):  # once v starts in a row, it never stops
                ok = False
                break
            lengths.update(hit.sum(1).tolist())
            absent = absent or not bool(hit.any(1).all())
        # padding as data is padded: id 0 (the tutorials' and the tokenizers' habit), a run of two or more in
        # some row, and a row without it; a random batch whose row happens to end in a lone token is not padding
        if ok and int(v) == 0 and max(lengths) >= 2 and absent:
            return int(v)
    return None


_PAD_TOKEN = re.compile(r"<pad>|\[pad\]|pad|<p>|p|<blank>|填充", re.I)


_ONE_LETTER = re.compile(r"p", re.I)  # 'P' is padding only at id 0 (a character vocabulary has its own 'P')


def _vocabulary_pads(module) -> list[int]:
    """The padding id their vocabulary names: a dict {'P': 0, ...} / {'<pad>': 0} or a list ['<pad>', ...] at the
    top of their file."""
    out = []
    if module is None:
        return out
    for v in vars(module).values():
        if isinstance(v, dict) and 2 <= len(v) <= 100000:
            for k, i in v.items():
                if isinstance(k, str) and isinstance(i, int) and not isinstance(i, bool) and _PAD_TOKEN.fullmatch(k.strip()) \
                        and (i == 0 or not _ONE_LETTER.fullmatch(k.strip())):
                    out.append(i)
                    break
        elif isinstance(v, list) and 2 <= len(v) <= 100000 and isinstance(v[0], str):
            hit = next((i for i, k in enumerate(v[:4]) if isinstance(k, str) and _PAD_TOKEN.fullmatch(k.strip())
                        and (i == 0 or not _ONE_LETTER.fullmatch(k.strip()))), None)
            if hit is not None:
                out.append(hit)
    return out


def causal_intent(source: str) -> bool:
    """Does their file mean a model that predicts the next token (a `tril`, `is_causal`, `generate`, a GPT), and
    not a masked language model or an encoder?"""
    intent = re.search(r"\btril\b|\btriu\b|causal|generate|multinomial|subsequent|look_?ahead|因果|自回归|"
                       r"语言模型|gpt|lm_?head|causal_?lm|language_?model|next[ _]token", source, re.I)
    masked_lm = re.search(r"mlm|masked_?lm|mask_token|\bbert\b", source, re.I)
    return bool(intent) and not masked_lm


def _real_positions(args: dict, ids: torch.Tensor) -> torch.Tensor:
    """(B, T) True where a position holds a real token, by the padding mask their own call passed beside the ids
    (1/True = real for an `attention_mask`-like name, True = padding for a `*pad*` name); all True without one.
    Hugging Face's GPT-2 lets a left-padded position attend to every key (all its scores are -1e4): its output is
    padding, never read, and not a sign that the decoder reads the future."""
    for n, v in args.items():
        if isinstance(v, torch.Tensor) and v.shape == ids.shape and "mask" in n.lower() and not v.is_floating_point():
            flags = v.bool()
            if bool(flags.all()) or not bool(flags.any()):
                continue
            return ~flags if "pad" in n.lower() else flags
    return torch.ones(ids.shape, dtype=torch.bool)


def safe_copy(obj):
    """copy.deepcopy of their module, after their own non-leaf tensors kept as plain attributes (a `last_loss`
    from the training step, which deepcopy refuses) are detached."""
    import copy
    try:
        return copy.deepcopy(obj)
    except RuntimeError:
        mods = obj.modules() if isinstance(obj, nn.Module) else []
        for m in mods:
            for k, v in list(vars(m).items()):
                if isinstance(v, torch.Tensor) and v.grad_fn is not None:
                    setattr(m, k, v.detach())
        return copy.deepcopy(obj)
