"""scratchformer: a Transformer toolkit written from scratch on PyTorch tensors.

Layers, top to bottom (each imports only those below it; docs/architecture.md has the graph):
    cli.py, commands/           the `scratchformer` command, thin over the Python API
    experiments/, diagnostics/  sweeps and named experiments; attention maps and `doctor`
    tasks/                      one package per task (recipe, data, task, pipeline, inference)
    interop/                    torch.nn and Hugging Face BERT <-> ours
    models/                     task heads on the stacks
    train/                      the one task-agnostic Trainer
    nn/                         the Transformer blocks, torch only
    data/                       datasets, readers, tokenizers, bucketing, special ids
    config.py, fonts.py, fileio.py, errors.py   the ground floor
Importing the top-level package is cheap: nothing heavy is imported here.
"""

__version__ = "0.1.0"
