"""Bridges to other implementations: torch.nn (both ways) and Hugging Face BERT checkpoints."""
from .torch_nn import from_torch, to_torch

__all__ = ["from_torch", "to_torch"]
