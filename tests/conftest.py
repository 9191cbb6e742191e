"""Shared fixtures. Each test that needs a component starts it (and stops it)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifeboatcache_core.plugins import reset_registry

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = SHARED / "traces" / "kv-cache-tester"


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No plugin state leaks between tests."""
    monkeypatch.delenv("LIFEBOATCACHE_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("LIFEBOATCACHE_LOAD_PLUGINS", raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture(autouse=True)
def _sigint_restored() -> Iterator[None]:
    """Undo a test that leaves SIGINT ignored in this process (an in-process engine did).

    An ignored SIGINT is inherited by every subprocess a later test starts: Python then installs
    no KeyboardInterrupt handler and libFuzzer treats the signal state as a crash.
    """
    yield
    # unconditionally: a C extension may have ignored it behind Python's back (getsignal can't see that)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def traces_dir() -> Path:
    assert TRACES.is_dir(), f"the real traces are expected at {TRACES} (CI has them)"
    return TRACES
