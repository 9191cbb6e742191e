"""The storage demo must keep working: it is the quickest end-to-end smoke test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lifeboatcache.storage_demo import run_demo


def test_storage_demo_survives_restart(tmp_path: Path) -> None:
    assert run_demo(tmp_path) == 0
    assert any((tmp_path / "tier").rglob("*.lbk"))


def test_storage_demo_cli() -> None:
    proc = subprocess.run([sys.executable, "-m", "lifeboatcache", "demo", "--storage-only"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "every session came back after the restart" in proc.stdout
