"""Benchmarks of scratchformer against torch.nn, transformers and textbook code (`make bench`)."""
