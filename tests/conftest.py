"""Shared pytest settings (kept minimal), and tests/ on sys.path for the shared helpers (toy_data.py).

`make test` runs the suite on two workers (pytest-xdist, `-n 2`); each worker and every process
it starts then use one thread, so the two never ask for more cores than the machine has."""
import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "network: fetches a pinned archive from PyPI/npm on first use (cached after); "
        "runs by default, deselect with -m 'not network'",
    )
    # compiled decoding steps built by the tests stay with the tests (inherited by the servers they
    # start): a package in the user's cache would make decode.static=auto take the static step in
    # a later run where a test expects the lean one
    import tempfile

    os.environ["SCRATCHFORMER_STEP_CACHE"] = tempfile.mkdtemp(prefix="scratchformer-test-steps-")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the CLI subprocesses and servers the tests start
        torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """Tiny ops on a shared machine: a second thread only adds contention (25x slower measured)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
