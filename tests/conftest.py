"""Shared fixtures. Each test that needs a component starts it (and stops it)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_core.plugins import reset_registry

from tests import scheduling, summary

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The engine end-to-end tests (``slow``) first; ``make test`` gives them one worker (``tests/scheduling.py``)."""
    scheduling.engine_first(config, items)


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: an engine venv without xdist loads this file too
def pytest_configure_node(node: Any) -> None:
    scheduling.configure_node(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return scheduling.make_scheduler(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    summary.gather(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    summary.print_lines(terminalreporter)
