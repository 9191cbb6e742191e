"""Tenant isolation: a per-request salt is part of the namespace, so identical prompts of two
tenants never share blocks (no hit, no prefix-length side channel), while unsalted requests
still share among themselves."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lifeboatcache_core.keys import Namespace

from tests.core.helpers import blobs, file_tier, open_cache

BASE = Namespace(engine="vllm", model="SmolLM2-135M", weights_fingerprint="w1", dtype="bfloat16",
                 block_tokens=256, digest_bytes=32)


def prompt_block_hashes(prompt: str, n: int) -> list[bytes]:
    """The engine's own chunk hashes of a prompt (identical across tenants by construction)."""
    return [hashlib.sha256(f"{prompt}|{i}".encode()).digest() for i in range(n)]


def test_two_tenants_with_identical_prompts_never_share(tmp_path: Path) -> None:
    alice, bob = BASE.for_tenant("salt-of-alice"), BASE.for_tenant("salt-of-bob")
    assert len({BASE.id, alice.id, bob.id}) == 3
    assert alice.id == BASE.for_tenant("salt-of-alice").id, "a tenant's namespace is stable across processes"
    hashes = prompt_block_hashes("You are a helpful assistant. Summarise this contract.", 4)
    alice_data = blobs(4, 4096)
    with open_cache(tmp_path, {"name": "dram", "backend": "dram", "capacity_gb": 0.01},
                    file_tier(tmp_path / "nvme")) as cache:
        for ns in (alice, bob, BASE):
            cache.register_namespace(ns)
        alice_keys = [alice.key(h) for h in hashes]
        bob_keys = [bob.key(h) for h in hashes]
        assert all(cache.put(alice_keys, alice_data))
        assert cache.contains_prefix(alice_keys) == 4
        assert cache.contains_prefix(bob_keys) == 0
        assert cache.exists(bob_keys) == [False] * 4
        out = [bytearray(4096) for _ in hashes]
        assert cache.get(bob_keys, out) == [False] * 4
        assert all(bytes(o) == bytes(4096) for o in out), "nothing of alice's was copied into bob's buffers"
        assert cache.contains_prefix([BASE.key(h) for h in hashes]) == 0, "unsalted requests do not see salted KV"
        # bob computes and stores his own; both are served their own bytes
        bob_data = blobs(4, 4096)
        assert all(cache.put(bob_keys, bob_data))
        for ks, want in ((alice_keys, alice_data), (bob_keys, bob_data)):
            out = [bytearray(4096) for _ in hashes]
            assert cache.get(ks, out) == [True] * 4
            assert [bytes(o) for o in out] == want


def test_salt_is_not_written_in_clear(tmp_path: Path) -> None:
    salt = "tenant-secret-salt-4242"
    ns = BASE.for_tenant(salt)
    with open_cache(tmp_path, file_tier(tmp_path / "nvme")) as cache:
        ns_id = cache.register_namespace(ns)
    described = (tmp_path / "nvme" / ns_id / "NAMESPACE.json").read_text()
    assert salt not in described
    assert json.loads(described)["extra"]["tenant"] == ns.extra["tenant"]


def test_no_salt_keeps_the_shared_namespace() -> None:
    assert BASE.for_tenant(None) is BASE
    assert BASE.for_tenant("") is BASE
    assert BASE.for_tenant(b"x").id == BASE.for_tenant("x").id
