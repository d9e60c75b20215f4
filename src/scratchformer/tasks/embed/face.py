"""The face of sentence embeddings from a pretrained encoder (see tasks/faces.py). There is no
embed run folder: the encoder is a pretrained checkpoint (`minilm`, or a Hugging Face BERT
folder), so only `load` is filled (serve answers it with its own backend, serve/backends.py)."""
from __future__ import annotations

from ..slots import Face, Unavailable

_TRAIN = ("embeddings come from a pretrained encoder and are not trained here: fine-tune one with "
          "`scratchformer train classify --init minilm ...`")


def _load(source, **options):
    """(encoder, tokenizer) of a pretrained encoder's name or folder."""
    from ...interop.hf_bert import load_hf_bert

    return load_hf_bert(source, **options)


FACE = Face(
    name="embed", words="an embedding model", recipe=Unavailable(_TRAIN), data_form="file",
    train=Unavailable(_TRAIN), train_recipe=Unavailable(_TRAIN), load=_load,
    inspect=Unavailable("attention maps are drawn for run folders; a pretrained encoder has none "
                        "(train a classifier from it with --init and inspect that run)"),
    exports={},
)
