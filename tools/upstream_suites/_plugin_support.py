"""What both upstream-suite plugins do alike: select the tests that apply, and swap our class
into each test module for the length of one test (fixtures included), restoring it after.

A plugin module binds the hooks to its own rules::

    pytest_collection_modifyitems = selection_hook(NOT_APPLICABLE, KNOWN_GAPS)
    pytest_runtest_setup, pytest_runtest_teardown = patch_hooks(_patch_module)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

ModulePatch = Callable[[Any], Iterator[None]]


def selection_hook(not_applicable: frozenset[str] | set[str], known_gaps: Mapping[str, str],
                   drop: Callable[[pytest.Item], bool] = lambda item: False
                   ) -> Callable[[pytest.Config, list[pytest.Item]], None]:
    """``pytest_collection_modifyitems``: deselect what does not apply to our plugin (or that
    ``drop`` refuses), and run each known gap as a strict expected failure, so a fix shows."""

    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        keep, dropped = [], []
        for item in items:
            name = getattr(item, "originalname", item.name)
            if name in not_applicable or drop(item):
                dropped.append(item)
                continue
            if name in known_gaps:
                item.add_marker(pytest.mark.xfail(reason=known_gaps[name], strict=True))
            keep.append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    return pytest_collection_modifyitems


def file_tier_config(root: Path) -> Path:
    """``root/lifeboat.toml``: one file tier under ``root`` (reads hit disk) and no fallback, with
    ``on_error = "fail"`` so a tier that cannot start fails the test instead of serving uncached."""
    toml = root / "lifeboat.toml"
    toml.write_text(f'[engine]\non_error = "fail"\n[[tiers]]\nname = "nvme"\nbackend = "file"\n'
                    f'path = "{root / "tier"}"\ncapacity_gb = 1\n\n[fallback_local]\nenabled = false\n')
    return toml


def replace_names(module: Any, replacements: Mapping[str, Any]) -> Iterator[None]:
    """A ``ModulePatch``: the module's names in ``replacements`` (those it has) become ours until
    the generator resumes, then the module's namespace is restored as it was."""
    saved = dict(module.__dict__)
    for name, value in replacements.items():
        if name in saved:
            setattr(module, name, value)
    try:
        yield
    finally:
        module.__dict__.clear()
        module.__dict__.update(saved)


def patch_hooks(patch_module: ModulePatch) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``pytest_runtest_setup`` / ``pytest_runtest_teardown`` around ``patch_module`` (a generator
    that patches a test module, yields, restores): patched before the test's fixtures are built
    (they read the module's names), restored after its teardown."""
    stash_key = pytest.StashKey[Iterator[None]]()

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
        module = getattr(item, "module", None)
        if module is not None:
            patcher = patch_module(module)
            next(patcher)
            item.stash[stash_key] = patcher
        yield

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
        yield
        patcher = item.stash.get(stash_key, None)
        if patcher is not None:
            next(patcher, None)

    return pytest_runtest_setup, pytest_runtest_teardown
