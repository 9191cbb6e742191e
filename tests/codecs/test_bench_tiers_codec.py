"""``bench tiers --codec``: a coded tier reports logical GB/s beside the raw disk of the same run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lifeboatcache_core.abc import KVLayout

from lifeboatcache.bench.tiers import run_bench

AXES = ("kv", "layer", "token", "head", "dim")
SHAPE = (2, 2, 64, 2, 64)  # 64 KiB of bf16 per block, a multiple of 4096


def _kv_blocks(n: int) -> tuple[list[bytes], KVLayout]:
    """bf16 values with a per-channel scale, like K and V: compressible the way real KV is."""
    rng = np.random.default_rng(5)
    out = []
    for _ in range(n):
        x = (rng.standard_normal(SHAPE) * rng.uniform(0.1, 4, SHAPE[-1])).astype(np.float32)
        out.append((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
    return out, KVLayout("bfloat16", SHAPE, AXES)


def test_lossless_tier_reports_logical_and_stored_speeds(tmp_path: Path) -> None:
    kv = _kv_blocks(4)
    result = run_bench(tmp_path / "coded", 0, 8 * len(kv[0][0]), 2, codec="lossless", kv=kv)
    assert result["codec"] == "lossless" and result["data"] == "kv" and result["blocks"] == 8
    assert 0 < float(result["stored_per_raw"]) < 0.8  # the bytes round-trip is checked inside run_bench
    for side in ("write", "read"):
        logical, stored = float(result[f"tier_{side}_GBps"]), float(result[f"tier_{side}_stored_GBps"])
        assert stored == pytest.approx(logical * float(result["stored_per_raw"]), rel=0.01) and stored < logical
        assert float(result[f"raw_{side}_GBps"]) > 0


def test_without_a_codec_the_tier_stores_the_raw_bytes(tmp_path: Path) -> None:
    kv = _kv_blocks(2)
    result = run_bench(tmp_path / "plain", 0, 4 * len(kv[0][0]), 2, kv=kv)
    assert result["codec"] == "none"
    # the raw bytes plus the block's header and trailer, padded to O_DIRECT pages: at most two more pages
    assert 1.0 < float(result["stored_per_raw"]) <= 1.0 + 2 * 4096 / len(kv[0][0]) + 1e-3, result["stored_per_raw"]
