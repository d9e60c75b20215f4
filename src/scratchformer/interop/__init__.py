"""Bridges to other implementations: torch.nn (both ways) and Hugging Face BERT checkpoints."""
from .hf_bert import export_hf_bert, load_hf_bert
from .torch_nn import from_torch, to_torch

__all__ = ["export_hf_bert", "from_torch", "load_hf_bert", "to_torch"]
