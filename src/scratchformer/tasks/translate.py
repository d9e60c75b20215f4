"""Translation: parallel text -> batches, a label-smoothed loss, BLEU/chrF, checkpoint
averaging, and the inference API.

`train_translator(recipe, out_dir)` is what `scratchformer train translate` runs;
`Translator.load(run_dir).translate([...], beam=5)` is the inference API.

A run directory holds, besides the Trainer's files (model.safetensors = best validation BLEU,
last.safetensors, metrics.jsonl, curves.png):
  config.json, src_tokenizer.json, tgt_tokenizer.json   what `Translator.load` needs
  snapshots/step-*.safetensors   the weights at the last `average_last` evaluations
  averaged.safetensors           their element-wise mean (checkpoint averaging)
  final.json                     which weights file won on validation BLEU, and the scores
  test_metrics.json, test_hyps.txt   BLEU/chrF (sacrebleu, with signatures) of the final model
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ..data.batching import LengthBucketSampler, pad_sequences
from ..data.datasets import TranslationData
from ..data.readers import read_parallel
from ..data.registry import DATASETS, load_dataset
from ..data.tokenizers import BOS_ID, EOS_ID, PAD_ID, Tokenizer, auto_kind, build_tokenizer, cjk_fraction
from ..errors import UserError
from ..models.seq2seq import Seq2Seq, Seq2SeqConfig, Seq2SeqEnsemble
from ..nn import JsonConfig
from ..train import TrainConfig, Trainer
from ..train.checkpoint import load_weights, save_weights
from ..train.members import MEMBERS, train_members
from .data_source import load_run_recipe, looks_like_path, user_splits
from .decoding import DecodeConfig, Hypothesis, check_sources, decode, greedy_decode

SRC_TOK, TGT_TOK, FINAL, AVERAGED, SNAPSHOTS = (
    "src_tokenizer.json", "tgt_tokenizer.json", "final.json", "averaged.safetensors", "snapshots")


@dataclass
class TranslateDataConfig(JsonConfig):
    dataset: str = "hsk-zh-en"  # registered name, a src<TAB>tgt file, or "train.src,train.tgt"
    dataset_options: dict = field(default_factory=dict)  # e.g. {"reverse": true}
    valid_file: str | None = None  # same forms as a user's dataset
    test_file: str | None = None
    src_tokenizer: str = "auto"  # char | word | bpe | wordpiece | auto (char for CJK, else bpe)
    tgt_tokenizer: str = "auto"
    src_vocab_size: int = 8000  # bpe / wordpiece
    tgt_vocab_size: int = 8000
    joint_vocab: bool = False  # one tokenizer trained on both sides (needed to share embeddings)
    min_freq: int = 1  # char / word
    max_len: int = 128  # training pairs with a longer side (in tokens) are left out
    max_tokens: int | None = 4096  # padded tokens per batch (the longer side counts)
    batch_size: int | None = None
    label_smoothing: float = 0.1
    bleu_sentences: int = 500  # validation sentences greedy-decoded for BLEU at each evaluation (0 = all)

    def __post_init__(self) -> None:
        if self.max_tokens is None and self.batch_size is None:
            raise UserError("set data.max_tokens or data.batch_size")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.max_len < 2:
            raise UserError("data.max_len must be at least 2")


@dataclass
class TranslateRecipe(JsonConfig):
    """Everything a translation run needs; saved as the run's config.json."""

    task: str = "translate"
    data: TranslateDataConfig = field(default_factory=TranslateDataConfig)
    model: Seq2SeqConfig = field(default_factory=Seq2SeqConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        epochs=40, lr=1e-3, schedule="noam", warmup_steps=400, metric="bleu", metric_mode="max",
        weight_decay=0.0001, betas=(0.9, 0.98)))
    decode: DecodeConfig = field(default_factory=DecodeConfig)  # used for test and by default in `translate`
    average_last: int = 5  # average the weights of the last N evaluations (<= 1: off)
    # >1: train members with seeds seed, seed+1, ... into member<i>/ and decode with all of them
    # together (next-token probabilities averaged at every step)
    ensemble: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.ensemble, int) or self.ensemble < 1:
            raise UserError(f"ensemble must be a whole number >= 1, got {self.ensemble!r}")


# ---------------------------------------------------------------------------- data


@dataclass
class TranslateBatch:
    src: torch.Tensor  # (B, S) source ids + <eos>
    tgt_in: torch.Tensor  # (B, T) <bos> y_1 .. y_n
    tgt_out: torch.Tensor  # (B, T) y_1 .. y_n <eos>
    idx: torch.Tensor  # (B,) position of each pair in its split

    def to(self, device) -> "TranslateBatch":
        return TranslateBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.idx)


def _parallel(spec: str) -> list[tuple[str, str]]:
    """A `src<TAB>tgt` file, or two aligned files given as "a.src,a.tgt"."""
    if not Path(spec).exists() and "," in spec:
        a, b = spec.split(",", 1)
        return read_parallel((a.strip(), b.strip()))
    if not Path(spec).exists():
        raise UserError(f"parallel file {spec} does not exist (give a src<TAB>tgt file or 'a.src,a.tgt')")
    return read_parallel(spec)


def load_translation(dc: TranslateDataConfig) -> TranslationData:
    name = dc.dataset
    if name.lower().replace("_", "-") in DATASETS or not (looks_like_path(name) or "," in name):
        data = load_dataset(name, **dc.dataset_options)
        if not isinstance(data, TranslationData):
            raise UserError(f"dataset {name!r} is not a translation data set (try hsk-zh-en, fr-en, de-en)")
        return data
    train, valid, test = user_splits(_parallel, name, dc)
    return TranslationData(train, valid, test or [], "src", "tgt", {"name": Path(name.split(",")[0]).name})


def _tokenizer(kind: str, texts: list[str], vocab_size: int, min_freq: int) -> Tokenizer:
    kind = auto_kind(texts) if kind == "auto" else kind
    if kind in ("char", "word"):
        return build_tokenizer(kind, texts, min_freq=min_freq)
    return build_tokenizer(kind, texts, vocab_size=vocab_size)


def build_tokenizers(dc: TranslateDataConfig, pairs: list[tuple[str, str]]) -> tuple[Tokenizer, Tokenizer]:
    srcs, tgts = [s for s, _ in pairs], [t for _, t in pairs]
    if dc.joint_vocab:
        tok = _tokenizer(dc.src_tokenizer, srcs + tgts, dc.src_vocab_size, dc.min_freq)
        return tok, tok
    return (_tokenizer(dc.src_tokenizer, srcs, dc.src_vocab_size, dc.min_freq),
            _tokenizer(dc.tgt_tokenizer, tgts, dc.tgt_vocab_size, dc.min_freq))


class ParallelSplit:
    """One split, encoded once; batches by token budget over length buckets."""

    def __init__(self, pairs, src_tok: Tokenizer, tgt_tok: Tokenizer, dc: TranslateDataConfig,
                 shuffle: bool, seed: int = 0, max_len: int | None = None):
        src = src_tok.encode_batch([s for s, _ in pairs], add_eos=True)
        tgt = tgt_tok.encode_batch([t for _, t in pairs], add_bos=True, add_eos=True)
        keep = list(range(len(pairs)))
        if max_len is not None:
            keep = [i for i in keep if len(src[i]) <= max_len and len(tgt[i]) - 1 <= max_len]
        self.dropped = len(pairs) - len(keep)
        self.pairs = [pairs[i] for i in keep]
        self.src, self.tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        lengths = [max(len(s), len(t) - 1) for s, t in zip(self.src, self.tgt)]
        self.sampler = LengthBucketSampler(lengths, batch_size=dc.batch_size, max_tokens=dc.max_tokens,
                                           shuffle=shuffle, seed=seed)
        self.n_tokens = sum(len(s) + len(t) - 1 for s, t in zip(self.src, self.tgt))

    def __len__(self) -> int:
        return len(self.pairs)

    def batches(self, epoch: int = 0) -> list[TranslateBatch]:
        out = []
        for idx in self.sampler.epoch_batches(epoch):
            src, _ = pad_sequences([self.src[i] for i in idx], PAD_ID)
            tgt, _ = pad_sequences([self.tgt[i] for i in idx], PAD_ID)
            out.append(TranslateBatch(src, tgt[:, :-1], tgt[:, 1:], torch.tensor(idx)))
        return out


# ---------------------------------------------------------------------------- metrics


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, Any]:
    """sacrebleu corpus BLEU and chrF with their signatures. The BLEU tokenizer is 13a, or
    'zh' when the references are mostly Chinese."""
    from sacrebleu.metrics import BLEU, CHRF

    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses for {len(refs)} references")
    bleu = BLEU(tokenize="zh" if cjk_fraction(refs[:200]) > 0.3 else "13a")
    chrf = CHRF()
    b, c = bleu.corpus_score(list(hyps), [list(refs)]), chrf.corpus_score(list(hyps), [list(refs)])
    return {"bleu": b.score, "chrf": c.score, "bleu_signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()), "bleu_detail": str(b)}


# ---------------------------------------------------------------------------- the task


class TranslationTask:
    """The Trainer's view of translation (see docs/contracts.md)."""

    def __init__(self, model: Seq2Seq, recipe: TranslateRecipe, src_tok: Tokenizer, tgt_tok: Tokenizer):
        self.model, self.recipe, self.src_tok, self.tgt_tok = model, recipe, src_tok, tgt_tok
        self.valid_refs: list[str] | None = None  # references by index, for validation BLEU
        self.snapshot_dir: Path | None = None  # where evaluate() keeps weights for averaging
        self.current_step = lambda: 0  # set by train_translator to read the Trainer's step

    def count(self, b: TranslateBatch) -> int:
        return int((b.tgt_out != PAD_ID).sum())

    def batch_tokens(self, b: TranslateBatch) -> int:
        return int((b.src != PAD_ID).sum()) + int((b.tgt_out != PAD_ID).sum())

    def loss_sum(self, b: TranslateBatch):
        logits = self.model(b.src, b.tgt_in).float()  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID,
                               reduction="sum", label_smoothing=self.recipe.data.label_smoothing)
        real = b.tgt_out != PAD_ID
        correct = ((logits.argmax(-1) == b.tgt_out) & real).sum()
        return loss, {"accuracy": float(correct)}

    def evaluate(self, batches) -> dict[str, float]:
        """Loss (plain NLL per target token, no smoothing) on every batch; greedy BLEU/chrF on
        the first `data.bleu_sentences` validation pairs; a weight snapshot for averaging."""
        nll, count = 0.0, 0
        limit = self.recipe.data.bleu_sentences or None
        hyps: dict[int, str] = {}
        greedy_cfg = self.recipe.decode.replace(beam=1)
        for b in batches:
            logits = self.model(b.src, b.tgt_in).float()
            nll += float(F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID,
                                         reduction="sum"))
            count += self.count(b)
            if self.valid_refs is not None:
                rows = [r for r, i in enumerate(b.idx.tolist()) if limit is None or i < limit]
                if rows:
                    sel = torch.tensor(rows, device=b.src.device)
                    for r, h in zip(rows, greedy_decode(self.model, b.src.index_select(0, sel), greedy_cfg)):
                        hyps[int(b.idx[r])] = self.tgt_tok.decode(h.tokens)
        loss = nll / max(count, 1)
        out = {"loss": loss, "ppl": math.exp(min(loss, 50.0))}
        if hyps:
            order = sorted(hyps)
            scores = corpus_scores([hyps[i] for i in order], [self.valid_refs[i] for i in order])
            out.update(bleu=scores["bleu"], chrf=scores["chrf"])
        self._snapshot(out)
        return out

    def _snapshot(self, metrics: dict[str, float]) -> None:
        n = self.recipe.average_last
        if self.snapshot_dir is None or n <= 1:
            return
        step = int(self.current_step())
        meta = {"step": str(step), **{k: f"{v:.6g}" for k, v in metrics.items()}}
        save_weights(self.model, self.snapshot_dir / f"step-{step:08d}.safetensors", meta)
        for old in snapshot_files(self.snapshot_dir)[:-n]:
            old.unlink(missing_ok=True)

    def save(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        self.recipe.save_json(run_dir / "config.json")
        self.src_tok.save(run_dir / SRC_TOK)
        self.tgt_tok.save(run_dir / TGT_TOK)


def snapshot_files(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob("step-*.safetensors"))


def average_checkpoints(model: torch.nn.Module, paths: Sequence[Path]) -> torch.nn.Module:
    """Load the element-wise mean of the weights in `paths` into `model` (Vaswani et al.
    average the last 5-20 checkpoints: a cheap ensemble along the end of the trajectory)."""
    if not paths:
        raise UserError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        load_weights(model, p)
        for k, v in model.state_dict().items():
            total[k] = total.get(k, 0) + v.detach().double()
    model.load_state_dict({k: (v / len(paths)).to(model.state_dict()[k].dtype) for k, v in total.items()})
    return model


# ---------------------------------------------------------------------------- training


def train_translator(recipe: TranslateRecipe, out_dir: str | Path, resume: bool = False,
                     log=print) -> dict[str, Any]:
    """Load data, build tokenizers and model, train, average, pick the final weights on
    validation BLEU, then score the test split with the recipe's decoding settings."""
    out_dir = Path(out_dir)
    if recipe.ensemble > 1:
        return train_ensemble(recipe, out_dir, resume, log)
    dc = recipe.data
    data = load_translation(dc)
    if resume:
        src_tok, tgt_tok = Tokenizer.load(out_dir / SRC_TOK), Tokenizer.load(out_dir / TGT_TOK)
    else:
        src_tok, tgt_tok = build_tokenizers(dc, data.train)
    recipe.model.src_vocab_size, recipe.model.tgt_vocab_size = src_tok.vocab_size, tgt_tok.vocab_size
    recipe.model = Seq2SeqConfig.from_dict(recipe.model.to_dict())  # re-validate with the sizes
    seed = recipe.train.seed
    train = ParallelSplit(data.train, src_tok, tgt_tok, dc, shuffle=True, seed=seed, max_len=dc.max_len)
    valid = ParallelSplit(data.valid, src_tok, tgt_tok, dc, shuffle=False) if data.valid else None
    log(f"data: {len(train)} train ({train.dropped} longer than {dc.max_len} tokens left out) / "
        f"{len(valid or [])} valid / {len(data.test)} test pairs, {data.src_lang}->{data.tgt_lang}; "
        f"source {type(src_tok).__name__} {src_tok.vocab_size}, target {type(tgt_tok).__name__} "
        f"{tgt_tok.vocab_size}{' (joint)' if recipe.data.joint_vocab else ''}; "
        f"<unk> rate on valid source {src_tok.unk_rate([s for s, _ in data.valid[:2000]]):.2%}; "
        f"{train.n_tokens / 1e6:.2f}M train tokens, padding {train.sampler.padding_fraction(train.sampler.epoch_batches(0)):.1%}")
    torch.manual_seed(seed)
    model = Seq2Seq(recipe.model)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters")
    task = TranslationTask(model, recipe, src_tok, tgt_tok)
    valid_batches = valid.batches(0) if valid else None
    if valid is not None:
        task.valid_refs = [t for _, t in valid.pairs]
    task.snapshot_dir = out_dir / SNAPSHOTS
    if not resume:
        for old in snapshot_files(task.snapshot_dir):
            old.unlink()
        for name in (AVERAGED, FINAL):
            (out_dir / name).unlink(missing_ok=True)
    if valid is None and recipe.train.metric != "loss":
        recipe.train.metric, recipe.train.metric_mode = "loss", "min"
    trainer = Trainer(task, train.batches, (lambda: valid_batches) if valid else None, recipe.train, out_dir)
    task.current_step = lambda: trainer.state.step
    summary = trainer.fit(resume=resume)
    result: dict[str, Any] = {"train": summary, "final": finalize(task, valid, out_dir, log)}
    if data.test:
        tr = Translator(model, src_tok, tgt_tok, recipe)
        result["test"] = tr.evaluate(data.test, out_dir, "test")
        t = result["test"]
        log(f"test: BLEU {t['bleu']:.2f} chrF {t['chrf']:.2f} ({t['n']} sentences, beam {t['decode']['beam']}, "
            f"{t['sentences_per_s']:.1f} sentences/s)\n  {t['bleu_signature']}\n  {t['chrf_signature']}")
    return result


def train_ensemble(recipe: TranslateRecipe, out_dir: Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Train `recipe.ensemble` members into `out_dir/member<i>` (seed + i), then score the test
    split with all of them decoded together. With `resume`, finished members are kept and an
    interrupted one continues where it stopped."""
    done = train_members(recipe, out_dir, resume, train_translator, lambda res: {
        "weights": res["final"]["weights"], "best_valid_bleu": res["train"].get("best_metric"),
        "test_bleu": res.get("test", {}).get("bleu"), "test_chrf": res.get("test", {}).get("chrf")}, log)
    first = out_dir / "member0"
    for name in (SRC_TOK, TGT_TOK):  # members train the same tokenizers; Translator.load checks
        (out_dir / name).write_bytes((first / name).read_bytes())
    TranslateRecipe.load_json(first / "config.json").replace(ensemble=recipe.ensemble).save_json(out_dir / "config.json")
    tr = Translator.load(out_dir)
    result: dict[str, Any] = {"train": {"members": done}, "final": {"weights": f"{recipe.ensemble} members"}}
    data = load_translation(recipe.data)
    if data.valid:  # the members' validation measure: greedy BLEU on the first bleu_sentences pairs
        pairs = data.valid[: recipe.data.bleu_sentences or len(data.valid)]
        rep = tr.evaluate(pairs, out_dir, "valid", beam=1)
        result["train"]["best_metric"] = rep["bleu"]
        members = ", ".join(f"{m['best_valid_bleu']:.2f}" for m in done if m["best_valid_bleu"] is not None)
        log(f"ensemble valid ({len(pairs)} sentences, greedy): BLEU {rep['bleu']:.2f} chrF {rep['chrf']:.2f} "
            f"(members' best: {members})")
    if data.test:
        result["test"] = t = tr.evaluate(data.test, out_dir, "test")
        members = ", ".join(f"{m['test_bleu']:.2f}" for m in done if m["test_bleu"] is not None)
        log(f"ensemble test: BLEU {t['bleu']:.2f} chrF {t['chrf']:.2f} (members: {members}; {t['n']} sentences, "
            f"beam {t['decode']['beam']}, {t['sentences_per_s']:.1f} sentences/s)\n  {t['bleu_signature']}\n"
            f"  {t['chrf_signature']}")
    return result


def finalize(task: TranslationTask, valid: ParallelSplit | None, out_dir: Path, log=print) -> dict[str, Any]:
    """Average the snapshots; keep whichever of best / averaged scores higher greedy BLEU on
    the validation sentences used during training; write final.json."""
    model = task.model
    candidates = {"model.safetensors": out_dir / "model.safetensors"}
    snaps = snapshot_files(out_dir / SNAPSHOTS)
    if len(snaps) >= 2:
        average_checkpoints(model, snaps)
        save_weights(model, out_dir / AVERAGED, {"averaged": json.dumps([p.name for p in snaps])})
        candidates[AVERAGED] = out_dir / AVERAGED
    scores: dict[str, dict] = {}
    if valid is not None:
        n = task.recipe.data.bleu_sentences or len(valid)
        pairs = valid.pairs[:n]
        for name, path in candidates.items():
            load_weights(model, path)
            tr = Translator(model, task.src_tok, task.tgt_tok, task.recipe)
            rep = tr.evaluate(pairs, None, "valid", beam=1)
            scores[name] = {"bleu": rep["bleu"], "chrf": rep["chrf"], "n": rep["n"]}
            log(f"valid ({len(pairs)} sentences, greedy) {name}: BLEU {rep['bleu']:.2f} chrF {rep['chrf']:.2f}")
    best = max(scores, key=lambda k: scores[k]["bleu"]) if scores else "model.safetensors"
    load_weights(model, candidates[best])
    final = {"weights": best, "valid": scores, "averaged": [p.name for p in snaps] if len(snaps) >= 2 else []}
    (out_dir / FINAL).write_text(json.dumps(final, indent=1) + "\n")
    return final


# ---------------------------------------------------------------------------- inference


def _load_run_model(run_dir: Path, weights: str | None) -> tuple[TranslateRecipe, Seq2Seq]:
    recipe = load_run_recipe(run_dir, TranslateRecipe, "translate", (SRC_TOK, TGT_TOK), "translation")
    if weights is None:
        final = run_dir / FINAL
        weights = json.loads(final.read_text())["weights"] if final.exists() else "model.safetensors"
    if not (run_dir / weights).exists():
        raise UserError(f"{run_dir / weights} is missing: the run has not saved a model yet")
    model = Seq2Seq(recipe.model)
    load_weights(model, run_dir / weights)
    return recipe, model.eval()


class Translator:
    """A trained translator, loaded from its run directory.

    >>> tr = Translator.load("runs/hsk")
    >>> tr.translate(["我爱你。"], beam=5)
    ['I love you.']
    """

    def __init__(self, model: Seq2Seq, src_tok: Tokenizer, tgt_tok: Tokenizer, recipe: TranslateRecipe):
        self.model, self.src_tok, self.tgt_tok, self.recipe = model.eval(), src_tok, tgt_tok, recipe

    @classmethod
    def load(cls, run_dir: str | Path, weights: str | None = None,
             ensemble: Sequence[str | Path] = ()) -> "Translator":
        """`weights`: a file name in `run_dir`; default: the one final.json names (best or
        averaged), else model.safetensors. `ensemble`: more run directories trained with the
        same tokenizers (usually the same recipe, other seeds); their models are decoded
        together with this one (`Seq2SeqEnsemble`), each with its final.json weights."""
        run_dir = Path(run_dir)
        if (run_dir / MEMBERS).exists() and (run_dir / "config.json").exists():  # a `train_ensemble` run
            if weights is not None:
                raise UserError(f"{run_dir} is an ensemble run: each member uses its own final weights")
            n = TranslateRecipe.load_json(run_dir / "config.json").ensemble
            dirs = [run_dir / f"member{i}" for i in range(n)]
            return cls.load(dirs[0], ensemble=[*dirs[1:], *ensemble])
        recipe, model = _load_run_model(run_dir, weights)
        src_tok, tgt_tok = Tokenizer.load(run_dir / SRC_TOK), Tokenizer.load(run_dir / TGT_TOK)
        if ensemble:
            members = [model]
            for other in map(Path, ensemble):
                for name in (SRC_TOK, TGT_TOK):
                    if not (other / name).exists() or (other / name).read_bytes() != (run_dir / name).read_bytes():
                        raise UserError(f"{other / name} differs from {run_dir / name} (or is missing): "
                                        "ensemble members must be trained with the same tokenizers "
                                        "(the same data and tokenizer settings)")
                members.append(_load_run_model(other, None)[1])
            model = Seq2SeqEnsemble(members)
        return cls(model, src_tok, tgt_tok, recipe)

    def decode_config(self, **overrides) -> DecodeConfig:
        """The recipe's decoding settings with `overrides` (None values ignored)."""
        return self.recipe.decode.replace(**{k: v for k, v in overrides.items() if v is not None})

    def encode(self, texts: Sequence[str], cfg: DecodeConfig) -> list[list[int]]:
        if isinstance(texts, str):
            texts = [texts]
        for i, t in enumerate(texts, 1):
            if not isinstance(t, str) or not t.strip():
                raise UserError(f"sentence {i} is empty: there is nothing to translate")
        ids = self.src_tok.encode_batch([t.strip() for t in texts])
        check_sources([len(x) for x in ids], cfg)
        return [x + [EOS_ID] for x in ids]

    @torch.no_grad()
    def hypotheses(self, texts: Sequence[str], **overrides) -> list[Hypothesis]:
        """The best `Hypothesis` for each text, in order. Overrides: any `DecodeConfig` field
        (beam, length_penalty, max_len_ratio, early_stop, use_cache, ...)."""
        cfg = self.decode_config(**overrides)
        ids = self.encode(texts, cfg)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[Hypothesis | None] = [None] * len(ids)
        start = 0
        while start < len(order):  # length-sorted batches of about cfg.batch_tokens * beam
            end = start + 1
            while end < len(order) and (end - start + 1) * len(ids[order[end]]) * cfg.beam <= cfg.batch_tokens:
                end += 1
            chunk = order[start:end]
            src, _ = pad_sequences([ids[i] for i in chunk], PAD_ID)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
                hyps = decode(self.model, src, cfg)
            for i, h in zip(chunk, hyps):
                out[i] = h
            start = end
        return out  # type: ignore[return-value]

    def translate(self, texts: Sequence[str] | str, beam: int | None = None,
                  length_penalty: float | None = None, **overrides) -> list[str]:
        """Translations of `texts` (a list, or one string -> a list of one)."""
        hyps = self.hypotheses([texts] if isinstance(texts, str) else texts, beam=beam,
                               length_penalty=length_penalty, **overrides)
        return [self.tgt_tok.decode(h.tokens) for h in hyps]

    def evaluate(self, pairs: Sequence[tuple[str, str]], out_dir: str | Path | None = None,
                 name: str = "eval", **overrides) -> dict[str, Any]:
        """BLEU and chrF (sacrebleu, with signatures) of translating the sources of `pairs`;
        writes `<name>_metrics.json` and `<name>_hyps.txt` into `out_dir` when given."""
        srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
        cfg = self.decode_config(**overrides)
        t0 = time.perf_counter()
        hyps = self.translate(srcs, **overrides)
        elapsed = time.perf_counter() - t0
        rep = corpus_scores(hyps, refs)
        rep.update(n=len(pairs), decode=cfg.to_dict(), seconds=round(elapsed, 2),
                   sentences_per_s=len(pairs) / max(elapsed, 1e-9))
        if out_dir is not None:
            out_dir = Path(out_dir)
            (out_dir / f"{name}_metrics.json").write_text(json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
            (out_dir / f"{name}_hyps.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        return rep

    @torch.no_grad()
    def align(self, text: str, **overrides) -> tuple[list[str], list[str], list[torch.Tensor], str]:
        """Translate `text`; return source tokens, output tokens (with <eos>), the
        cross-attention of every decoder layer `(H, T_out, S)` for that output, and the translation."""
        cfg = self.decode_config(**overrides)
        src_ids = self.encode([text], cfg)[0]
        hyp = self.hypotheses([text], **overrides)[0]
        src = torch.tensor([src_ids])
        tgt_out = hyp.tokens + [EOS_ID]
        tgt_in = torch.tensor([[BOS_ID] + tgt_out[:-1]])
        model = self.model.members[0] if isinstance(self.model, Seq2SeqEnsemble) else self.model
        memory, mask = model.encode(src)  # an ensemble shows its first member's attention
        _, weights = model.decode(tgt_in, memory, mask, need_weights=True)
        show = lambda tok, i: tok.decode([i], skip_special=False).strip() or tok.id_to_token(i)  # noqa: E731
        return ([show(self.src_tok, i) for i in src_ids], [show(self.tgt_tok, i) for i in tgt_out],
                [cross[0] for _, cross in weights], self.tgt_tok.decode(hyp.tokens))
