"""Sentence embeddings from a pretrained encoder (`scratchformer embed`, serve's /v1/embeddings
for `minilm` or a BERT folder): no run folder and no training of its own, only a face
(face.py) over `interop.hf_bert`."""
