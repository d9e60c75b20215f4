"""scratchformer: a Transformer toolkit written from scratch on PyTorch tensors.

Layers (arrows point down only):
    nn/       the Transformer blocks, torch only
    models/   task heads on the stacks (classifier, seq2seq, language model)
    data/     datasets, readers, tokenizers, bucketing
    tasks/    batch -> loss, metrics, decoding
    train/    the one task-agnostic Trainer
    cli.py    the `scratchformer` command
Importing the top-level package is cheap: nothing heavy is imported here.
"""

__version__ = "0.1.0"
