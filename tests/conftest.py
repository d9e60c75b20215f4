"""Shared pytest settings (kept minimal)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "network: fetches a pinned archive from PyPI/npm on first use (cached after); "
        "runs by default, deselect with -m 'not network'",
    )
