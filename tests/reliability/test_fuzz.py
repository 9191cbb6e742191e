"""Untrusted input, fuzzed with hypothesis: block files, manifest rows, config files, dashboard
requests, keys and namespaces. The rules: no crash (only the documented error types), no
wrong bytes served, no allocation driven by a length field beyond the bytes present, no path
outside the tier's directory. Example counts are small so CI stays bounded; the atheris run
of the block parser lives in ``atheris_block_parser.py`` (driven by the last test here).
"""

from __future__ import annotations

import json
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from lifeboatcache_backend_file.backend import FileBackend, FileConfig
from lifeboatcache_core.chunkfile import (
    FIXED,
    FIXED_LEN,
    MAGIC,
    TRAILER_LEN,
    VERSION,
    BlockMeta,
    build_header,
    decode_block,
    encode_block,
    read_block_stream,
)
from lifeboatcache_core.config import LifeboatConfig, load_config_dict, parse_text
from lifeboatcache_core.errors import ConfigError, CorruptBlockError, InvalidKeyError
from lifeboatcache_core.keys import BlockKey, Namespace, check_key
from lifeboatcache_core.manifest import Manifest, sqlite_url
from lifeboatcache_core.testing.streams import byte_stream
from starlette.testclient import TestClient

from lifeboatcache.dashboard.server import REDACTED, create_app
from tests.core.helpers import file_tier, open_cache

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW_FUZZ = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])
KEY = BlockKey("fuzzns", b"\x11" * 32)
PAYLOAD = bytes(range(256)) * 8


def valid_block(payload: bytes = PAYLOAD, key: BlockKey = KEY) -> bytes:
    return b"".join(bytes(p) for p in encode_block(BlockMeta.new(key, len(payload)), [payload]))


def bytes_of(result: tuple[BlockMeta, memoryview]) -> bytes:
    return bytes(result[1])


# ----------------------------------------------------------------------------- block files


mutations = st.lists(st.tuples(st.integers(0, len(valid_block()) + 64), st.integers(0, 255)), min_size=1, max_size=6)


def mutate(block: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    data = bytearray(block)
    for pos, value in edits:
        if pos < len(data):
            data[pos] = value
        else:
            data.append(value)
    return bytes(data[:cut] if cut is not None else data)


@FUZZ
@given(edits=mutations, cut=st.none() | st.integers(0, len(valid_block())))
def test_a_mutated_block_is_corrupt_or_exactly_the_original(edits: list[tuple[int, int]], cut: int | None) -> None:
    data = mutate(valid_block(), edits, cut)
    assume(data != valid_block())
    try:
        meta, payload = decode_block(data, KEY)
    except CorruptBlockError:
        return
    assert bytes(payload) == PAYLOAD and meta.key == KEY.hex  # only bits nobody reads were touched


@FUZZ
@given(data=st.binary(max_size=2048))
def test_random_bytes_never_crash_the_parsers(data: bytes) -> None:
    with pytest.raises(CorruptBlockError):
        decode_block(data, KEY)
    with pytest.raises((CorruptBlockError, OSError)):
        read_block_stream(byte_stream(data), len(data), KEY)


@FUZZ
@given(header_len=st.integers(0, 0xFFFF), payload_len=st.integers(0, 2**64 - 1), flags=st.integers(0, 2**32 - 1),
       tail=st.binary(max_size=256))
def test_length_fields_never_drive_allocation(header_len: int, payload_len: int, flags: int, tail: bytes) -> None:
    """A header claiming exabytes is rejected with no allocation beyond the bytes present."""
    data = FIXED.pack(MAGIC, VERSION, header_len, flags, payload_len, 0) + tail
    tracemalloc.start()
    try:
        with pytest.raises((CorruptBlockError, OSError)):
            decode_block(data, KEY)
        with pytest.raises((CorruptBlockError, OSError)):
            read_block_stream(byte_stream(data), len(data), KEY)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, f"{peak} bytes allocated for a {len(data)}-byte block"


@SLOW_FUZZ
@given(edits=mutations, cut=st.none() | st.integers(0, len(valid_block())))
def test_file_backend_reads_damaged_files_as_corrupt_or_exact(tmp_path: Path, edits: list[tuple[int, int]],
                                                              cut: int | None) -> None:
    backend = FileBackend(FileConfig(path=tmp_path / "tier"), tier="fuzz")
    backend.put(KEY, [PAYLOAD], BlockMeta.new(KEY, len(PAYLOAD)))
    path = Path(backend.path_of(KEY))
    path.write_bytes(mutate(path.read_bytes(), edits, cut))
    for dest in (None, memoryview(bytearray(len(PAYLOAD)))):
        try:
            result = backend.read(KEY, dest)
        except CorruptBlockError:
            continue
        assert bytes_of(result) == PAYLOAD


# ----------------------------------------------------------------------------- keys and namespaces


hostile_names = st.sampled_from(["..", ".", "../outside", "a/b", "/etc", "x\0y", "", "ns\n", "..\\..", "é"]) | st.text(
    max_size=80)


@FUZZ
@given(namespace=hostile_names, digest=st.binary(max_size=80))
def test_keys_never_name_a_path_outside_the_tier(tmp_path: Path, namespace: str, digest: bytes) -> None:
    root = tmp_path / "tier"
    backend = FileBackend(FileConfig(path=root), tier="fuzz")
    try:
        key = BlockKey(namespace, digest)
    except InvalidKeyError:
        return
    path = Path(backend.path_of(key)).resolve()
    assert path.is_relative_to(root.resolve() / key.namespace), path
    assert "\n" not in key.namespace and "/" not in key.namespace


@FUZZ
@given(salt=st.text(max_size=200) | st.binary(max_size=200), model=st.text(max_size=100))
def test_tenant_namespaces_are_always_valid_ids(salt: str | bytes, model: str) -> None:
    ns = Namespace(engine="vllm", model=model).for_tenant(salt)
    check_key(ns.key(b"\x01" * 32))
    if salt:
        raw = salt.encode() if isinstance(salt, str) else salt
        assert raw.hex() not in json.dumps(ns.describe()) or len(raw) < 4


# ----------------------------------------------------------------------------- manifest rows


row_values = st.fixed_dictionaries({
    "namespace": st.sampled_from(["fuzzns", "../outside", "..", "a/b", "", "x" * 100]) | st.integers() | st.none(),
    "digest": st.binary(max_size=80) | st.text(max_size=20) | st.integers(),
    "size": st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=5),
    "stored_size": st.integers(-(2**40), 2**40) | st.floats(allow_nan=True) | st.text(max_size=5),
})


INSERT_ROW = "INSERT OR REPLACE INTO lifeboat_blocks VALUES ('nvme', ?, ?, ?, ?, 'none@1', 0, 0, 0, NULL)"


@SLOW_FUZZ
@given(rows=st.lists(row_values, max_size=8))
def test_hostile_manifest_rows_never_escape_the_tier_or_crash_recovery(tmp_path: Path,
                                                                       rows: list[dict[str, Any]]) -> None:
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))  # a fresh tier per example
    root = tmp_path / "tier"
    root.mkdir(parents=True, exist_ok=True)
    # a file a traversal row would name: evicting that "block" must not delete it
    sentinel_digest = b"\x22" * 32
    sentinel = tmp_path / "outside" / "22" / "22" / f"{sentinel_digest.hex()}.lbk"
    sentinel.parent.mkdir(parents=True, exist_ok=True)
    sentinel.write_bytes(b"not yours")
    Manifest(sqlite_url(root / "manifest.sqlite"), "nvme").close()
    with sqlite3.connect(root / "manifest.sqlite") as db:
        rows = [*rows, {"namespace": "../outside", "digest": sentinel_digest, "size": 10, "stored_size": 10}]
        for row in rows:
            try:  # whatever the database itself accepts (NOT NULL, 64-bit integers are its own checks)
                db.execute(INSERT_ROW, (row["namespace"], row["digest"], row["size"], row["stored_size"]))
            except (sqlite3.IntegrityError, OverflowError):
                continue
    with open_cache(tmp_path, file_tier(root, capacity_gb=64 * 1024 / 1024**3)) as cache:
        assert cache.wait_ready(30)
        tier = cache.all_tiers[0]
        assert tier.up, tier.reason
        for key in tier.index:
            check_key(key)
        assert tier.used >= 0
        data = [os.urandom(8192) for _ in range(12)]  # more than the capacity: eviction runs
        ks = [BlockKey("fuzzns", i.to_bytes(4, "big") * 8) for i in range(12)]
        assert all(cache.put(ks, data))
        out = [bytearray(8192) for _ in ks]
        for hit, buf, want in zip(cache.get(ks, out), out, data, strict=True):
            assert not hit or bytes(buf) == want
    assert sentinel.read_bytes() == b"not yours"


# ----------------------------------------------------------------------------- config files


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
config_keys = st.sampled_from(["tiers", "promote", "fallback_local", "engine", "dashboard", "backend", "path",
                               "capacity_gb", "codec", "integrity", "integrity_keys", "name", "manifest_url"])


@FUZZ
@given(text=st.text(max_size=400), fmt=st.sampled_from(["toml", "yaml"]))
def test_config_text_is_parsed_or_refused_with_a_config_error(text: str, fmt: str) -> None:
    try:
        data = parse_text(text, fmt)  # type: ignore[arg-type]
    except ConfigError:
        return
    try:
        assert isinstance(load_config_dict(data), LifeboatConfig)
    except ConfigError:
        pass


@FUZZ
@given(data=st.dictionaries(config_keys, json_values, max_size=5),
       tier=st.dictionaries(config_keys, json_values, max_size=6))
def test_config_dicts_are_valid_or_refused_with_a_config_error(tmp_path: Path, data: dict[str, Any],
                                                               tier: dict[str, Any]) -> None:
    data = {**data, "tiers": [{"backend": "file", "capacity_gb": 1, "path": str(tmp_path), **tier}]}
    try:
        config = load_config_dict(data)
    except ConfigError as exc:
        assert str(exc)
        return
    assert isinstance(config, LifeboatConfig)


# ----------------------------------------------------------------------------- dashboard requests

TOKEN = "fuzz-token-0123456789abcdef"
KEYED_SECRET = "keyed-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("dash")
    cache = open_cache(tmp, file_tier(tmp / "tier", integrity="keyed", integrity_keys=[KEYED_SECRET]))
    client = TestClient(create_app(cache, token=TOKEN, spool=tmp / "spool", allowed_hosts=["127.0.0.1"]),
                        base_url="http://127.0.0.1")
    yield client, cache
    cache.close()


@SLOW_FUZZ
@example(body={"tiers": True}, raw=b"", token=None)  # found by CI: iterated before validation (a 500)
@example(body={"tiers": [{"integrity_keys": True}]}, raw=b"", token=None)
@given(body=json_values | st.dictionaries(config_keys, json_values, max_size=4), raw=st.binary(max_size=200),
       token=st.none() | st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), max_size=40))
def test_dashboard_requests_never_fail_with_a_server_error(dashboard: Any, body: Any, raw: bytes,
                                                           token: str | None) -> None:
    client, cache = dashboard
    before = cache.config
    headers = {"X-Lifeboat-Token": token} if token else {}
    for path in ("/api/config/validate", "/api/config"):
        for content in (json.dumps(body).encode(), raw):
            response = client.post(path, content=content, headers={**headers, "content-type": "application/json"})
            assert response.status_code < 500, response.text
            if path == "/api/config" and token != TOKEN:
                assert response.status_code in (401, 403)
    assert cache.config is before, "no config was applied without the token"
    for path in ("/api/config", "/api/stats", "/metrics", "/api/history"):
        assert client.get(path).status_code == 200


def test_dashboard_never_shows_integrity_keys(dashboard: Any) -> None:
    client, _cache = dashboard
    text = client.get("/api/config").text
    assert KEYED_SECRET not in text
    shown = client.get("/api/config").json()["config"]
    assert shown["tiers"][0]["integrity_keys"] == [REDACTED]
    # the page posts the redacted config back unchanged: the running keys are kept
    response = client.post("/api/config/validate", json=shown)
    assert response.status_code == 200, response.text


# ----------------------------------------------------------------------------- atheris


def test_atheris_block_parser_run(tmp_path: Path) -> None:
    """Coverage-guided fuzzing of the block parsers (bounded run; atheris is a test requirement)."""
    script = Path(__file__).with_name("atheris_block_parser.py")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    made_before = set(Path(tempfile.gettempdir()).glob("lifeboat-atheris-*"))
    proc = subprocess.run([sys.executable, str(script), str(corpus), "-runs=30000", "-max_len=4096", "-seed=1",
                           f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Done 30000 runs" in proc.stderr
    # seeded with the valid block, and the corpus is the test's own: each run of the suite left one in /tmp
    assert (corpus / "valid-block").is_file()
    assert set(Path(tempfile.gettempdir()).glob("lifeboat-atheris-*")) == made_before


def test_fixed_header_layout_is_what_the_fuzzers_assume() -> None:
    assert FIXED_LEN == 24 and TRAILER_LEN == 28
    assert struct.unpack_from("<4s", valid_block())[0] == MAGIC


@SLOW_FUZZ
@given(names=st.lists(hostile_names.filter(lambda n: n and "/" not in n and "\0" not in n and n not in (".", "..")),
                      min_size=1, max_size=4))
def test_listing_a_tier_yields_only_valid_keys(tmp_path: Path, names: list[str]) -> None:
    """Directories someone else created in a shared tier never become keys with unsafe namespaces."""
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    for name in names:
        shard = root / name / "01" / "01"
        shard.mkdir(parents=True, exist_ok=True)
        (shard / f"{'01' * 8}.lbk").write_bytes(b"junk")
    for key in FileBackend(FileConfig(path=root), tier="fuzz").list_keys():
        check_key(key)


def test_a_store_lying_about_the_block_size_cannot_drive_allocation() -> None:
    """An object store reports 1 TiB and a valid header claims it: we allocate what arrives."""
    claimed = 2**40
    header = build_header(BlockMeta.new(KEY, claimed), claimed)
    data = header + bytes(3 * 2**20)  # then the stream ends
    tracemalloc.start()
    try:
        with pytest.raises(OSError, match="ended"):
            read_block_stream(byte_stream(data), len(header) + claimed + TRAILER_LEN, KEY)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20
