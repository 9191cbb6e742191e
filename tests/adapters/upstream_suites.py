"""Run one of tools/upstream_suites' runners (an engine's own tests against our plugin) and
read pytest's summary line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNERS = ROOT / "tools" / "upstream_suites"


def run_upstream(python: Path | str, runner: str, timeout: float = 900) -> tuple[int, dict[str, int], str]:
    """(exit status, {"passed": n, "xfailed": n, ...} from the last summary line, output)."""
    proc = subprocess.run([str(python), str(RUNNERS / runner)], capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    summary = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", summary[-1])} if summary else {}
    return proc.returncode, counts, out
