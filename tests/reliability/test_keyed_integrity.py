"""Keyed integrity (``integrity = "keyed"``): a writer without the key cannot plant KV.

The attacker here is real: a second cache over the same directory (a party that can write to
the shared export) with the default xxh3 check, or with a key of its own. Its blocks are
perfectly valid xxh3 blocks; only the keyed tag tells them apart.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from lifeboatcache_backend_file.backend import FileBackend, FileConfig
from lifeboatcache_core.chunkfile import FIXED, FIXED_LEN, BlockMeta, build_header
from lifeboatcache_core.errors import ConfigError
from lifeboatcache_core.integrity import ENV_KEYS, BlockSigner, TamperedBlockError

from tests.core.helpers import blobs, file_tier, keys, open_cache

KEY_OLD = "old-secret-0123456789abcdef"
KEY_NEW = "new-secret-fedcba9876543210"


def keyed_tier(path: Path, *accepted: str) -> dict:
    return file_tier(path, integrity="keyed", integrity_keys=list(accepted))


def test_keyed_round_trip_stores_a_tag_and_serves_the_bytes(tmp_path: Path) -> None:
    ks, data = keys(4), blobs(4, 8192)
    with open_cache(tmp_path, keyed_tier(tmp_path / "shared", KEY_NEW)) as cache:
        assert all(cache.put(ks, data))
        out = [bytearray(8192) for _ in ks]
        assert cache.get(ks, out) == [True] * 4
        assert [bytes(o) for o in out] == data
        backend = cache.all_tiers[0].backend
        meta, _ = backend.read_header(ks[0])
        assert meta.mac and meta.mac.startswith("hmac-sha256:")
        assert cache.stats()["nvme"]["tampered_blocks"] == 0


@pytest.mark.parametrize("attacker", ["no key (xxh3 writer)", "a key of its own"])
def test_planted_block_is_a_miss_counted_as_tampered(tmp_path: Path, attacker: str) -> None:
    ks, data = keys(3), blobs(3, 4096)
    shared = tmp_path / "shared"
    with open_cache(tmp_path / "victim0", keyed_tier(shared, KEY_NEW)) as cache:
        assert all(cache.put(ks, data))
    forged = [b"\x66" * 4096] * 3
    attacker_tier = (file_tier(shared) if attacker.startswith("no key")
                     else keyed_tier(shared, "attacker-key-00000000000000"))
    with open_cache(tmp_path / "attacker", attacker_tier) as evil:
        evil.all_tiers[0].backend.put(ks[1], [forged[1]], BlockMeta.new(ks[1], 4096))  # overwrite a real key
        if attacker.startswith("a key"):  # also forge a tag with its own key
            backend = evil.all_tiers[0].backend
            meta = BlockMeta.new(ks[2], 4096)
            meta.mac = BlockSigner(["attacker-key-00000000000000"]).sign(meta, [forged[2]])
            backend.put(ks[2], [forged[2]], meta)
    with open_cache(tmp_path / "victim1", keyed_tier(shared, KEY_NEW)) as cache:
        assert cache.wait_ready(30)
        out = [bytearray(4096) for _ in ks]
        hits = cache.get(ks, out)
        assert hits[0] and bytes(out[0]) == data[0]
        expected_tampered = 1 if attacker.startswith("no key") else 2
        assert hits[1:] == [False, attacker.startswith("no key")]
        if hits[2]:
            assert bytes(out[2]) == data[2]
        stats = cache.stats()["nvme"]
        assert stats["tampered_blocks"] == expected_tampered
        assert stats["corrupt_blocks"] == 0
        assert list((shared / ".bad").rglob("*.lbk")), "tampered blocks are set aside for inspection"


def test_edited_codec_params_with_a_fixed_crc_are_tampered(tmp_path: Path) -> None:
    """An attacker who edits the meta (and recomputes its crc32) cannot keep the tag valid."""
    ks, data = keys(1), blobs(1, 4096)
    shared = tmp_path / "shared"
    with open_cache(tmp_path / "a", keyed_tier(shared, KEY_NEW)) as cache:
        assert all(cache.put(ks, data))
        path = Path(cache.all_tiers[0].backend.path_of(ks[0]))
    raw = path.read_bytes()
    _magic, _v, header_len, _flags, payload_len, _crc = FIXED.unpack_from(raw, 0)
    meta_obj = json.loads(raw[FIXED_LEN:header_len])
    meta_obj["codec_params"] = {"scale": 2.0}
    meta = BlockMeta(**meta_obj)
    header = build_header(meta, payload_len)
    forged = header + raw[header_len:]
    assert zlib.crc32(header[FIXED_LEN:]) == struct.unpack_from("<I", header, 20)[0]
    path.write_bytes(forged)
    with open_cache(tmp_path / "b", keyed_tier(shared, KEY_NEW)) as cache:
        assert cache.wait_ready(30)
        assert cache.get(ks, [bytearray(4096)]) == [False]
        assert cache.stats()["nvme"]["tampered_blocks"] == 1


def test_a_signed_block_moved_to_another_key_is_not_served(tmp_path: Path) -> None:
    ks, data = keys(2), blobs(2, 4096)
    shared = tmp_path / "shared"
    with open_cache(tmp_path / "a", keyed_tier(shared, KEY_NEW)) as cache:
        assert all(cache.put(ks, data))
        backend: FileBackend = cache.all_tiers[0].backend
        Path(backend.path_of(ks[1])).write_bytes(Path(backend.path_of(ks[0])).read_bytes())
    with open_cache(tmp_path / "b", keyed_tier(shared, KEY_NEW)) as cache:
        assert cache.wait_ready(30)
        out = [bytearray(4096), bytearray(4096)]
        assert cache.get(ks, out) == [True, False]
        assert bytes(out[0]) == data[0]


def test_key_rotation_newest_writes_any_listed_key_reads(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    old_ks, new_ks = keys(2), keys(2, start=100)
    old_data, new_data = blobs(2, 4096), blobs(2, 4096)
    with open_cache(tmp_path / "a", keyed_tier(shared, KEY_OLD)) as cache:
        assert all(cache.put(old_ks, old_data))
    with open_cache(tmp_path / "b", keyed_tier(shared, KEY_NEW, KEY_OLD)) as cache:
        assert cache.wait_ready(30)
        out = [bytearray(4096) for _ in old_ks]
        assert cache.get(old_ks, out) == [True, True]
        assert [bytes(o) for o in out] == old_data
        assert all(cache.put(new_ks, new_data))
        new_id = BlockSigner([KEY_NEW]).key_ids[0]
        assert cache.all_tiers[0].backend.read_header(new_ks[0])[0].mac.split(":")[1] == new_id
    with open_cache(tmp_path / "c", keyed_tier(shared, KEY_NEW)) as cache:  # the old key retired
        assert cache.wait_ready(30)
        out = [bytearray(4096) for _ in range(4)]
        assert cache.get([*old_ks, *new_ks], out) == [False, False, True, True]
        assert cache.stats()["nvme"]["tampered_blocks"] == 2


def test_keys_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_KEYS, f"{KEY_NEW}, {KEY_OLD}")
    ks, data = keys(1), blobs(1, 4096)
    with open_cache(tmp_path, file_tier(tmp_path / "t", integrity="keyed")) as cache:
        assert all(cache.put(ks, data))
        meta, _ = cache.all_tiers[0].backend.read_header(ks[0])
    BlockSigner([KEY_NEW]).verify(meta, [data[0]])
    with pytest.raises(TamperedBlockError):
        BlockSigner([KEY_OLD]).verify(meta, [data[0]])


@pytest.mark.parametrize(("keys_given", "needle"), [([], ENV_KEYS), (["short"], "shorter than 16")])
def test_keyed_without_a_usable_key_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       keys_given: list[str], needle: str) -> None:
    monkeypatch.delenv(ENV_KEYS, raising=False)
    with pytest.raises(ConfigError, match=needle):
        open_cache(tmp_path, keyed_tier(tmp_path / "t", *keys_given))


def test_default_blocks_keep_their_format(tmp_path: Path) -> None:
    """xxh3 tiers write no tag: the meta JSON has exactly the fields it had before keyed mode."""
    ks, data = keys(1), blobs(1, 4096)
    with open_cache(tmp_path, file_tier(tmp_path / "t")) as cache:
        assert all(cache.put(ks, data))
        raw = Path(cache.all_tiers[0].backend.path_of(ks[0])).read_bytes()
    header_len = FIXED.unpack_from(raw, 0)[2]
    assert sorted(json.loads(raw[FIXED_LEN:header_len])) == sorted(
        ["namespace", "key", "codec", "codec_params", "raw_len", "dtype", "shape", "axes", "created_at", "tag"])


def test_blake3_tags_verify_and_a_tier_reads_both_algorithms(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    hmac_ks, blake_ks = keys(2), keys(2, start=50)
    hmac_data, blake_data = blobs(2, 4096), blobs(2, 4096)
    with open_cache(tmp_path / "a", keyed_tier(shared, KEY_NEW)) as cache:
        assert all(cache.put(hmac_ks, hmac_data))
    with open_cache(tmp_path / "b", {**keyed_tier(shared, KEY_NEW), "integrity_algorithm": "blake3"}) as cache:
        assert cache.wait_ready(30)
        assert all(cache.put(blake_ks, blake_data))
        assert cache.all_tiers[0].backend.read_header(blake_ks[0])[0].mac.startswith("blake3:")
        out = [bytearray(4096) for _ in range(4)]
        assert cache.get([*hmac_ks, *blake_ks], out) == [True] * 4
        assert [bytes(o) for o in out] == [*hmac_data, *blake_data]
    meta = BlockMeta.new(blake_ks[0], 4096)
    meta.mac = BlockSigner([KEY_NEW], "blake3").sign(meta, [blake_data[0]])
    BlockSigner([KEY_NEW]).verify(meta, [blake_data[0]])  # an hmac-writing tier accepts blake3 tags
    with pytest.raises(TamperedBlockError, match="does not match"):
        BlockSigner([KEY_NEW]).verify(meta, [blake_data[1]])
    with pytest.raises(TamperedBlockError, match="not among the accepted keys"):
        BlockSigner([KEY_OLD], "blake3").verify(meta, [blake_data[0]])


@pytest.fixture(scope="module")
def moto_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from tests.backends.backend_servers import MotoServer

    server = MotoServer(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


def test_a_bucket_writer_without_the_key_cannot_plant_kv_in_s3(tmp_path: Path, moto_server,  # type: ignore[no-untyped-def]
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The threat keyed mode exists for: write access to the shared bucket, no key."""
    import boto3
    from lifeboatcache_core.chunkfile import encode_block

    from tests.backends.conftest import AWS_TEST_ENV

    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    s3 = boto3.client("s3", endpoint_url=moto_server.endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="shared-kv")
    tier = {"name": "s3", "backend": "s3", "capacity_gb": 1, "url": "s3://shared-kv/kv",
            "endpoint_url": moto_server.endpoint, "region": "us-east-1", "manifest": False,
            "integrity": "keyed", "integrity_keys": [KEY_NEW]}
    ks, data = keys(2), blobs(2, 4096)
    with open_cache(tmp_path, tier) as cache:
        assert all(cache.put(ks, data))
        name = cache.all_tiers[0].backend.object_name(ks[1])
    forged = b"".join(bytes(p) for p in encode_block(BlockMeta.new(ks[1], 4096), [b"\x66" * 4096]))
    s3.put_object(Bucket="shared-kv", Key=name, Body=forged)  # a perfectly valid xxh3 block
    unkeyed = {k: v for k, v in tier.items() if not k.startswith("integrity")}
    with open_cache(tmp_path, unkeyed) as cache:  # the threat: without a key, the forgery is served
        out = [bytearray(4096)]
        assert cache.get(ks[1:], out) == [True] and bytes(out[0]) == b"\x66" * 4096
    with open_cache(tmp_path, tier) as cache:
        out = [bytearray(4096), bytearray(4096)]
        assert cache.get(ks, out) == [True, False]
        assert bytes(out[0]) == data[0]
        assert cache.stats()["s3"]["tampered_blocks"] == 1


def test_fsck_keyed_counts_a_planted_block_that_plain_fsck_calls_ok(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    shared = tmp_path / "shared"
    ks, data = keys(3), blobs(3, 4096)
    with open_cache(tmp_path, keyed_tier(shared, KEY_NEW)) as cache:
        assert all(cache.put(ks, data))
    FileBackend(FileConfig(path=shared), tier="evil").put(ks[2], [b"\x66" * 4096], BlockMeta.new(ks[2], 4096))

    def fsck(*args: str, keys_env: str | None = None) -> tuple[int, dict]:
        env = {k: v for k, v in os.environ.items() if k != ENV_KEYS}
        if keys_env is not None:
            env[ENV_KEYS] = keys_env
        proc = subprocess.run([sys.executable, "-m", "lifeboatcache", "fsck", str(shared), "--json", *args],
                              capture_output=True, text=True, env=env, timeout=120)
        return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {"stderr": proc.stderr}

    rc, plain = fsck()
    assert rc == 0 and plain["ok"] == 3, plain
    rc, keyed = fsck("--keyed", keys_env=KEY_NEW)
    assert rc == 1 and keyed["ok"] == 2 and keyed["corrupt"] == 1, keyed
    assert fsck("--keyed")[0] == 2, "--keyed without keys is refused, naming the variable"


def test_a_keyed_coding_tier_decodes_nothing_of_a_planted_block(tmp_path: Path) -> None:
    """A coding tier with o_direct decodes a lossless block piece by piece as it is read; a keyed
    one must not: not a byte of a planted block reaches the caller's buffer before its MAC fails."""
    import numpy as np
    from lifeboatcache_core.abc import KVLayout

    layout = KVLayout("bfloat16", (2, 8, 256, 4, 64), ("kv", "layer", "token", "head", "dim"))
    x = np.random.default_rng(3).standard_normal(2 * 8 * 256 * 4 * 64).astype(np.float32)
    forged = (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # 2 MiB of bf16 KV: a payload of > 1 MiB
    ks, shared = keys(1), tmp_path / "shared"
    coded = {"codec": "lossless", "o_direct": True}
    with open_cache(tmp_path / "victim0", keyed_tier(shared, KEY_NEW) | coded) as cache:
        assert all(cache.put(ks, [bytes(len(forged))], layout=layout))
    with open_cache(tmp_path / "attacker", file_tier(shared) | coded) as evil:
        evil.all_tiers[0].discard(ks)  # the attacker's own cache replaces the block with its KV
        assert all(evil.put(ks, [forged], layout=layout))
    with open_cache(tmp_path / "victim1", keyed_tier(shared, KEY_NEW) | coded) as cache:
        assert cache.wait_ready(30)
        dest = bytearray(b"\xee") * len(forged)
        assert cache.get(ks, [dest]) == [False]
        assert dest == bytearray(b"\xee") * len(forged), "a planted block was decoded before its MAC was checked"
        assert cache.stats()["nvme"]["tampered_blocks"] == 1
