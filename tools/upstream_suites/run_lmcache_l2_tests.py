"""LMCache's own L2-adapter contract tests (tests/v1/distributed/test_mock_l2_adapter.py) against
LifeboatL2Adapter.

    .venv-sglang-lmcache/bin/python tools/upstream_suites/run_lmcache_l2_tests.py [--cache DIR] [-- PYTEST_ARGS]

Fetches the tests from the installed LMCache version's sdist on PyPI (``obtain.py``), checks
that the sdist's ``lmcache/v1/distributed`` equals the installed one, and runs the file with
``lmcache_l2_plugin``, which builds our adapter where LMCache's tests build its mock adapter.
Exit status: pytest's.
"""

from __future__ import annotations

import sys

from _runner import run_suite

TEST_FILES = ["tests/v1/distributed/test_mock_l2_adapter.py"]

if __name__ == "__main__":
    sys.exit(run_suite(dist="lmcache", installed_dist="lmcache", package="lmcache", checked="v1/distributed",
                       plugin="lmcache_l2_plugin", test_files=TEST_FILES))
