"""What the two runners share: obtain a release's tests, run pytest on them with our plugin."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from obtain import DEFAULT_CACHE, obtain_tests, upstream_commit

HERE = Path(__file__).resolve().parent


def run_suite(*, dist: str, installed_dist: str, package: str, checked: str, plugin: str,
              test_files: list[str], argv: list[str] | None = None) -> int:
    """Obtain ``dist``'s tests for the installed version, run ``test_files`` against our plugin."""
    parser = argparse.ArgumentParser(description=f"{dist}'s own tests against our plugin")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the release's tests are kept")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    version = metadata.version(installed_dist)
    module = __import__(package)
    tree = obtain_tests(dist, version, package, Path(module.__file__).parent, checked, args.cache)
    commit = upstream_commit(tree)
    print(f"upstream: {dist} {version} sdist (PyPI), commit {commit or 'not named'}, "
          f"{(tree / 'SOURCE').read_text().strip()} == installed {installed_dist}; tests from {tree}", flush=True)
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, LIFEBOAT_DASHBOARD="0", PYTHONPATH=path)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--noconftest", "--import-mode=importlib",
           "-p", plugin, "--rootdir", str(tree), "-rfEx", "-q",
           *[str(tree / f) for f in test_files], *args.pytest_args]
    with tempfile.TemporaryDirectory(prefix="upstream-run-") as cwd:  # nothing on sys.path shadows the engine
        return subprocess.call(cmd, cwd=cwd, env=env)
