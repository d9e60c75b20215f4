"""Language modelling, in the slots every task fills (recipe, data, task, pipeline, inference,
inspect, export, face) plus sampling and context: a text becomes random windows of tokens, a
next-token loss, perplexity and bpc, and generated text.

`train_lm(recipe, out_dir)` is what `scratchformer train lm` runs;
`LanguageModel.load(run_dir).generate("ROMEO:", 200)` is the inference API. The manual (the
fixed contiguous split, the seeded windows of an epoch, the metrics, longer contexts than
training, the generation window and its re-prefill) is docs/language-model.md.
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
