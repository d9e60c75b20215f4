"""Masked-language-model pretraining (slots: recipe, data, task, pipeline): unlabeled text -> an encoder to start classifiers from.

`pretrain_mlm(recipe, out_dir)` is what `scratchformer pretrain mlm` runs. The run directory
holds config.json (task "mlm"), tokenizer.json and model.safetensors; then
`scratchformer train classify --init RUN_DIR` starts a classifier's embeddings and encoder
from it (see `tasks.classify.load_init`).

Where the text comes from (`data.datasets`, each one of):
  - a registered classification data set: the texts of its train and valid splits, labels
    unused, test never read (e.g. `inews`: titles and article bodies; `thucnews`: headlines);
  - a registered language-modelling corpus (`sanguo`, `shakespeare`): its non-empty lines;
  - a path to a text file: one document per non-empty line.
Each document is tokenized once and cut into windows of `max_len` tokens. Masking is
dynamic: every epoch draws new masks, from a generator seeded by (seed, epoch, batch), so a
resumed run sees exactly the batches it would have seen.
"""
from .data import EncodedSplit, MaskedBatches, MLMBatch, Windows, make_masked_batch, pretraining_texts
from .pipeline import pretrain_mlm
from .recipe import MLMDataConfig, MLMRecipe
from .task import MLMTask

__all__ = ["EncodedSplit", "MLMBatch", "MLMDataConfig", "MLMRecipe", "MLMTask", "MaskedBatches", "Windows",
           "make_masked_batch", "pretrain_mlm", "pretraining_texts"]
