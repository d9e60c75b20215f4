"""Shared pytest settings (kept minimal), and tests/ on sys.path for the shared helpers (toy_data.py)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "network: fetches a pinned archive from PyPI/npm on first use (cached after); "
        "runs by default, deselect with -m 'not network'",
    )
