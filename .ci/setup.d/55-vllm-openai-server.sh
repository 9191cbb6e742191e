#!/usr/bin/env bash
# vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`, used by `lifeboatcache grid`
# and `make demo`) imports model_hosting_container_standards unconditionally; the lean engine
# install (50-engine.sh) leaves it out. It is small and pure Python (+ supervisor). Idempotent.
set -euo pipefail
VENV="${VENV:-.venv}"
if ! "$VENV/bin/python" -c "import model_hosting_container_standards" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install -q "model-hosting-container-standards>=0.1.16"
fi
