"""How ``make test`` shares the suite between its two pytest-xdist workers.

The engine end-to-end tests (marked ``slow``) keep about one and a half cores busy each; two of
them at once on CI's two cores each ran about 2.3x slower than alone (2026-12-04: 351 s against
155 s of set-up for one engine fixture). So one worker runs all of them, one after another, from
the start, while the other takes the remaining test files whole, one at a time (a file's
module-scoped fixtures are set up once), and then helps with whatever is left.

xdist's own ``--dist loadgroup`` cannot express this under pytest 9 (it renames test ids through
an attribute pytest no longer reads), and xdist's controller never collects, so it cannot see the
marks. Instead the workers write the engine tests' files to a path the controller hands them
(``workerinput``), and :func:`make_scheduler` returns ``--dist loadfile`` with those files taken
as one unit. The hooks that call these live in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: the ``workerinput`` key of the file the workers write the engine test files to
ENGINE_FILES_KEY = "lifeboat_engine_test_files"
#: the scheduling unit that stands for all of them
ENGINE_UNIT = "engine tests (slow)"
_engine_files_path = pytest.StashKey[Path]()


def engine_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the engine tests first (their order kept); in an xdist worker, tell the controller their files."""
    engine_files = {_file_of(item.nodeid) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _file_of(item.nodeid) not in engine_files)  # stable
    target = getattr(config, "workerinput", {}).get(ENGINE_FILES_KEY)
    if target:  # both workers write the same list: each in one rename
        partial = f"{target}.{os.getpid()}"
        Path(partial).write_text("".join(f"{name}\n" for name in sorted(engine_files)))
        os.replace(partial, target)


def configure_node(node: Any) -> None:
    """Controller, once per worker: where that worker writes the engine test files."""
    config: pytest.Config = node.config
    if _engine_files_path not in config.stash:
        folder = tempfile.mkdtemp(prefix="lifeboat-xdist-")
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        config.stash[_engine_files_path] = Path(folder) / "engine-files.txt"
    node.workerinput[ENGINE_FILES_KEY] = str(config.stash[_engine_files_path])


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, with every engine test file in one unit; None for any other ``--dist``."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    listed = config.stash.get(_engine_files_path, None)

    class EngineFilesAsOneUnit(LoadFileScheduling):
        """Scopes are asked for once collection is complete, so the workers' list is there by then."""

        _engine_files: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._engine_files is None:
                text = listed.read_text() if listed is not None and listed.exists() else ""
                self._engine_files = frozenset(text.split())
            name = _file_of(nodeid)
            return ENGINE_UNIT if name in self._engine_files else name

    return EngineFilesAsOneUnit(config, log)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]
