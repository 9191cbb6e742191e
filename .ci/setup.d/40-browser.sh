#!/usr/bin/env bash
# Browser for the dashboard's real-browser test (tests/dashboard/): Debian's chromium, driven by
# Playwright's Python package through executable_path. Playwright must never download a browser
# (it cannot here), so PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD is set and `playwright install` is never run.
set -euo pipefail
VENV="${VENV:-.venv}"
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
if ! "$VENV/bin/python" -c "import playwright" >/dev/null 2>&1; then
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/python" -m pip install -q "playwright>=1.44"
fi
