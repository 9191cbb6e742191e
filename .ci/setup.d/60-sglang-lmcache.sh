#!/usr/bin/env bash
# SGLang 0.5.23 and LMCache 0.5.6 for the sglang/lmcache adapters' engine-side tests, in their
# own venv (.venv-sglang-lmcache): LMCache pins numpy<=2.2.6, prometheus_client<=0.24.1 and
# pulls CUDA-only wheels (cupy, cuda-python), which must not move the shared .venv that
# vLLM and the other packages run in. SGLang is installed without its dependencies (they
# would bring torch 2.14.1 CUDA, torchvision, flashinfer, triton): only the few pure-Python
# packages its HiCache storage and host-pool modules import. tests/adapters/{sglang,lmcache}
# run their engine-side checks through this venv's python. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
ALT=.venv-sglang-lmcache
PY="$ALT/bin/python"
WANT="torch==2.13.0 lmcache==0.5.6 sglang==0.5.23 r1"
STAMP="$ALT/.engines-stamp"
if ! { [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && "$PY" -c "import torch, lmcache, sglang" 2>/dev/null; }; then
    test -x "$PY" || python3 -m venv "$ALT"
    "$PY" -m pip install -q --upgrade pip
    "$PY" -m pip install -q torch==2.13.0
    "$PY" -m pip install -q lmcache==0.5.6 torch==2.13.0
    "$PY" -m pip install -q --no-deps sglang==0.5.23 compressed-tensors==0.18.0 apache-tvm-ffi==0.1.11 gguf
    "$PY" -m pip install -q orjson pybase64 pillow IPython dill sentencepiece loguru torch==2.13.0
    "$PY" - <<'PYEOF'
import importlib.metadata as md
import sys

import torch

bad = []
for name in ("torchvision", "torchaudio", "torchcodec", "triton"):
    try:
        md.version(name)
        bad.append(name)
    except md.PackageNotFoundError:
        pass
if not torch.__version__.startswith("2.13.0") or bad:
    sys.exit(f"60-sglang-lmcache.sh: broken install: torch {torch.__version__}, unwanted {bad}")
PYEOF
    echo "$WANT" > "$STAMP"
fi
# Our packages, editable, every time (cheap): the engine-side tests import them from here.
"$PY" -m pip install -q pytest pytest-timeout "hypothesis>=6.100" -e lifeboatcache_core -e backends/file -e adapters/sglang -e adapters/lmcache
