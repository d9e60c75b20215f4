"""An exported classifier (`scratchformer export --format onnx`) run by ONNX Runtime: what
`serve --backend onnxruntime` and the export's parity check call. No torch in the loop."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import UserError
from .onnx_preprocess import Preprocessor


class OnnxClassifier:
    def __init__(self, folder: str | Path, threads: int | None = None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise UserError("serving an ONNX export needs onnxruntime: pip install 'scratchformer[export]'") from None
        folder = Path(folder)
        if not (folder / "model.onnx").is_file():
            raise UserError(f"{folder} has no model.onnx: pass a folder written by `scratchformer export --format onnx`")
        try:
            self.pre = Preprocessor(folder)
        except (ValueError, KeyError, OSError) as e:
            raise UserError(f"{folder}: not a readable classifier export ({e})") from None
        self.labels = self.pre.labels
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [self.pre.count_tokens(t) for t in texts]

    def _run(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise UserError(f"text {i + 1} is empty: there is nothing to classify")
        logits, emb = self.session.run(["logits", "sentence_embedding"], self.pre(list(texts)))
        return logits, emb

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        return self._run(texts)[0]

    def predict_proba(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        """Class probabilities; the texts run as one batch (`batch_size` is `Classifier`'s word, ignored)."""
        z = self.logits(texts).astype(np.float64)
        z = np.exp(z - z.max(1, keepdims=True))
        return z / z.sum(1, keepdims=True)

    def embed(self, texts: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        return self._run(texts)[1]
