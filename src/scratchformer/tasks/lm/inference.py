"""The inference API of language models: `LanguageModel.load(run_dir).generate(...)`."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ...data.tokenizers import NUM_SPECIALS, UNK_ID, Tokenizer
from ...errors import UserError
from ...nn.compute import Compute, compute_type_from
from ...models.language_model import DecoderLM, build_lm
from ...train.checkpoint import build_checked
from ..runs import RunDir
from .data import encode_text, fixed_windows
from .recipe import LMRecipe
from .sampling import _IncrementalDecoder, check_sampling, sample_next
from .data import chars_per_token
from .task import LMTask, evaluate_windows


class LanguageModel:
    """A trained language model, loaded from its run directory.

    >>> lm = LanguageModel.load("runs/shakespeare")
    >>> print(lm.generate("ROMEO:", max_new_tokens=200, temperature=0.8, top_k=40, seed=0))

    `model` is the `DecoderLM` (an `nn.Module`: ids `(B, T)` -> logits `(B, T, V)`).
    """

    def __init__(self, model: DecoderLM, tokenizer: Tokenizer, recipe: LMRecipe, compute: Compute | None = None):
        self.model, self.tokenizer, self.recipe = model.eval(), tokenizer, recipe
        self.compute = compute or Compute(model, "float32", recipe.model.transformer.d_model)

    @property
    def compute_type(self) -> str:
        return self.compute.compute_type

    @classmethod
    def load(cls, run_dir: str | Path, quantize: str | None = None,
             compute_type: str | None = None) -> "LanguageModel":
        """`compute_type`: float32 (default), bfloat16 (a bf16 copy of the model), int8 (int8
        projections, CPU) or auto (per batch, what a probe measures faster; `nn/compute.py`).
        `quantize='int8'` is the deprecated spelling of compute_type='int8'."""
        compute_type = compute_type_from(compute_type, quantize)
        run_dir = Path(run_dir)
        recipe = RunDir(run_dir).load_recipe(LMRecipe, "lm", ("tokenizer.json", "model.safetensors"), "language-model")
        tokenizer = Tokenizer.load(run_dir / "tokenizer.json")
        if tokenizer.vocab_size != recipe.model.vocab_size:
            raise UserError(f"{run_dir / 'tokenizer.json'} has {tokenizer.vocab_size} tokens but {run_dir / 'config.json'} "
                            f"(and model.safetensors) {recipe.model.vocab_size}: the run folder is inconsistent")
        model = build_checked(lambda: build_lm(recipe.model, run_dir), run_dir / "model.safetensors",
                              run_dir / "config.json")
        return cls(model, tokenizer, recipe, Compute(model, compute_type, recipe.model.transformer.d_model))

    def compute_choice(self, rows: int = 1) -> tuple[str, str]:
        """What `rows` token rows at once compute in (generation: one a step), and why; nothing
        is stored (`nn/compute.py`)."""
        return self.compute.choose(rows)

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
        if getattr(prompt, "encoded_by", None) is self:  # tokenized already (a served prompt: `tokenize`)
            ids = list(prompt.encoded)
        else:
            ids = self.tokenizer.encode(prompt)
        unknown: list[str] = []
        if UNK_ID in ids and self.tokenizer.kind == "char":
            unknown = sorted({c for c, i in zip(prompt, ids) if i == UNK_ID})
        elif UNK_ID in ids:
            unknown = ["?"]
        return ids, unknown

    def count_tokens(self, text: str) -> int:
        """Tokens of a prompt (what a server limits)."""
        return len(self.tokenizer.encode(text))

    def tokenize(self, texts: Sequence[str]) -> list:
        """The prompts as `Tokenized` strs carrying their ids (n_tokens: as `count_tokens`), which
        `encode_prompt` (and so `generate`) reads without tokenizing again (serve: one
        tokenization per request, from the limit check to the generation)."""
        from ...data.tokenizers import Tokenized

        out = []
        for t in texts:
            ids = self.tokenizer.encode(t)
            out.append(Tokenized.of(t, ids, self, len(ids)))
        return out

    @torch.no_grad()
    def generate_ids(self, ids: list[int], max_new_tokens: int, temperature: float = 1.0,
                     top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                     use_cache: bool = True, window: int | None = None,
                     on_token: Callable[[int], None] | None = None, lean: bool = True) -> list[int]:
        """Continue `ids` by up to `max_new_tokens` ids (returned without the prompt).
        Special tokens (<pad> <unk> <bos> <eos> <cls>) are never generated. With the cache,
        `lean=True` runs each new token through the model's `lean_step` (nn/lean.py; the same
        tokens as the readable forward, tested) unless `model.lean_blocker()` names a reason."""
        check_sampling(temperature, top_k, top_p, seed=seed, max_new_tokens=max_new_tokens)
        if not ids:
            raise UserError("the prompt encodes to no tokens; give some text to continue")
        window = self.resolve_window(window)
        gen = torch.Generator()
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(int(seed))
        model = self.compute.model_for(1)[0]  # one row a step: the float model, or its bf16 copy
        seq = list(ids)
        out: list[int] = []
        keep = max(1, window - window // 4)  # tokens kept when the cached path crops

        def next_logits_uncached() -> torch.Tensor:
            x = torch.tensor([seq[-window:]])  # (1, T <= window)
            return model(x)[:, -1]  # (1, V)

        caches = step_fn = None

        def prefill(tokens: list[int]):
            nonlocal caches, step_fn
            caches = model.new_caches(window)  # preallocated: the window is the most it holds
            step_fn = model.lean_step(caches) if lean and model.lean_blocker() is None else None
            return model(torch.tensor([tokens]), caches)[:, -1]  # (1, V)

        use_cache = use_cache and getattr(model, "supports_cache", True)  # a learner's model: its forward only
        if use_cache and max_new_tokens > 0:
            logits = prefill(seq[-window:])
        for step in range(max_new_tokens):
            if caches is None:
                logits = next_logits_uncached()
            logits = logits.float().clone()  # sampled in float32 whatever the model computes in
            logits[:, :NUM_SPECIALS] = float("-inf")  # never emit specials
            token = int(sample_next(logits, temperature, top_k, top_p, gen)[0])
            seq.append(token)
            out.append(token)
            if on_token is not None:
                on_token(token)
            if caches is None or step == max_new_tokens - 1:
                continue
            if caches[0].length + 1 > window:  # the window is full: crop, re-prefill
                logits = prefill(seq[-keep:])
            elif step_fn is not None:
                logits = step_fn(torch.tensor([token]))  # (1, V)
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
        batch_size = batch_size or self.recipe.data.eval_batch_size
        model = self.compute.model_for(batch_size * ctx)[0]
        task = LMTask(model, self.recipe, self.tokenizer, chars_per_token(self.tokenizer, text, ids))
        batches = fixed_windows(ids, ctx, batch_size, max_windows)
        res = evaluate_windows(task, batches)
        res["unk_rate"] = float(np.mean(ids == UNK_ID))
        return res
