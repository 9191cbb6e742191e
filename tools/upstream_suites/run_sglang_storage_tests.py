"""SGLang's own storage-backend tests (the ``test_mooncake_store.py`` its wheel ships) against
LifeboatHiCacheStorage.

    .venv-sglang-lmcache/bin/python tools/upstream_suites/run_sglang_storage_tests.py [PYTEST_ARGS]

SGLang's repository keeps its HiCache storage tests out of its releases (no sdist of 0.5.23 on
PyPI; the repository's ``test/registered/hicache/`` tests launch CUDA servers), but the wheel
carries the storage backends' own test files inside the package. This runner takes the one that
tests a backend through the ``HiCacheStorage`` interface alone from the installed release,
checks it against the wheel's ``RECORD``, and runs it with ``sglang_storage_plugin``, which
builds our backend where the file builds Mooncake's. Exit status: pytest's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from obtain import installed_test_file

HERE = Path(__file__).resolve().parent
TEST_FILE = "sglang/srt/mem_cache/storage/mooncake_store/test_mooncake_store.py"


def main(argv: list[str]) -> int:
    source = installed_test_file("sglang", TEST_FILE)
    print(f"upstream: sglang {metadata.version('sglang')} wheel (PyPI), {TEST_FILE} "
          f"== its RECORD's sha256", flush=True)
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, LIFEBOAT_DASHBOARD="0", PYTHONPATH=path)
    with tempfile.TemporaryDirectory(prefix="upstream-run-") as cwd:  # outside the package: not shadowed
        test = Path(cwd) / Path(TEST_FILE).name
        shutil.copy2(source, test)
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "--import-mode=importlib",
               "-p", "sglang_storage_plugin", "--rootdir", cwd, "-rfEx", "-q", str(test), *argv]
        return subprocess.call(cmd, cwd=cwd, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
