"""The file tier's shard layout: one level for a new root, two kept for a root written before ``.layout``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from lifeboatcache_backend_file.backend import LAYOUT_NAME, FileBackend, FileConfig
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.keys import BlockKey


def key(i: int) -> BlockKey:
    return BlockKey("ns", hashlib.sha256(i.to_bytes(8, "big")).digest())


def put(backend: FileBackend, k: BlockKey, payload: bytes) -> None:
    backend.put(k, [payload], BlockMeta.new(k, len(payload), codec="none"))


def test_a_new_root_has_one_shard_level_and_says_so(tmp_path: Path) -> None:
    backend = FileBackend(FileConfig(path=tmp_path), tier="nvme")
    for i in range(32):
        put(backend, key(i), bytes([i]) * 4096)
    assert (tmp_path / LAYOUT_NAME).read_text().strip() == "1"
    path = Path(backend.path_of(key(0)))
    assert path.relative_to(tmp_path).parts == ("ns", key(0).hex[:2], path.name)
    shard_folders = [d for d in (tmp_path / "ns").iterdir() if d.is_dir()]
    assert all(not any(e.is_dir() for e in d.iterdir()) for d in shard_folders)  # no second level made
    assert sorted(backend.list_keys()) == sorted(key(i) for i in range(32))
    reopened = FileBackend(FileConfig(path=tmp_path), tier="nvme")
    assert reopened.shard_depth == 1 and bytes(reopened.read(key(3))[1]) == bytes([3]) * 4096


def test_a_root_written_with_two_levels_keeps_them(tmp_path: Path) -> None:
    """A tier from before ``.layout``: its blocks stay where they are and are found and read."""
    old = FileBackend(FileConfig(path=tmp_path), tier="nvme")
    for i in range(4):
        put(old, key(i), bytes([i + 1]) * 8192)
    os.unlink(tmp_path / LAYOUT_NAME)
    for i in range(4):  # move each block to where the two-level layout kept it
        h = key(i).hex
        legacy = tmp_path / "ns" / h[:2] / h[2:4] / Path(old.path_of(key(i))).name
        legacy.parent.mkdir(parents=True, exist_ok=True)
        os.replace(old.path_of(key(i)), legacy)
    backend = FileBackend(FileConfig(path=tmp_path), tier="nvme")
    assert backend.shard_depth == 2 and (tmp_path / LAYOUT_NAME).read_text().strip() == "2"
    assert sorted(backend.list_keys()) == sorted(key(i) for i in range(4))
    assert bytes(backend.read(key(2))[1]) == bytes([3]) * 8192
    put(backend, key(9), b"\x09" * 4096)
    assert Path(backend.path_of(key(9))).relative_to(tmp_path).parts[:3] == ("ns", key(9).hex[:2], key(9).hex[2:4])


def test_a_marker_with_another_depth_is_refused(tmp_path: Path) -> None:
    (tmp_path / LAYOUT_NAME).write_text("3\n")
    with pytest.raises(ValueError, match="neither 1 nor 2"):
        FileBackend(FileConfig(path=tmp_path), tier="nvme")


def test_a_marker_a_power_cut_left_empty_is_read_off_the_tree(tmp_path: Path) -> None:
    """The power-loss suite's finding: a cut right after the tier was made left ``.layout`` empty."""
    backend = FileBackend(FileConfig(path=tmp_path), tier="nvme")
    put(backend, key(1), b"\x01" * 4096)
    (tmp_path / LAYOUT_NAME).write_text("")
    reopened = FileBackend(FileConfig(path=tmp_path), tier="nvme")
    assert reopened.shard_depth == 1 and (tmp_path / LAYOUT_NAME).read_text().strip() == "1"
    assert bytes(reopened.read(key(1))[1]) == b"\x01" * 4096
