"""`lifeboatcache bench tiers --backend ...` runs against the shared-tier backends."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import boto3
import pytest
from typer.testing import CliRunner

from lifeboatcache.cli import app
from tests.backends.backend_servers import MotoServer

SMALL = ["--block-bytes", str(256 * 1024), "--total-bytes", str(1024 * 1024), "--threads", "2", "--json"]


def bench(tmp_path: Path, *args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, ["bench", "tiers", "--path", str(tmp_path), *SMALL, *args])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output.strip().splitlines()[-1])
    assert out["blocks"] == 4 and out["tier_write_GBps"] > 0 and out["tier_read_GBps"] > 0
    return out


def test_bench_nfs_on_a_local_path(tmp_path: Path) -> None:
    assert bench(tmp_path, "--backend", "nfs", "--option", "require_nfs_mount=false")["backend"] == "nfs"


def test_bench_fsspec_memory(tmp_path: Path) -> None:
    out = bench(tmp_path, "--backend", "fsspec", "--option", f"url=memory://bench-{secrets.token_hex(4)}")
    assert out["backend"] == "fsspec"


def test_bench_s3_on_moto(tmp_path: Path, moto: MotoServer, aws_env: None) -> None:
    bucket = f"bench-{secrets.token_hex(4)}"
    boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    out = bench(tmp_path, "--backend", "s3", "--option", f"url=s3://{bucket}/bench",
                "--option", f"endpoint_url={moto.endpoint}", "--option", "region=us-east-1")
    assert out["backend"] == "s3"


def test_bad_option_says_how_to_write_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "tiers", "--path", str(tmp_path), *SMALL, "--backend", "fsspec",
                                      "--option", "novalue"])
    assert result.exit_code != 0 and "KEY=VALUE" in result.output


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # typer's error box must not wrap the message


def test_file_tier_blocks_spread_over_shard_folders_as_engine_keys_do(tmp_path: Path) -> None:
    """Engines' block keys are uniform hashes; sequential ones would put every block in one
    folder and charge the tier side a directory-lock cost no engine causes."""
    from lifeboatcache.bench.tiers import run_bench

    run_bench(tmp_path, 256 * 1024, 16 * 256 * 1024, 2)
    shards = [d for d in (tmp_path / "tier" / "bench").iterdir() if d.is_dir()]
    assert len(shards) >= 8, sorted(d.name for d in shards)
