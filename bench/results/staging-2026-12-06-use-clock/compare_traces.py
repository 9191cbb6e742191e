"""Whether two ``bench traces --out`` reports differ in anything but CPU seconds.

usage: .venv/bin/python bench/results/staging-2026-12-06-use-clock/compare_traces.py A.json B.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b or path.endswith("cpu_seconds") else [f"{path}: {a!r} != {b!r}"]


if __name__ == "__main__":
    with open(sys.argv[1]) as fa, open(sys.argv[2]) as fb:
        found = differences(json.load(fa), json.load(fb))
    print("\n".join(found) if found else "equal but for cpu_seconds")
