"""Translation, in the slots every task fills (recipe, data, task, pipeline, inference, plus
beam-search decoding): parallel text -> batches, a label-smoothed loss, BLEU/chrF, checkpoint
averaging, and the inference API.

`train_translator(recipe, out_dir)` is what `scratchformer train translate` runs;
`Translator.load(run_dir).translate([...], beam=5)` is the inference API.

A run directory holds, besides the Trainer's files (model.safetensors = best validation BLEU,
the checkpoint (checkpoint.json, checkpoints/), metrics.jsonl, curves.png):
  config.json, src_tokenizer.json, tgt_tokenizer.json   what `Translator.load` needs
  snapshots/step-*.safetensors   the weights at the last `average_last` steps `average_every` apart
  averaged.safetensors           their element-wise mean (checkpoint averaging)
  final.json                     which weights file won on validation BLEU, and the scores
  test_metrics.json, test_hyps.txt   BLEU/chrF (sacrebleu, with signatures) of the final model
"""
from .data import EncodedSplit, TranslateBatch, build_tokenizers, load_translation, read_parallel_spec
from .decoding import DecodeConfig, Hypothesis, beam_search, decode, greedy_decode, length_limits
from .inference import Translator
from .pipeline import finalize, train_ensemble, train_translator
from .recipe import AVERAGED, FINAL, SNAPSHOTS, SRC_TOK, TGT_TOK, TranslateDataConfig, TranslateRecipe
from .task import TranslationTask, average_checkpoints, corpus_scores, snapshot_files

__all__ = [
    "AVERAGED", "DecodeConfig", "EncodedSplit", "FINAL", "Hypothesis", "SNAPSHOTS", "SRC_TOK", "TGT_TOK",
    "TranslateBatch", "TranslateDataConfig", "TranslateRecipe", "TranslationTask", "Translator",
    "average_checkpoints", "beam_search", "build_tokenizers", "corpus_scores", "decode", "finalize",
    "greedy_decode", "length_limits", "load_translation", "read_parallel_spec", "snapshot_files", "train_ensemble", "train_translator",
]
