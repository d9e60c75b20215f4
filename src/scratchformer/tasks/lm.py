"""Language modelling: a text becomes random windows of tokens, a next-token loss, perplexity,
and generated text.

`train_lm(recipe, out_dir)` is what `scratchformer train lm` runs;
`LanguageModel.load(run_dir).generate("ROMEO:", 200)` is the inference API.

Data. The text (a registered corpus or the user's file) is split once, contiguously: the last
`valid_frac` of the characters is validation (`split_text`). The tokenizer is trained on the
training part only. One training "epoch" is `len(train tokens) // context` windows whose start
offsets are drawn from `numpy.random.default_rng([seed, epoch])`, so the batches of an epoch
are the same every time (the Trainer's resume contract). Validation uses a fixed set of
windows: consecutive, non-overlapping windows of `context` targets over the validation tokens
(every token is predicted once, seeing 0..context-1 tokens of its window, as during
training); `eval_windows` keeps that many of them, evenly spaced, for the evaluations during
training. `train_lm` ends with an evaluation of the best checkpoint on *all* windows
(`valid_metrics.json`); `scratchformer evaluate RUN` repeats it.

Metrics: `loss` = mean cross-entropy per target token (nats), `perplexity` = exp(loss), and
`bpc` = bits per character. For a char tokenizer a token is a character, so bpc = loss / ln 2;
for BPE, bpc = loss * (tokens / characters of the validation text) / ln 2, an estimate that
lets a BPE model be compared with a char model on the same text.

Generation: one `KVCache` per layer; the prompt is pre-filled in one forward, then each new
token is one forward of one position. The model sees at most `window` tokens (default: the
training `context`). When the text grows past it, the uncached path simply feeds the last
`window` tokens at every step; the cached path keeps the last 3/4 of the window, rebuilds the
caches from them in one forward (re-prefill) and continues one token at a time. So the two
paths give identical tokens while prompt + output fit in the window (tested) and may differ
after the first crop. With learned positions `window` can be at most `max_len` (the table has
no rows beyond); RoPE, sinusoidal and ALiBi have no hard limit, but the model was trained on
`context` tokens and usually degrades beyond: raise `window` at your own risk.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ..data.datasets import split_text
from ..data.readers import read_text_file
from ..data.registry import DATASETS, get_dataset
from ..data.tokenizers import NUM_SPECIALS, UNK_ID, Tokenizer, build_tokenizer
from ..errors import UserError
from ..models.language_model import DecoderLM, LMConfig
from ..nn import JsonConfig
from ..train import TrainConfig, Trainer
from ..train.checkpoint import load_weights
from .data_source import load_run_recipe, looks_like_path

TOKENIZERS = ("char", "bpe")
LN2 = math.log(2.0)


@dataclass
class LMDataConfig(JsonConfig):
    dataset: str = "shakespeare"  # a registered corpus (shakespeare, sanguo) or a .txt path
    valid_file: str | None = None  # validation text; default: the last valid_frac of `dataset`
    valid_frac: float = 0.1
    tokenizer: str = "char"  # char | bpe
    vocab_size: int = 2000  # bpe
    min_freq: int = 1  # char: rarer characters become <unk>
    context: int = 64  # tokens the model sees (training window and default generation window)
    batch_size: int = 12
    eval_windows: int | None = 1000  # validation windows used during training (None = all)
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise UserError(f"data.tokenizer must be one of {TOKENIZERS} for a language model, got {self.tokenizer!r}")
        if self.context < 1 or self.batch_size < 1 or self.eval_batch_size < 1:
            raise UserError("data.context, data.batch_size and data.eval_batch_size must be >= 1")
        if self.eval_windows is not None and self.eval_windows < 1:
            raise UserError("data.eval_windows must be >= 1 (or null for all windows)")
        if not 0.0 < self.valid_frac < 1.0:
            raise UserError(f"data.valid_frac must be in (0, 1), got {self.valid_frac}")


def _lm_train() -> TrainConfig:
    # nanoGPT's shakespeare-char settings: lr 1e-3, warmup 100, cosine to lr/10, AdamW
    # betas (0.9, 0.99), weight decay 0.1, clip 1.0
    return TrainConfig(lr=1e-3, warmup_steps=100, min_lr_ratio=0.1, max_steps=2000, betas=(0.9, 0.99),
                       weight_decay=0.1, grad_clip=1.0, eval_every=250, log_every=50)


@dataclass
class LMRecipe(JsonConfig):
    """Everything a language-model run needs; saved as the run's config.json."""

    task: str = "lm"
    data: LMDataConfig = field(default_factory=LMDataConfig)
    model: LMConfig = field(default_factory=LMConfig)
    train: TrainConfig = field(default_factory=_lm_train)


# ----------------------------------------------------------------------------------- data

@dataclass
class LMBatch:
    ids: torch.Tensor  # (B, T + 1): inputs ids[:, :-1], targets ids[:, 1:]

    def to(self, device) -> "LMBatch":
        return LMBatch(self.ids.to(device))


def _windows(ids: np.ndarray, starts: np.ndarray, context: int) -> LMBatch:
    idx = starts[:, None] + np.arange(context + 1)  # (B, T + 1)
    return LMBatch(torch.from_numpy(ids[idx].astype(np.int64)))


class RandomWindows:
    """The batches of one training epoch: random windows, deterministic in (seed, epoch)."""

    def __init__(self, ids: np.ndarray, context: int, batch_size: int, seed: int, epoch: int):
        self.ids, self.context, self.batch_size = ids, context, batch_size
        n_windows = max(len(ids) // context, batch_size)
        self.n_batches = n_windows // batch_size
        self.seed, self.epoch = seed, epoch

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[LMBatch]:
        rng = np.random.default_rng([self.seed, self.epoch])
        starts = rng.integers(0, len(self.ids) - self.context, size=(self.n_batches, self.batch_size))
        for row in starts:
            yield _windows(self.ids, row, self.context)


def fixed_windows(ids: np.ndarray, context: int, batch_size: int, limit: int | None = None) -> list[LMBatch]:
    """Non-overlapping windows of `context` targets (stride `context`), evenly thinned to at
    most `limit`. A tail shorter than a full window is left out."""
    n = (len(ids) - 1) // context
    if n < 1:
        return []
    starts = np.arange(n) * context
    if limit is not None and n > limit:
        starts = starts[np.linspace(0, n - 1, limit).round().astype(np.int64)]
    return [_windows(ids, starts[i : i + batch_size], context) for i in range(0, len(starts), batch_size)]


@dataclass
class LMText:
    train: str
    valid: str
    name: str


def load_lm_text(dc: LMDataConfig) -> LMText:
    """The training and validation text of `dc` (a registered corpus or a file)."""
    name = dc.dataset
    key = name.strip().lower().replace("_", "-")
    if key in DATASETS or not looks_like_path(name):
        info = get_dataset(name)
        if info.task != "lm":
            raise UserError(f"dataset {name!r} is a {info.task} data set, not a text corpus; "
                            f"use one of {', '.join(n for n, i in DATASETS.items() if i.task == 'lm')} or a .txt file")
        text, name = info.load(), info.name
    else:
        text, name = read_text_file(name), Path(name).name
    if dc.valid_file:
        train, valid = text, read_text_file(dc.valid_file)
    else:
        train, valid = split_text(text, dc.valid_frac)
    return LMText(train, valid, name)


def encode_text(tok: Tokenizer, text: str) -> np.ndarray:
    """The whole text as one id array (BPE: encoded line by line, in parallel, which gives the
    same ids as encoding the text at once except where a run of blank lines is split)."""
    if tok.kind == "char":
        return np.asarray(tok.encode(text), dtype=np.int32)
    lines = text.splitlines(keepends=True)
    return np.fromiter((i for ids in tok.encode_batch(lines) for i in ids), dtype=np.int32)


def build_lm_tokenizer(dc: LMDataConfig, train_text: str) -> Tokenizer:
    if dc.tokenizer == "char":
        return build_tokenizer("char", [train_text], min_freq=dc.min_freq)
    return build_tokenizer("bpe", train_text.splitlines(keepends=True), vocab_size=dc.vocab_size)


def chars_per_token(tok: Tokenizer, text: str, ids: np.ndarray | None = None) -> float:
    if tok.kind == "char":
        return 1.0
    n = len(ids) if ids is not None else len(encode_text(tok, text))
    return len(text) / max(n, 1)


# ----------------------------------------------------------------------------------- task

class LMTask:
    """The Trainer's view of language modelling (see docs/contracts.md)."""

    def __init__(self, model: DecoderLM, recipe: LMRecipe, tokenizer: Tokenizer, chars_per_token: float = 1.0):
        self.model, self.recipe, self.tokenizer = model, recipe, tokenizer
        self.chars_per_token = chars_per_token

    def count(self, b: LMBatch) -> int:
        return b.ids[:, 1:].numel()

    def batch_tokens(self, b: LMBatch) -> int:
        return b.ids[:, 1:].numel()

    def loss_sum(self, b: LMBatch):
        logits = self.model(b.ids[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), b.ids[:, 1:].flatten(), reduction="sum")
        return loss, {}

    def evaluate(self, batches) -> dict[str, float]:
        total, count = 0.0, 0
        for b in batches:
            loss, _ = self.loss_sum(b)
            total += float(loss)
            count += self.count(b)
        return metrics_from(total, count, self.chars_per_token)

    def save(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        self.recipe.save_json(run_dir / "config.json")
        self.tokenizer.save(run_dir / "tokenizer.json")


def metrics_from(loss_sum: float, tokens: int, chars_per_token: float = 1.0) -> dict[str, float]:
    loss = loss_sum / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf"),
            "bpc": loss / chars_per_token / LN2, "tokens": float(tokens)}


def _evaluate_windows(task: LMTask, batches: list[LMBatch]) -> dict[str, float]:
    model = task.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return task.evaluate(batches)
    finally:
        model.train(was_training)


def _check_model_fits(recipe: LMRecipe) -> None:
    ec, ctx = recipe.model.encoder, recipe.data.context
    if ec.position == "learned" and ec.max_len < ctx:
        raise UserError(f"learned positions: model.encoder.max_len={ec.max_len} is shorter than "
                        f"data.context={ctx}; set model.encoder.max_len >= {ctx}")


def train_lm(recipe: LMRecipe, out_dir: str | Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Load the text, build tokenizer and model, train, then evaluate the best checkpoint on
    every validation window (`valid_metrics.json`)."""
    out_dir = Path(out_dir)
    dc = recipe.data
    _check_model_fits(recipe)
    text = load_lm_text(dc)
    if resume and (out_dir / "tokenizer.json").exists():
        tok = Tokenizer.load(out_dir / "tokenizer.json")
    else:
        tok = build_lm_tokenizer(dc, text.train)
    recipe.model.vocab_size = tok.vocab_size
    train_ids, valid_ids = encode_text(tok, text.train), encode_text(tok, text.valid)
    if len(train_ids) <= dc.context + 1:
        raise UserError(f"the training text has {len(train_ids)} tokens, not more than data.context={dc.context}; "
                        "use more text or a smaller context")
    if len(valid_ids) <= dc.context + 1:
        raise UserError(f"the validation text has {len(valid_ids)} tokens, fewer than one window of "
                        f"data.context={dc.context}; use more text, a larger data.valid_frac or a smaller context")
    cpt = chars_per_token(tok, text.valid, valid_ids)
    unk = float(np.mean(valid_ids == UNK_ID))
    log(f"data: {text.name}: {len(text.train):,} / {len(text.valid):,} train / valid characters, "
        f"{type(tok).__name__} vocab {tok.vocab_size}, {len(train_ids):,} / {len(valid_ids):,} tokens "
        f"({cpt:.2f} chars/token), <unk> rate on valid {unk:.3%}")
    seed = recipe.train.seed
    torch.manual_seed(seed)
    model = DecoderLM(recipe.model)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters ({recipe.model.encoder.position} positions, "
        f"{'tied' if recipe.model.tie_embeddings else 'untied'} embeddings), context {dc.context}, "
        f"torch threads {torch.get_num_threads()}")
    task = LMTask(model, recipe, tok, cpt)
    valid_batches = fixed_windows(valid_ids, dc.context, dc.eval_batch_size, dc.eval_windows)

    def train_batches(epoch: int) -> RandomWindows:
        return RandomWindows(train_ids, dc.context, dc.batch_size, seed, epoch)

    trainer = Trainer(task, train_batches, lambda: valid_batches, recipe.train, out_dir)
    summary = trainer.fit(resume=resume)
    load_weights(model, out_dir / "model.safetensors")
    full = _evaluate_windows(task, fixed_windows(valid_ids, dc.context, dc.eval_batch_size))
    full.update({"split": "valid", "best_step": summary.get("best_step")})
    (out_dir / "valid_metrics.json").write_text(json.dumps(full, indent=1) + "\n")
    log(f"valid (all {int(full['tokens']):,} tokens, best checkpoint from step {summary.get('best_step')}): "
        f"loss {full['loss']:.4f}, perplexity {full['perplexity']:.2f}, bpc {full['bpc']:.3f}")
    return {"train": summary, "valid": full}


# ----------------------------------------------------------------------------------- sampling

def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits `(B, V)` -> next ids `(B,)`. temperature 0 = greedy (argmax); top_k keeps the k
    most likely tokens; top_p keeps the smallest set whose probability reaches p (nucleus)."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each one
        drop_sorted = before >= top_p  # the first token is always kept (before = 0)
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise UserError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise UserError(f"top_k must be an integer >= 1 (1 = greedy), got {top_k}")
    if top_p is not None and not (0.0 < top_p <= 1.0):
        raise UserError(f"top_p must be in (0, 1] (1 = no nucleus cut), got {top_p}")


class _IncrementalDecoder:
    """New text for each new token. Byte-level BPE can split one character across tokens,
    so text ending in an incomplete character (U+FFFD) is held back until it completes."""

    def __init__(self, tok: Tokenizer):
        self.tok, self.ids, self.emitted = tok, [], 0

    def push(self, token: int) -> str:
        if self.tok.kind == "char":
            return self.tok.decode([token])
        self.ids.append(token)
        text = self.tok.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        new, self.emitted = text[self.emitted :], len(text)
        return new

    def flush(self) -> str:
        if self.tok.kind == "char" or not self.ids:
            return ""
        text = self.tok.decode(self.ids)
        new, self.emitted = text[self.emitted :], len(text)
        return new


# ----------------------------------------------------------------------------------- inference API

class LanguageModel:
    """A trained language model, loaded from its run directory.

    >>> lm = LanguageModel.load("runs/shakespeare")
    >>> print(lm.generate("ROMEO:", max_new_tokens=200, temperature=0.8, top_k=40, seed=0))

    `model` is the `DecoderLM` (an `nn.Module`: ids `(B, T)` -> logits `(B, T, V)`).
    """

    def __init__(self, model: DecoderLM, tokenizer: Tokenizer, recipe: LMRecipe):
        self.model, self.tokenizer, self.recipe = model.eval(), tokenizer, recipe

    @classmethod
    def load(cls, run_dir: str | Path) -> "LanguageModel":
        run_dir = Path(run_dir)
        recipe = load_run_recipe(run_dir, LMRecipe, "lm", ("tokenizer.json", "model.safetensors"), "language-model")
        model = DecoderLM(recipe.model)
        load_weights(model, run_dir / "model.safetensors")
        return cls(model, Tokenizer.load(run_dir / "tokenizer.json"), recipe)

    @property
    def context(self) -> int:
        """The window the model was trained on (the default generation window)."""
        return self.recipe.data.context

    def resolve_window(self, window: int | None) -> int:
        window = self.context if window is None else window
        if window < 1:
            raise UserError(f"window must be >= 1, got {window}")
        limit = self.model.max_positions
        if limit is not None and window > limit:
            raise UserError(f"this model has learned positions up to max_len={limit}; "
                            f"window={window} is too long (use <= {limit})")
        return window

    def encode_prompt(self, prompt: str) -> tuple[list[int], list[str]]:
        """Prompt ids and the characters that are not in the vocabulary (they become <unk>)."""
        if not isinstance(prompt, str) or prompt == "":
            raise UserError("the prompt is empty; give some text to continue, e.g. --prompt 'ROMEO:' "
                            "(a newline works too: --prompt $'\\n')")
        ids = self.tokenizer.encode(prompt)
        unknown: list[str] = []
        if UNK_ID in ids and self.tokenizer.kind == "char":
            unknown = sorted({c for c, i in zip(prompt, ids) if i == UNK_ID})
        elif UNK_ID in ids:
            unknown = ["?"]
        return ids, unknown

    @torch.no_grad()
    def generate_ids(self, ids: list[int], max_new_tokens: int, temperature: float = 1.0,
                     top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                     use_cache: bool = True, window: int | None = None,
                     on_token: Callable[[int], None] | None = None) -> list[int]:
        """Continue `ids` by up to `max_new_tokens` ids (returned without the prompt).
        Special tokens (<pad> <unk> <bos> <eos> <cls>) are never generated."""
        check_sampling(temperature, top_k, top_p)
        if max_new_tokens < 0:
            raise UserError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if not ids:
            raise UserError("the prompt encodes to no tokens; give some text to continue")
        window = self.resolve_window(window)
        gen = torch.Generator()
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(int(seed))
        model = self.model
        seq = list(ids)
        out: list[int] = []
        keep = max(1, window - window // 4)  # tokens kept when the cached path crops

        def next_logits_uncached() -> torch.Tensor:
            x = torch.tensor([seq[-window:]])  # (1, T <= window)
            return model(x)[:, -1]  # (1, V)

        caches = None
        if use_cache and max_new_tokens > 0:
            caches = model.new_caches()
            logits = model(torch.tensor([seq[-window:]]), caches)[:, -1]  # prefill
        for step in range(max_new_tokens):
            if caches is None:
                logits = next_logits_uncached()
            logits = logits.clone()
            logits[:, :NUM_SPECIALS] = float("-inf")  # never emit specials
            token = int(sample_next(logits, temperature, top_k, top_p, gen)[0])
            seq.append(token)
            out.append(token)
            if on_token is not None:
                on_token(token)
            if caches is None or step == max_new_tokens - 1:
                continue
            if caches[0].length + 1 > window:  # the window is full: crop, re-prefill
                caches = model.new_caches()
                logits = model(torch.tensor([seq[-keep:]]), caches)[:, -1]
            else:
                logits = model(torch.tensor([[token]]), caches)[:, -1]  # (1, V)
        return out

    def generate(self, prompt: str, max_new_tokens: int = 200, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                 use_cache: bool = True, stream: Callable[[str], None] | None = None,
                 window: int | None = None, warn: Callable[[str], None] | None = None) -> str:
        """The continuation of `prompt` (without the prompt). `stream(text)` is called with each
        new piece of text as soon as it is generated. temperature 0 = greedy. `warn` receives
        notes about the prompt (default: `warnings.warn`)."""
        warn = warn or (lambda m: warnings.warn(m, stacklevel=3))
        ids, unknown = self.encode_prompt(prompt)
        if unknown:
            shown = " ".join(repr(c) for c in unknown[:10])
            warn(f"{len(unknown)} character(s) of the prompt are not in the model's vocabulary and "
                 f"become <unk>: {shown}")
        w = self.resolve_window(window)
        if len(ids) > w:
            warn(f"the prompt has {len(ids)} tokens; the model sees only the last {w}")
        dec = _IncrementalDecoder(self.tokenizer)
        pieces: list[str] = []

        def on_token(token: int) -> None:
            piece = dec.push(token)
            if piece:
                pieces.append(piece)
                if stream is not None:
                    stream(piece)

        self.generate_ids(ids, max_new_tokens, temperature, top_k, top_p, seed, use_cache, w, on_token)
        tail = dec.flush()
        if tail:
            pieces.append(tail)
            if stream is not None:
                stream(tail)
        return "".join(pieces)

    @torch.no_grad()
    def evaluate_text(self, text: str, batch_size: int | None = None,
                      max_windows: int | None = None) -> dict[str, float]:
        """loss / perplexity / bpc of the model on `text`: all non-overlapping windows of
        `context` tokens, or `max_windows` of them evenly spaced."""
        ids = encode_text(self.tokenizer, text)
        ctx = self.context
        if len(ids) <= ctx + 1:
            raise UserError(f"the text has {len(ids)} tokens; evaluation needs more than one window of {ctx}")
        task = LMTask(self.model, self.recipe, self.tokenizer, chars_per_token(self.tokenizer, text, ids))
        batches = fixed_windows(ids, ctx, batch_size or self.recipe.data.eval_batch_size, max_windows)
        res = _evaluate_windows(task, batches)
        res["unk_rate"] = float(np.mean(ids == UNK_ID))
        return res

