"""The built-ins run the same contract tests as every third-party plugin."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from lifeboatcache_backend_file.backend import FileBackend, FileConfig
from lifeboatcache_core.builtin.dram import DramBackend
from lifeboatcache_core.builtin.lru import LRUPolicy
from lifeboatcache_core.builtin.none_codec import NoneCodec
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.manifest import Manifest, sqlite_url
from lifeboatcache_core.testing import (
    BackendContract,
    ClaimedSizeContract,
    CodecContract,
    CorruptionContract,
    ManifestStoreContract,
    PolicyContract,
    RecoveryContract,
    RecoveryHelperContract,
    backend_state_machine,
    claiming_block,
)


def file_backend(tmp_path: Path, **options: object) -> FileBackend:
    return FileBackend(FileConfig(path=tmp_path / "tier", **options), tier="nvme")


class _FileDamage:
    def damage(self, backend: FileBackend, k: BlockKey, mutate: Callable[[bytes], bytes]) -> None:
        path = backend.path_of(k)
        with open(path, "rb") as fh:
            raw = fh.read()
        with open(path, "wb") as fh:
            fh.write(mutate(raw))

    def make_claiming_backend(self, tmp_path: Path, k: BlockKey, claimed: int) -> FileBackend:
        """A 3 MiB block file whose header claims ``claimed`` bytes (the file's size cannot lie)."""
        backend = self.make_backend(tmp_path)  # type: ignore[attr-defined]
        path = Path(backend.path_of(k))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(claiming_block(k, claimed, 3 * 2**20)[0])
        return backend


class TestFileBackend(_FileDamage, RecoveryHelperContract, BackendContract, CorruptionContract, ClaimedSizeContract):
    def make_backend(self, tmp_path: Path) -> FileBackend:
        return file_backend(tmp_path)


class TestFileBackendFsync(BackendContract):
    def make_backend(self, tmp_path: Path) -> FileBackend:
        return file_backend(tmp_path, durability="fsync")


class TestFileBackendDirect(_FileDamage, RecoveryHelperContract, BackendContract, CorruptionContract,
                            ClaimedSizeContract):
    def make_backend(self, tmp_path: Path) -> FileBackend:
        return file_backend(tmp_path, o_direct=True)


class TestFileRecovery(RecoveryContract):
    def tier_options(self, tmp_path: Path) -> dict[str, object]:
        return {"backend": "file", "path": str(tmp_path / "tier")}


class TestFileDirectRecovery(RecoveryContract):
    def tier_options(self, tmp_path: Path) -> dict[str, object]:
        return {"backend": "file", "path": str(tmp_path / "tier"), "o_direct": True}


class TestDramBackend(BackendContract):
    def make_backend(self, tmp_path: Path) -> DramBackend:
        return DramBackend(tier="dram")


class TestLRU(PolicyContract):
    def make_policy(self, seed: int = 0) -> LRUPolicy:
        return LRUPolicy(seed=seed)


class TestNoneCodec(CodecContract):
    def make_codec(self) -> NoneCodec:
        return NoneCodec()


TestFileModel = backend_state_machine(lambda d: file_backend(d)).TestCase
TestFileDirectModel = backend_state_machine(lambda d: file_backend(d, o_direct=True), max_examples=10).TestCase
TestDramModel = backend_state_machine(lambda d: DramBackend(tier="dram")).TestCase


def test_lru_evicts_least_recently_used() -> None:
    p = LRUPolicy()
    keys = [BlockKey("n", bytes([i]) * 4) for i in range(3)]
    for k in keys:
        p.insert(k, 1)
    p.touch(keys[0])
    assert p.victim() == keys[1]


def test_lru_offers_its_order_ahead_and_moves_an_expected_block_last() -> None:
    p = LRUPolicy()
    keys = [BlockKey("n", bytes([i]) * 4) for i in range(4)]
    for k in keys:
        p.insert(k, 1)
    assert p.victims(None, 3) == keys[:3]
    p.expect(keys[0])  # a stager expects it back soon: it leaves after the others
    assert p.victims(None, 4) == [*keys[1:], keys[0]]


def test_file_layout_is_sharded(tmp_path: Path) -> None:
    b = file_backend(tmp_path)
    k = BlockKey("ns", bytes.fromhex("abcdef") + os.urandom(29))
    path = b.path_of(k)
    assert path == str(tmp_path / "tier" / "ns" / "ab" / (k.hex + ".lbk"))  # one shard level (test_file_layout.py)


def test_file_reads_a_known_block_size_in_one_preadv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Open + one preadv + close per block (each system call retakes the GIL); a header of
    another length than the remembered one falls back to the careful read, bytes intact."""
    b = file_backend(tmp_path)
    short, long = BlockKey("ns", bytes(32)), BlockKey("ns", bytes([1]) * 32)
    data = os.urandom(70_000)
    b.put(short, [data], BlockMeta.new(short, len(data), tag="a"))
    b.put(long, [data[::-1]], BlockMeta.new(long, len(data), tag="t" * 300))  # header 320 bytes longer
    fstats: list[int] = []
    real_fstat = os.fstat
    monkeypatch.setattr(os, "fstat", lambda fd: fstats.append(fd) or real_fstat(fd))
    dest = memoryview(bytearray(len(data)))
    assert b.read(long, dest)[0].tag == "t" * 300 and bytes(dest) == data[::-1]
    assert not fstats, "the header length of the last write was not used"
    assert b.read(short, dest)[0].tag == "a" and bytes(dest) == data
    assert len(fstats) == 1, "a header of another length must fall back to fstat + header read"
    assert b.read(short, dest)[0].tag == "a" and len(fstats) == 1  # remembered from that read


class TestSqliteManifest(ManifestStoreContract):
    def make_store(self, tmp_path: Path, tier: str) -> Manifest:
        return Manifest(sqlite_url(tmp_path / "manifest.sqlite"), tier)


def _counting_syscalls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"fstat": 0, "pread": 0, "preadv": 0}
    for name in calls:
        real = getattr(os, name)

        def counted(*args: object, _real: Callable[..., object] = real, _name: str = name) -> object:
            calls[_name] += 1
            return _real(*args)

        monkeypatch.setattr(os, name, counted)
    return calls


def test_file_read_payload_of_a_known_size_is_one_preadv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A coding tier's load is open + one preadv + close with the size its index holds: no fstat,
    no header read; with a stale size it asks the file, bytes intact."""
    from lifeboatcache_core.testing.contracts import RecordingSink

    b = file_backend(tmp_path)
    k = BlockKey("ns", bytes(32))
    data = os.urandom(300_000)
    stored = b.put(k, [data], BlockMeta.new(k, len(data)))
    calls = _counting_syscalls(monkeypatch)
    sink = RecordingSink()
    b.read_payload(k, sink, stored)
    assert sink.payload == data and calls == {"fstat": 0, "pread": 0, "preadv": 1}
    sink = RecordingSink()
    b.read_payload(k, sink, stored - 64)  # what the index thought the block took
    assert sink.payload == data and calls["fstat"] == 1


def test_file_direct_read_payload_feeds_the_payload_as_it_arrives(tmp_path: Path) -> None:
    """With o_direct a block is read in STREAM_RANGE pieces and a sink that asks is fed each
    arrived prefix of the payload before the next piece is read."""
    from lifeboatcache_backend_file.backend import STREAM_RANGE
    from lifeboatcache_core.testing.contracts import RecordingSink

    b = file_backend(tmp_path, o_direct=True)
    k = BlockKey("ns", bytes(32))
    data = os.urandom(4 * STREAM_RANGE + 1000)
    stored = b.put(k, [data], BlockMeta.new(k, len(data)))
    sink = RecordingSink()
    b.read_payload(k, sink, stored)
    assert sink.payload == data
    assert [len(p) for p in sink.prefixes] == [STREAM_RANGE * i - 4096 for i in range(1, 5)]
    assert sink.calls == ["begin", "feed", "feed", "feed", "feed", "end"]
    whole = RecordingSink(stream=False)
    b.read_payload(k, whole, stored)
    assert whole.payload == data and whole.calls == ["begin", "end"]


def test_file_o_direct_on_a_filesystem_without_it_falls_back_to_buffered_io(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A filesystem that refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE and overlay mounts:
    ``open`` fails with EINVAL) must not turn ``o_direct = true`` into a tier whose every store
    fails: the tier finds out once, when it opens, says so, and stores and loads buffered."""
    real_open = os.open

    def no_direct(path: str, flags: int, *args: object, **kwargs: object) -> int:
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(22, "Invalid argument", path)  # EINVAL, as such a filesystem answers
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_direct)
    with caplog.at_level("WARNING", logger="lifeboatcache_backend_file.backend"):
        b = file_backend(tmp_path, o_direct=True)
    assert any("O_DIRECT" in r.getMessage() and str(tmp_path / "tier") in r.getMessage() for r in caplog.records)
    k = BlockKey("ns", bytes(32))
    data = os.urandom(100_000)
    stored = b.put(k, [data], BlockMeta.new(k, len(data)))
    assert bytes(b.read(k)[1]) == data
    assert stored % 4096  # buffered: not padded to the 4 KiB multiple an O_DIRECT write takes
    assert sorted(p.name for p in (tmp_path / "tier").iterdir()) == [".layout", "ns"]  # the probe left nothing


def _partial_size(b: FileBackend, k: BlockKey) -> int:
    """Bytes of the one in-flight ``.partial`` of ``k`` (O_DIRECT: as far as it was written)."""
    final = Path(b.path_of(k))
    (partial,) = final.parent.glob(final.name + ".*.partial")
    return partial.stat().st_size


def test_file_direct_put_stream_writes_coded_pages_before_the_payload_is_whole(tmp_path: Path) -> None:
    """With o_direct, what the encoder has coded is on the disk while it codes on: by the time
    ``finish`` runs, all but the head page and the last partial piece are in the ``.partial``."""
    import mmap

    from lifeboatcache_backend_file.backend import STREAM_WRITE
    from lifeboatcache_core.testing.streams import SteppedPayload

    b = file_backend(tmp_path, o_direct=True)
    k = BlockKey("ns", bytes(range(32)))
    data = os.urandom(4 * STREAM_WRITE + 12345)
    encoder = SteppedPayload(data, memoryview(mmap.mmap(-1, len(data))), head_len=528)
    on_disk: list[int] = []

    def finish(pieces: object, params: object) -> BlockMeta:
        on_disk.append(_partial_size(b, k))
        return BlockMeta.new(k, len(data))

    stored = b.put_stream(k, encoder, finish)
    assert on_disk and on_disk[0] >= 4096 + 3 * STREAM_WRITE, f"only {on_disk} bytes written before the end"
    assert len(encoder.steps) >= 4
    assert stored == os.stat(b.path_of(k)).st_size
    assert bytes(b.read(k)[1]) == data


@pytest.mark.parametrize("o_direct", [True, False])
def test_file_put_stream_declined_by_finish_leaves_no_file(tmp_path: Path, o_direct: bool) -> None:
    """A store its tier declines once the payload is whole (no room for it) leaves neither the
    block nor its ``.partial``, though pages of it were written already."""
    import mmap

    from lifeboatcache_backend_file.backend import STREAM_WRITE
    from lifeboatcache_core.testing.streams import SteppedPayload

    b = file_backend(tmp_path, o_direct=o_direct)
    k = BlockKey("ns", bytes(range(2, 34)))
    data = os.urandom(3 * STREAM_WRITE)
    encoder = SteppedPayload(data, memoryview(mmap.mmap(-1, len(data))), head_len=528)
    assert b.put_stream(k, encoder, lambda pieces, params: None) is None
    assert not b.exists(k)
    assert [p.name for p in (tmp_path / "tier").rglob("*") if p.is_file() and p.name != ".layout"] == []


def test_file_direct_put_stream_rewrites_a_block_whose_header_outgrows_a_page(tmp_path: Path) -> None:
    import mmap

    from lifeboatcache_core.testing.streams import SteppedPayload

    b = file_backend(tmp_path, o_direct=True)
    k = BlockKey("ns", bytes(range(1, 33)))
    data = os.urandom(3 * 2**20 + 999)
    encoder = SteppedPayload(data, memoryview(mmap.mmap(-1, len(data))), head_len=4096 * 2 + 7)
    meta = BlockMeta.new(k, len(data), tag="t" * 6000)  # a header of two pages
    assert b.put_stream(k, encoder, lambda pieces, params: meta) is not None
    got_meta, payload = b.read(k)
    assert bytes(payload) == data and got_meta.tag == "t" * 6000


@pytest.mark.parametrize("length", [1, 4067, 4068, 4069, 4095, 4096, 4097, 8192, 2**20 + 1])
def test_file_direct_put_of_a_page_aligned_payload_of_any_length(tmp_path: Path, length: int) -> None:
    """A payload that starts on a page is written from where it lies up to its last whole page,
    the rest staged with the trailer: every length round-trips."""
    import mmap

    b = file_backend(tmp_path, o_direct=True)
    k = BlockKey("ns", length.to_bytes(4, "big") * 8)
    data = os.urandom(length)
    buf = mmap.mmap(-1, length)
    buf[:] = data
    stored = b.put(k, [memoryview(buf)], BlockMeta.new(k, length))
    assert stored % 4096 == 0 and stored == os.stat(b.path_of(k)).st_size
    assert bytes(b.read(k)[1]) == data
    dest = memoryview(bytearray(length))
    assert bytes(b.read(k, dest)[1]) == data
