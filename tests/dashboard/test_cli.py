"""`lifeboatcache dashboard` as an operator runs it: prints the URL with a token once, serves, stops on Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path


def test_dashboard_command_serves_and_stops_on_interrupt(tmp_path: Path) -> None:
    config = tmp_path / "lifeboat.toml"
    config.write_text(f"""
[[tiers]]
name = "nvme"
backend = "file"
capacity_gb = 1
path = "{tmp_path / 'tier'}"

[fallback_local]
path = "{tmp_path / 'fallback'}"
""")
    env = {**os.environ, "LIFEBOAT_METRICS_DIR": str(tmp_path / "spool")}
    env.pop("LIFEBOAT_DASHBOARD_TOKEN", None)
    command = [sys.executable, "-m", "lifeboatcache", "dashboard", "--config", str(config), "--port", "0"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/)#token=(\S+)", line)
        assert match, line
        url, token = match.groups()
        with urllib.request.urlopen(url + "api/config", timeout=10) as reply:
            running = json.loads(reply.read())["config"]
        assert running["tiers"][0]["path"] == str(tmp_path / "tier")
        running["tiers"][0]["capacity_gb"] = 2
        request = urllib.request.Request(url + "api/config", data=json.dumps(running).encode(), method="POST",
                                         headers={"X-Lifeboat-Token": token, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert json.loads(reply.read())["applied"] == ["tier nvme: capacity 1 GB -> 2 GB"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
        assert token not in proc.stderr.read()  # printed once only
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
