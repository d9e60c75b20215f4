"""The inference API of translation: `Translator.load(run_dir).translate([...], beam=5)`."""
from __future__ import annotations

import copy
import itertools
import json
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from ...data.batching import pad_sequences
from ...data.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from ...errors import UserError
from ...fileio import atomic_write_text, inside
from ...nn import static
from ...nn.compute import compute_type_from
from ...nn.quant import Int8Linear, quantize_int8
from ...models.seq2seq import Seq2Seq, Seq2SeqEnsemble, build_seq2seq
from ...train.checkpoint import build_checked
from ..runs import RunDir
from .data import source_ids
from .decoding import DecodeConfig, Hypothesis, check_sources, choose_precision, decode
from .static_step import static_bucket, static_path
from .recipe import FINAL, SRC_TOK, TGT_TOK, TranslateRecipe
from .task import SENTENCE_SORTS, corpus_scores, sentence_scores


def _load_run_model(run_dir: Path, weights: str | None, quantize: str = "none") -> tuple[TranslateRecipe, Seq2Seq]:
    recipe = RunDir(run_dir).load_recipe(TranslateRecipe, "translate", (SRC_TOK, TGT_TOK), "translation")
    if weights is None:
        final = run_dir / FINAL
        weights = _final_weights(final) if final.exists() else "model.safetensors"
    if not (run_dir / weights).exists():
        raise UserError(f"{run_dir / weights} is missing: the run has not saved a model yet")
    model = build_checked(lambda: build_seq2seq(recipe.model), run_dir / weights, run_dir / "config.json")
    if quantize == "int8":
        quantize_int8(model)
    return recipe, model.eval()


def _final_weights(final: Path) -> str:
    try:
        weights = json.loads(final.read_text(encoding="utf-8"))["weights"]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{final} is corrupt (it names the final weights file); delete it to use "
                        "model.safetensors, or restore it") from None
    if not isinstance(weights, str) or "/" in weights or "\\" in weights:
        raise UserError(f"{final} names {weights!r}, not a weights file of the run folder")
    return weights


# compute_type (CTranslate2's names) -> the decode's precision; int8 decodes its int8 projections in fp32
_PRECISION = {"auto": "auto", "float32": "fp32", "bfloat16": "bf16", "int8": "fp32"}
_COMPUTE_NAME = {"fp32": "float32", "bf16": "bfloat16"}  # and back, for what a record says


class Translator:
    """A trained translator, loaded from its run directory.

    >>> tr = Translator.load("runs/hsk")
    >>> tr.translate(["我爱你。"], beam=5)
    ['I love you.']
    """

    def __init__(self, model: Seq2Seq, src_tok: Tokenizer, tgt_tok: Tokenizer, recipe: TranslateRecipe,
                 compute_type: str | None = None):
        self.model, self.src_tok, self.tgt_tok, self.recipe = model.eval(), src_tok, tgt_tok, recipe
        self.device = next(model.parameters()).device  # where the sources go (`load(device=...)`)
        # None: the recipe's decode.precision decides (auto by default), as before compute_type
        self.compute_type = compute_type
        self._last = threading.local()  # the deprecated last_precision / precision_reason, per thread
        self.quantized = any(isinstance(m, Int8Linear) for m in self.model.modules())
        self._bf16: torch.nn.Module | None = None
        # what each batch decoded so far resolved to, per rows bucket (`decode_record`): a record
        # that only grows, written under the lock (one translator serves several threads)
        self._record: dict[int, dict] = {}
        self._record_lock = threading.Lock()

    @property
    def last_precision(self) -> str | None:
        """Deprecated: what the last batch decoded by the reading thread ran in. Each
        `Hypothesis` says what its own batch ran in: `h.precision`, `h.precision_reason`."""
        warnings.warn("Translator.last_precision is deprecated (state on a translator shared by threads): read "
                      "Hypothesis.precision of your own call's hypotheses", DeprecationWarning, stacklevel=2)
        return getattr(self._last, "choice", (None, None))[0]

    @property
    def precision_reason(self) -> str | None:
        """Deprecated: why (see `last_precision`); read `Hypothesis.precision_reason`."""
        warnings.warn("Translator.precision_reason is deprecated (state on a translator shared by threads): read "
                      "Hypothesis.precision_reason of your own call's hypotheses", DeprecationWarning, stacklevel=2)
        return getattr(self._last, "choice", (None, None))[1]

    def int8_note(self) -> str:
        """How the int8 projections quantize their activations here (`quant.activation_bits`)."""
        from ...nn.quant import activation_bits

        return activation_bits()[1]

    def choose_precision(self, rows: int, asked: str = "auto") -> tuple[str, str]:
        """What a batch of `rows` decoder rows (sentences x beam) runs in, and why: `asked`
        unless it is "auto", which measures (`decoding.choose_precision`). Nothing is stored."""
        if asked != "auto":
            return asked, f"precision={asked!r} was asked for"
        if self.quantized:
            return "fp32", "the projections are int8 (they take float32 activations): bf16 would only add casts"
        cfg = self.model.members[0].cfg if hasattr(self.model, "members") else self.model.cfg
        if cfg.kind == "lstm":  # the probe times a Transformer block, which says nothing of an LSTM step
            return "fp32", "an LSTM translator decodes in float32 (the bf16 probe measures Transformer blocks)"
        return choose_precision(rows, cfg.transformer.d_model, self.device.type)

    def bf16_model(self) -> torch.nn.Module:
        """The model with its weights in bfloat16 (made once, kept beside the float32 one): what
        `precision="bf16"` decodes with. Weights and activations bf16 end to end, no autocast:
        autocast's casts around every product and norm cost more than bf16 saved at 32 rows
        (0.94x fp32 there, against 1.46x this way; benchmarks/results/translation_engines.md)."""
        if self.quantized:
            raise UserError("precision='bf16' and quantize='int8' do not combine (the int8 projections take "
                            "float32 activations); choose one")
        if self._bf16 is None:
            self._bf16 = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        return self._bf16

    @classmethod
    def load(cls, run_dir: str | Path, weights: str | None = None,
             ensemble: Sequence[str | Path] = (), quantize: str | None = None,
             compute_type: str | None = None, device: str | None = None) -> "Translator":
        """`weights`: a file name in `run_dir`; default: the one final.json names (best or
        averaged), else model.safetensors. `ensemble`: more run directories trained with the
        same tokenizers (usually the same recipe, other seeds); their models are decoded
        together with this one (`Seq2SeqEnsemble`), each with its final.json weights.
        `compute_type`: auto (the default: per batch, what a probe measures faster), float32,
        bfloat16 (a bf16 copy of the model) or int8 (int8 projections, CPU); `nn/compute.py`.
        `quantize='int8'` is the deprecated spelling of compute_type='int8'. `device`: any device
        torch knows (cpu, cuda, cuda:N, mps, xpu); one not available here is a one-line UserError."""
        compute_type = compute_type_from(compute_type, quantize, default=None)
        quantize = "int8" if compute_type == "int8" else "none"
        if device is not None and device != "cpu":
            from ...train.device import check_available, parse_device

            if compute_type == "int8":
                raise UserError(f"compute_type='int8' runs on the CPU; drop it or use device='cpu' (got {device!r})")
            check_available(parse_device(device, "device"), device)
            return cls.load(run_dir, weights, ensemble, compute_type=compute_type).to(device)
        run_dir = Path(run_dir)
        if RunDir(run_dir).is_ensemble:  # a `train_ensemble` run
            if weights is not None:
                raise UserError(f"{run_dir} is an ensemble run: each member uses its own final weights")
            n = RunDir(run_dir).load_recipe(TranslateRecipe, "translate", (), "translation").ensemble
            dirs = [RunDir(run_dir).member(i).path for i in range(n)]
            return cls.load(dirs[0], ensemble=[*dirs[1:], *ensemble], compute_type=compute_type)
        recipe, model = _load_run_model(run_dir, weights, quantize)
        src_tok, tgt_tok = Tokenizer.load(run_dir / SRC_TOK), Tokenizer.load(run_dir / TGT_TOK)
        if ensemble:
            members = [model]
            for other in map(Path, ensemble):
                for name in (SRC_TOK, TGT_TOK):
                    if not (other / name).exists() or (other / name).read_bytes() != (run_dir / name).read_bytes():
                        raise UserError(f"{other / name} differs from {run_dir / name} (or is missing): "
                                        "ensemble members must be trained with the same tokenizers "
                                        "(the same data and tokenizer settings)")
                members.append(_load_run_model(other, None, quantize)[1])
            model = Seq2SeqEnsemble(members)
        return cls(model, src_tok, tgt_tok, recipe, compute_type)

    def to(self, device: str | torch.device) -> "Translator":
        """Move the model (and the sources of every later call) to `device`."""
        self.model.to(device)
        self.device = next(self.model.parameters()).device
        self._bf16 = None
        return self

    def _precision(self, overrides: dict, warn: bool = False) -> dict:
        """The decode's precision from the compute type chosen at load; a `precision=` override
        (the deprecated per-decode spelling) wins, with a warning."""
        if overrides.get("precision") is not None:
            if warn:
                warnings.warn("precision= per decode is deprecated: load with compute_type= (auto, float32, "
                              "bfloat16, int8), the one precision knob", DeprecationWarning, stacklevel=4)
            return overrides
        if self.compute_type is None:
            return overrides
        return {**overrides, "precision": _PRECISION[self.compute_type]}

    def decode_config(self, **overrides) -> DecodeConfig:
        """The recipe's decoding settings with `overrides` (None values ignored)."""
        return self.recipe.decode.replace(**{k: v for k, v in overrides.items() if v is not None})

    def encode(self, texts: Sequence[str], cfg: DecodeConfig, first: int = 1) -> list[list[int]]:
        """Source ids of `texts`; an empty or over-long one is a UserError that names it by its
        number, counted from `first` (`translate --file` checks a file block by block)."""
        if isinstance(texts, str):
            texts = [texts]
        for i, t in enumerate(texts, first):
            if not isinstance(t, str) or not t.strip():
                raise UserError(f"sentence {i} is empty: there is nothing to translate")
        # a text that carries its ids (`tokenize`: a served text) is read from them, not tokenized again
        ids = [list(t.encoded) if getattr(t, "encoded_by", None) is self else None for t in texts]
        todo = [i for i, x in enumerate(ids) if x is None]
        for i, x in zip(todo, source_ids(self.src_tok, [texts[i].strip() for i in todo]) if todo else []):
            ids[i] = x
        check_sources([len(x) - getattr(self.src_tok, "source_specials", 1) for x in ids], cfg, first)
        return ids

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Source tokens of each text (without <eos>): what a server limits and batches by."""
        return [len(x) for x in self.src_tok.encode_batch([t.strip() for t in texts])]

    def tokenize(self, texts: Sequence[str]) -> list:
        """The texts as `Tokenized` strs carrying their source ids (n_tokens: as `count_tokens`),
        which `translate` reads without tokenizing again (serve: one tokenization per request,
        from the limit check to the batch)."""
        from ...data.tokenizers import Tokenized

        ids = source_ids(self.src_tok, [t.strip() for t in texts])
        specials = getattr(self.src_tok, "source_specials", 1)
        return [Tokenized.of(t, x, self, len(x) - specials) for t, x in zip(texts, ids)]

    @torch.no_grad()
    def hypotheses(self, texts: Sequence[str], cold: str = "compile", **overrides) -> list[Hypothesis]:
        """The best `Hypothesis` for each text, in order. Overrides: any `DecodeConfig` field
        (beam, length_penalty, max_len_ratio, early_stop, use_cache, static, ...). `cold`: with
        `static=True`, what a shape bucket not compiled yet does (`decode_path`)."""
        if cold not in ("compile", "lean"):
            raise UserError(f"cold must be 'compile' or 'lean', got {cold!r}")
        cfg = self.decode_config(**self._precision(overrides, warn=True))
        ids = self.encode(texts, cfg)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[Hypothesis | None] = [None] * len(ids)
        start = 0
        while start < len(order):  # length-sorted batches of about cfg.batch_tokens * beam
            end = start + 1
            while end < len(order) and (end - start + 1) * len(ids[order[end]]) * cfg.beam <= cfg.batch_tokens:
                end += 1
            chunk = order[start:end]
            src, _ = pad_sequences([ids[i] for i in chunk], getattr(self.src_tok, "pad_id", PAD_ID))
            hyps = self._decode_chunk(src.to(self.device), cfg, cold)
            for i, h in zip(chunk, hyps):
                out[i] = h
            start = end
        return out  # type: ignore[return-value]

    def _decode_chunk(self, src: torch.Tensor, cfg: DecodeConfig, cold: str = "compile") -> list[Hypothesis]:
        """One batch `src (B, S)`: its precision (auto: measured per rows bucket), its decoding
        path (static or lean, `decode_path`), the decode, and the record of what it resolved to."""
        rows = src.shape[0] * cfg.beam
        precision, why = self._last.choice = self.choose_precision(rows, cfg.precision)
        model = self.bf16_model() if precision == "bf16" else self.model
        path, path_why = self.decode_path(model, src, cfg, cold)
        if path != "static" and cfg.static != "off":
            cfg = cfg.replace(static="off")
        hyps = decode(model, src, cfg)
        if path == "static" and static.compiler_on() and static.compile_disabled() is not None:
            path, path_why = "lean", f"the compile failed here ({static.compile_disabled()})"
        for h in hyps:
            h.precision, h.precision_reason = precision, why
        self._note(rows, precision, why, path, path_why)
        return hyps

    def static_blocker(self, model: torch.nn.Module | None = None) -> str | None:
        """Why the static compiled step (`nn/static.py`) cannot decode for this translator here
        (None when it can): an ensemble, a device other than the CPU (the step is written and
        measured for it), what the model's own `static_blocker` names, or a compile that failed
        in this process."""
        model = self.model if model is None else model
        if hasattr(model, "members"):
            return "an ensemble: the static step decodes one model (the lean step serves ensembles)"
        if self.device.type != "cpu":
            return f"the static step is written and measured for the CPU; on {self.device.type} the lean step serves"
        if self.quantized:  # Int8Linear keeps a float `weight` beside its packed one: the model's own blocker misses it
            return "int8 projections (compute_type int8, dynamic int8): the lean step serves them"
        why = model.static_blocker() if hasattr(model, "static_blocker") else "the model has no static step"
        if why is not None:
            return why
        if static.compiler_on() and static.compile_disabled() is not None:
            return f"compiling the static step failed in this process ({static.compile_disabled()})"
        return None

    def decode_path(self, model: torch.nn.Module, src: torch.Tensor, cfg: DecodeConfig,
                    cold: str = "compile") -> tuple[str, str]:
        """`("static" | "lean" | "readable", why)` for decoding `src (B, S)` with `model` under
        `cfg`. A shape bucket the static step has not built yet (in this process or stored in the
        cache) runs the lean step with decode.static=auto or `cold="lean"` (a server builds its
        buckets before it says ready: no request pays a compile, and no compile runs beside a
        request); with decode.static=on and `cold="compile"` its first decode builds it."""
        if not (cfg.lean and cfg.use_cache):
            return "readable", "lean=False or use_cache=False asks for the readable step"
        if cfg.static == "off":
            return "lean", "decode.static is off"
        why = self.static_blocker(model)
        if why is not None:
            return "lean", why
        why = static_path(model, cfg)
        if why is not None:
            return "lean", why
        try:
            shapes, ready = static_bucket(model, src, cfg)
        except Exception as e:  # noqa: BLE001  the step cannot be built for this model: the lean step decodes
            if cfg.static == "on" and cold == "compile":
                raise
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            return "lean", f"the static step could not be built ({type(e).__name__}: {first})"
        if (cold == "lean" or cfg.static == "auto") and not ready:
            N, cap, Sb = shapes
            return "lean", (f"the bucket of {N} rows x {cap} target x {Sb} source positions "
                            f"({'greedy' if cfg.beam == 1 else f'beam {cfg.beam}'}) is not compiled")
        return "static", "the static compiled step"

    def warm_static(self, beams: Sequence[int] = (1,), max_source_tokens: int = 32,
                    sentences: Sequence[int] = (1,), **overrides) -> list[dict]:
        """Compile the static step's shape buckets of batches of `sentences` sentences (default
        batch 1) of 1 .. `max_source_tokens` tokens, each beam of `beams`, now, so that no later
        decode pays the compile (6-9 s a bucket on a quiet 2-core CPU, docs/speed.md). Returns one
        row per bucket: its shapes, the seconds it took, and "static" or "lean" with why (a model
        the step cannot run, a compile that failed: the RuntimeWarning is caught here and said in
        the row)."""
        import warnings as _warnings

        done: list[dict] = []
        seen = set()
        # a source of S ids that are not padding (the shapes are all a compile reads; nothing tokenized)
        pad = getattr(self.src_tok, "pad_id", PAD_ID)
        filler = next(i for i in range(self.src_tok.vocab_size - 1, -1, -1) if i not in (pad, EOS_ID))
        specials = getattr(self.src_tok, "source_specials", 1)
        for beam, B, S in itertools.product(dict.fromkeys(beams), dict.fromkeys(sentences),
                                            range(specials + 1, max_source_tokens + specials + 1)):
            cfg = self.decode_config(**{**self._precision(overrides), "beam": beam, "static": True})
            src = torch.tensor([[filler] * (S - 1) + [EOS_ID]] * B, device=self.device)  # (B, S)
            precision, _ = self.choose_precision(B * beam, cfg.precision)
            model = self.bf16_model() if precision == "bf16" else self.model
            why = self.static_blocker(model)
            if why is not None:
                return [{"beam": beam, "path": "lean", "why": why}]
            shapes, _ = static_bucket(model, src, cfg)
            if (id(model), shapes, beam == 1) in seen:
                continue
            seen.add((id(model), shapes, beam == 1))
            t0 = time.perf_counter()
            with _warnings.catch_warnings(record=True):
                _warnings.simplefilter("always")
                decode(model, src, cfg)
            row = {"beam": beam, "rows": shapes[0], "target_positions": shapes[1], "source_positions": shapes[2],
                   "compute_type": self.compute_name(precision),
                   "seconds": round(time.perf_counter() - t0, 2)}
            if static.compiler_on() and static.compile_disabled() is not None:
                return [*done, {**row, "path": "lean", "why": f"the compile failed here ({static.compile_disabled()})"}]
            done.append({**row, "path": "static"})
        return done

    def compute_name(self, precision: str) -> str:
        """A decode's precision ("fp32" / "bf16") by its compute type's name (float32, bfloat16;
        int8 for a translator loaded with int8 projections, which decode in fp32 around them)."""
        return "int8" if self.quantized else _COMPUTE_NAME.get(precision, precision)

    def _note(self, rows: int, precision: str, why: str, path: str, path_why: str) -> None:
        bucket = 1 << max(0, (rows - 1).bit_length())  # the rows bucket auto's probe measures per
        with self._record_lock:
            r = self._record.setdefault(bucket, {"rows": bucket, "batches": {}})
            r["compute_type"] = self.compute_name(precision)
            r["why"] = why
            r["batches"][path] = r["batches"].get(path, 0) + 1
            if path != "static":
                r["lean_why"] = path_why

    def decode_record(self) -> dict:
        """What this translator's decodes resolved to so far: the compute type asked for
        (`auto` by default) and, per rows bucket (sentences x beam, rounded up to a power of two:
        the buckets auto's probe measures), the compute type it resolved to, why, and how many
        batches ran each decoding path (with why the last lean one was not static)."""
        with self._record_lock:
            rows = [dict(r, batches=dict(r["batches"])) for _, r in sorted(self._record.items())]
        asked = self.compute_type or _COMPUTE_NAME.get(self.recipe.decode.precision, "auto")
        return {"compute_type": asked, "resolved": rows}

    def translate(self, texts: Sequence[str] | str, beam: int | None = None,
                  length_penalty: float | None = None, **overrides) -> list[str]:
        """Translations of `texts` (a list, or one string -> a list of one)."""
        hyps = self.hypotheses([texts] if isinstance(texts, str) else texts, beam=beam,
                               length_penalty=length_penalty, **overrides)
        return [self.tgt_tok.decode(h.tokens) for h in hyps]

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", per_sentence: bool = False, sort: str = "input",
                 **overrides) -> dict[str, Any]:
        """BLEU and chrF (sacrebleu, with signatures) of translating the sources of `pairs`;
        writes `<name>_metrics.json` and `<name>_hyps.txt` into `out_dir` when given.
        `per_sentence`: also each sentence's sentence BLEU and chrF (`task.sentence_scores`),
        in input order or worst first (`sort` = "bleu" / "chrf"), under "sentences"."""
        srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
        cfg = self.decode_config(**self._precision(overrides))  # what the decode below runs with
        if per_sentence and sort not in SENTENCE_SORTS:  # before decoding: nothing spent on a typo
            sentence_scores([], [], [], sort)
        if sort != "input" and not per_sentence:  # an order of nothing: said, not ignored
            raise UserError(f"sort={sort!r} orders the per-sentence table: pass per_sentence=True too, or leave sort out")
        t0 = time.perf_counter()
        found = self.hypotheses(srcs, **overrides)
        elapsed = time.perf_counter() - t0
        hyps = [self.tgt_tok.decode(h.tokens) for h in found]
        rep = corpus_scores(hyps, refs)
        # what the decode's compute type (auto by default) resolved to, with the sentences each choice decoded
        resolved: dict = {}
        for h in found:
            resolved[(h.precision, h.precision_reason)] = resolved.get((h.precision, h.precision_reason), 0) + 1
        rep.update(n=len(pairs), decode=cfg.to_dict(), seconds=round(elapsed, 2),
                   sentences_per_s=len(pairs) / max(elapsed, 1e-9),
                   compute=[{"compute_type": self.compute_name(p), "why": why, "sentences": n}
                            for (p, why), n in resolved.items()])
        if per_sentence:
            rep.update(sentence_scores(srcs, hyps, refs, sort))
        if out_dir is not None:
            out_dir = Path(out_dir)
            atomic_write_text(inside(out_dir, f"{name}_metrics.json", "report"), json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
            atomic_write_text(inside(out_dir, f"{name}_hyps.txt", "report"), "\n".join(hyps) + "\n")
        return rep

    @torch.no_grad()
    def align(self, text: str, **overrides) -> tuple[list[str], list[str], list[torch.Tensor], str]:
        """Translate `text`; return source tokens, output tokens (with <eos>), the
        cross-attention of every decoder layer `(H, T_out, S)` for that output, and the translation."""
        cfg = self.decode_config(**overrides)
        src_ids = self.encode([text], cfg)[0]
        hyp = self.hypotheses([text], **overrides)[0]
        src = torch.tensor([src_ids], device=self.device)
        tgt_out = hyp.tokens + [EOS_ID]
        tgt_in = torch.tensor([[BOS_ID] + tgt_out[:-1]], device=self.device)
        model = self.model.members[0] if isinstance(self.model, Seq2SeqEnsemble) else self.model
        memory, mask = model.encode(src)  # an ensemble shows its first member's attention
        _, weights = model.decode(tgt_in, memory, mask, need_weights=True)
        show = lambda tok, i: tok.decode([i], skip_special=False).strip() or tok.id_to_token(i)  # noqa: E731
        return ([show(self.src_tok, i) for i in src_ids], [show(self.tgt_tok, i) for i in tgt_out],
                [cross[0].cpu() for _, cross in weights], self.tgt_tok.decode(hyp.tokens))
