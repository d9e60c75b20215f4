"""Language modelling (slots: recipe, data, task, pipeline, sampling, inference): a text becomes random windows of tokens, a next-token loss, perplexity,
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

Longer contexts than training: `evaluate_context(lm, text, context)` (context.py) gives the
loss per position bucket [0, L), [L, 2L), [2L, 4L), ... and, for RoPE models, position
interpolation or NTK-aware scaling at inference (`rope="linear" | "ntk"`). Training with
`data.random_length` cuts each batch's windows to a random length in min_length..context.

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
from .context import evaluate_context, plot_position_loss, position_buckets
from .data import (EncodedSplit, LMBatch, LMText, RandomWindows, build_lm_tokenizer, chars_per_token, encode_text,
                   fixed_windows, load_lm_text)
from .inference import LanguageModel
from .pipeline import train_lm
from .recipe import LMDataConfig, LMRecipe
from .sampling import _IncrementalDecoder, check_sampling, sample_next  # noqa: F401  (tests use the decoder)
from .task import LMTask, evaluate_windows, metrics_from

__all__ = [
    "EncodedSplit", "LMBatch", "LMDataConfig", "LMRecipe", "LMTask", "LMText", "LanguageModel", "RandomWindows",
    "build_lm_tokenizer", "chars_per_token", "check_sampling", "encode_text", "evaluate_context", "evaluate_windows",
    "fixed_windows", "plot_position_loss", "position_buckets",
    "load_lm_text", "metrics_from", "sample_next", "train_lm",
]
