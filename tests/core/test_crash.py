"""SIGKILL a writer at random moments: never a corrupt block, partials swept, fsync keeps acks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from lifeboatcache_backend_file.backend import FileBackend, FileConfig

from .crash import crash_payload, kill_writer_once, parse_crash_key


@pytest.mark.parametrize(("durability", "rounds"), [("none", 40), ("fsync", 200)])
def test_sigkill_mid_write(tmp_path: Path, durability: str, rounds: int) -> None:
    tier = tmp_path / "tier"
    config = {
        "tiers": [{"name": "nvme", "backend": "file", "capacity_gb": 1, "path": str(tier), "durability": durability}],
        "fallback_local": {"enabled": False},
    }
    rng = random.Random(1234)
    acked_total = 0
    for seed in range(rounds):
        crash = kill_writer_once(config, seed, rng)
        acked_total += len(crash.acknowledged)
        backend = FileBackend(FileConfig(path=tier), tier="check")  # the next open
        stored = dict(backend.scan())  # sweeps the dead writer's .partial files
        assert not list(tier.rglob("*.partial")), "partials of a dead writer must be swept on open"
        for key in stored:
            s, i = parse_crash_key(key)
            _, payload = backend.read(key)  # raises CorruptBlockError if a torn block were visible
            assert bytes(payload) == crash_payload(s, i)
        if durability == "fsync":
            for i in crash.acknowledged:
                key_seen = [k for k in stored if parse_crash_key(k) == (seed, i)]
                assert key_seen, f"round {seed}: acknowledged block {i} is gone after the kill"
    assert acked_total >= rounds // 2, "the writer must make progress between kills for the test to mean anything"
