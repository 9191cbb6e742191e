"""Run engine-side checks in .venv-sglang-lmcache, the venv that holds SGLang and LMCache.

LMCache 0.5.6 pins numpy<=2.2.6 and prometheus_client<=0.24.1 and pulls CUDA-only wheels;
SGLang needs stand-ins for triton and torchvision. Neither may move the shared .venv that
vLLM runs in, so .ci/setup.d/60-sglang-lmcache.sh builds a second venv and the checks
(``check_*.py`` files, never collected by the main run) run there under pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = ROOT / ".venv-sglang-lmcache" / "bin" / "python"


def run_checks(directory: Path, *args: str, timeout: float = 600) -> tuple[int, str]:
    """Run ``check_*.py`` under ``directory`` with the engine venv's pytest; return (passed, output)."""
    assert ENGINE_PYTHON.exists(), (
        f"{ENGINE_PYTHON} is missing: run `make setup` (it runs .ci/setup.d/60-sglang-lmcache.sh)"
    )
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [str(ENGINE_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "python_files=check_*.py",
         "-W", "ignore::DeprecationWarning", "-W", "ignore::UserWarning", str(directory), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )
    output = proc.stdout + proc.stderr
    sys.stdout.write(output)  # shown by pytest on failure
    assert proc.returncode == 0, f"engine-side checks failed (rc {proc.returncode}):\n{output[-6000:]}"
    match = re.search(r"(\d+) passed", output)
    return (int(match.group(1)) if match else 0), output
