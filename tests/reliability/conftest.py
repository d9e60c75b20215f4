"""The reliability suite reuses the toy task of tests/train (a tiny MLP: fast, deterministic)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def quick_toy(monkeypatch):
    """Toy runs in milliseconds: one thread (tiny ops spin on a busy machine otherwise) and no
    curve plot (matplotlib costs more than the training)."""
    from scratchformer.train import evaluation as evaluation_mod

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(evaluation_mod, "plot_curves", lambda *a, **k: None)
    yield
    torch.set_num_threads(threads)
