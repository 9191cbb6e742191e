"""A FUSE filesystem that models a power cut (in the spirit of Jepsen's LazyFS).

Why: a SIGKILL leaves the kernel's page cache intact, so a process-crash test cannot tell a
tier that fsyncs from one that does not. This filesystem keeps two states:

- the *volatile* state: what every process sees while it is mounted (held in the daemon's
  memory, as a page cache would hold it);
- the *durable* state: a file's bytes as of its last ``fsync``/``fdatasync``, and a
  directory's entries (name -> inode) as of its last ``fsync`` on the directory itself.

A power cut (``crash``) writes only the durable state to the backing file and ends the daemon
at once, so a write, a ``rename``, a ``mkdir`` or an ``unlink`` that nobody made durable is
gone after the next mount, exactly as POSIX allows: a new file's data needs an fsync of the
file, its name an fsync of its parent directory (and of every new directory above it).

With ``torn=True`` the cut is also adversarial about what the "disk" happened to have
written back on its own: each dirty file keeps a random mix of its durable and volatile 4 KiB
pages (and either size), and each directory a random subset of its pending entry changes.
Data that was made durable is never touched.

The cut happens at a chosen mutating operation (the ``crash_at``-th create, write, rename,
unlink, mkdir, rmdir, truncate, fsync or fsyncdir after the filesystem was armed): that
operation is not applied, the daemon writes the durable image and exits, and every process
still using the mount gets ``ENOTCONN``. Control files (``stat`` on them, from any process):

- ``/.powercut-arm-<n>``: reset the operation count and cut at the n-th mutating operation;
- ``/.powercut-now``: cut now.

Run it with :func:`serve` (the tests start it in a forkserver child and stop it by PID).
"""

from __future__ import annotations

import errno
import os
import pickle
import random
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import mfusepy as fuse

PAGE = 4096
ROOT = 1
ARM = ".powercut-arm-"
NOW = ".powercut-now"
IMAGE = "image.pickle"


@dataclass
class Node:
    """One inode: a regular file (``data``) or a directory (``entries``: name -> inode)."""

    kind: str  # "file" | "dir"
    mode: int
    data: bytearray = field(default_factory=bytearray)
    entries: dict[str, int] = field(default_factory=dict)
    mtime_ns: int = 0


@dataclass
class Durable:
    """What survives a power cut: per inode, its kind and mode, and the synced bytes or entries."""

    files: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # ino -> (mode, data)
    dirs: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)  # ino -> (mode, entries)
    #: kind and mode of every inode a durable entry names (a synced name whose inode never was
    #: synced comes back empty: a file of 0 bytes, a folder without entries)
    kinds: dict[int, tuple[str, int]] = field(default_factory=dict)
    next_ino: int = ROOT + 1


class PowerCut(Exception):
    """Raised inside an operation when the power is cut: the daemon stops without a reply."""


class PowerCutFS(fuse.Operations):
    """The volatile tree in memory, the durable image on ``backing``; see the module docstring."""

    use_ns = True

    def __init__(self, backing: str, *, seed: int = 0, torn: bool = False,
                 report: Connection | None = None) -> None:
        self.backing = backing
        self.rng = random.Random(seed)
        self.torn = torn
        self.report = report
        self.durable = _load(backing)
        self.nodes: dict[int, Node] = {}
        for ino, (mode, data) in self.durable.files.items():
            self.nodes[ino] = Node("file", mode, bytearray(data))
        for ino, (mode, entries) in self.durable.dirs.items():
            self.nodes[ino] = Node("dir", mode, entries=dict(entries))
        if ROOT not in self.nodes:
            self.nodes[ROOT] = Node("dir", stat.S_IFDIR | 0o755)
            self.durable.dirs[ROOT] = (self.nodes[ROOT].mode, {})
        self.next_ino = self.durable.next_ino
        self.handles: dict[int, int] = {}  # fh -> ino (open files keep their inode across renames/unlinks)
        self.next_fh = 1
        self.ops = 0
        self.crash_at: int | None = None
        self.log: list[str] = []

    # ------------------------------------------------------------------ the cut

    def _mutation(self, name: str, path: str) -> None:
        """Count a mutating operation; cut the power when it is the armed one (before applying it)."""
        if self.crash_at is None:
            return
        self.ops += 1
        if self.ops >= self.crash_at:
            self.crash(f"{name} {path}")

    def crash(self, where: str) -> None:
        image = self._crash_image()
        _save(self.backing, image)
        if self.report is not None:
            self.report.send(("crash", self.ops, where))
            self.report.close()
        os._exit(0)  # no reply, no unmount: the kernel aborts the connection (ENOTCONN for everyone)

    def _crash_image(self) -> Durable:
        if not self.torn:
            return self.durable
        image = Durable(dict(self.durable.files), dict(self.durable.dirs), dict(self.durable.kinds),
                        self.durable.next_ino)
        # A random part of what was never synced reached the disk anyway.
        for ino, node in self.nodes.items():
            if node.kind == "file":
                old = image.files.get(ino, (node.mode, b""))[1]
                if old != bytes(node.data):
                    image.files[ino] = (node.mode, self._torn_bytes(old, bytes(node.data)))
            else:
                old_entries = image.dirs.get(ino, (node.mode, {}))[1]
                mixed = dict(old_entries)
                for name in set(old_entries) | set(node.entries):
                    if old_entries.get(name) != node.entries.get(name) and self.rng.random() < 0.5:
                        if name in node.entries:
                            child = node.entries[name]
                            mixed[name] = child
                            image.kinds[child] = (self.nodes[child].kind, self.nodes[child].mode)
                        else:
                            mixed.pop(name, None)
                image.dirs[ino] = (node.mode, mixed)
        image.next_ino = self.next_ino
        return image

    def _torn_bytes(self, old: bytes, new: bytes) -> bytes:
        size = len(new) if self.rng.random() < 0.5 else len(old)
        out = bytearray(size)
        for start in range(0, size, PAGE):
            src = new if self.rng.random() < 0.5 else old
            piece = src[start:start + PAGE]
            out[start:start + len(piece)] = piece
        return bytes(out)

    # ------------------------------------------------------------------ paths

    def _lookup(self, path: str) -> int:
        ino = ROOT
        for part in _parts(path):
            node = self.nodes[ino]
            if node.kind != "dir":
                raise fuse.FuseOSError(errno.ENOTDIR)
            try:
                ino = node.entries[part]
            except KeyError:
                raise fuse.FuseOSError(errno.ENOENT) from None
        return ino

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        node = self.nodes[self._lookup(head or "/")]
        if node.kind != "dir":
            raise fuse.FuseOSError(errno.ENOTDIR)
        return node, name

    def _ino(self, path: str | None, fh: int | None) -> int:
        if fh is not None and fh in self.handles:
            return self.handles[fh]
        if path is None:
            raise fuse.FuseOSError(errno.EBADF)
        return self._lookup(path)

    def _new(self, kind: str, mode: int) -> int:
        ino = self.next_ino
        self.next_ino += 1
        self.nodes[ino] = Node(kind, mode, mtime_ns=time.time_ns())
        return ino

    def _open_fh(self, ino: int) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = ino
        return fh

    def _drop_if_unreachable(self, ino: int) -> None:
        if ino not in self.handles.values() and not any(ino in n.entries.values() for n in self.nodes.values()
                                                         if n.kind == "dir"):
            node = self.nodes.get(ino)
            if node is not None and node.kind == "file" and ino not in self.durable.files:
                del self.nodes[ino]

    # ------------------------------------------------------------------ operations

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        name = path.rsplit("/", 1)[-1]
        if path.count("/") == 1 and name.startswith(ARM):
            self.crash_at, self.ops = int(name[len(ARM):]), 0
            raise fuse.FuseOSError(errno.ENOENT)
        if path == "/" + NOW:
            self.crash("now")
        node = self.nodes[self._ino(path, fh)]
        size = len(node.data) if node.kind == "file" else PAGE
        return {"st_mode": node.mode, "st_nlink": 2 if node.kind == "dir" else 1, "st_size": size,
                "st_mtime": node.mtime_ns, "st_ctime": node.mtime_ns, "st_atime": node.mtime_ns,
                "st_uid": 0, "st_gid": 0, "st_blocks": (size + 511) // 512, "st_blksize": PAGE}

    def readdir(self, path: str, fh: int) -> Iterator[str]:
        node = self.nodes[self._lookup(path)]
        yield "."
        yield ".."
        yield from list(node.entries)

    def opendir(self, path: str) -> int:
        return self._lookup(path)

    def releasedir(self, path: str | None, fh: int) -> int:
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise fuse.FuseOSError(errno.EEXIST)
        self._mutation("mkdir", path)
        parent.entries[name] = self._new("dir", stat.S_IFDIR | (mode & 0o7777))
        return 0

    def rmdir(self, path: str) -> int:
        parent, name = self._parent(path)
        ino = self._lookup(path)
        if self.nodes[ino].entries:
            raise fuse.FuseOSError(errno.ENOTEMPTY)
        self._mutation("rmdir", path)
        del parent.entries[name]
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            ino = parent.entries[name]
        else:
            self._mutation("create", path)
            ino = self._new("file", stat.S_IFREG | (mode & 0o7777))
            parent.entries[name] = ino
        return self._open_fh(ino)

    def open(self, path: str, flags: int) -> int:
        ino = self._lookup(path)
        if flags & os.O_TRUNC and self.nodes[ino].data:
            self._mutation("truncate", path)
            self.nodes[ino].data.clear()
        return self._open_fh(ino)

    def release(self, path: str | None, fh: int) -> int:
        ino = self.handles.pop(fh, None)
        if ino is not None:
            self._drop_if_unreachable(ino)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return bytes(self.nodes[self._ino(path, fh)].data[offset:offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        node = self.nodes[self._ino(path, fh)]
        self._mutation("write", path or "?")
        if len(node.data) < offset:
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset:offset + len(data)] = data
        node.mtime_ns = time.time_ns()
        return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        node = self.nodes[self._ino(path, fh)]
        self._mutation("truncate", path or "?")
        if length < len(node.data):
            del node.data[length:]
        else:
            node.data.extend(bytes(length - len(node.data)))
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        node = self.nodes[self._ino(path, fh)]
        self._mutation("fallocate", path or "?")
        if offset + size > len(node.data) and not mode & 1:  # FALLOC_FL_KEEP_SIZE
            node.data.extend(bytes(offset + size - len(node.data)))
        return 0

    def unlink(self, path: str) -> int:
        parent, name = self._parent(path)
        ino = self._lookup(path)
        self._mutation("unlink", path)
        del parent.entries[name]
        self._drop_if_unreachable(ino)
        return 0

    def rename(self, old: str, new: str) -> int:
        src_parent, src_name = self._parent(old)
        ino = self._lookup(old)
        dst_parent, dst_name = self._parent(new)
        self._mutation("rename", f"{old} -> {new}")
        replaced = dst_parent.entries.get(dst_name)
        del src_parent.entries[src_name]
        dst_parent.entries[dst_name] = ino
        if replaced is not None and replaced != ino:
            self._drop_if_unreachable(replaced)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        ino = self._ino(path, fh)
        node = self.nodes[ino]
        self._mutation("fsync", path or "?")
        if node.kind == "file":
            self.durable.files[ino] = (node.mode, bytes(node.data))
        else:
            self._sync_dir(ino, node)
        self.durable.next_ino = max(self.durable.next_ino, self.next_ino)
        return 0

    def _sync_dir(self, ino: int, node: Node) -> None:
        self.durable.dirs[ino] = (node.mode, dict(node.entries))
        for child in node.entries.values():
            self.durable.kinds[child] = (self.nodes[child].kind, self.nodes[child].mode)

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        ino = fh if fh in self.nodes else self._lookup(path or "/")
        node = self.nodes[ino]
        self._mutation("fsyncdir", path or "?")
        self._sync_dir(ino, node)
        self.durable.next_ino = max(self.durable.next_ino, self.next_ino)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        node = self.nodes[self._lookup(path)]
        node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self.nodes[self._lookup(path)].mtime_ns = times[1] if times else time.time_ns()
        return 0

    def access(self, path: str, amode: int) -> int:
        self._lookup(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": PAGE, "f_frsize": PAGE, "f_blocks": 1 << 20, "f_bfree": 1 << 19,
                "f_bavail": 1 << 19, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


def _load(backing: str) -> Durable:
    """The durable image, with only what is reachable from the root by durable entries."""
    try:
        with open(os.path.join(backing, IMAGE), "rb") as fh:
            image: Durable = pickle.load(fh)
    except FileNotFoundError:
        return Durable()
    reachable: set[int] = set()
    todo = [ROOT]
    while todo:
        ino = todo.pop()
        if ino in reachable:
            continue
        reachable.add(ino)
        if ino in image.dirs:
            todo.extend(image.dirs[ino][1].values())
    dirs = {ino: v for ino, v in image.dirs.items() if ino in reachable}
    files = {ino: v for ino, v in image.files.items() if ino in reachable}
    # A durable name whose inode was never synced: an empty file (what ext4 shows) or folder.
    for ino in reachable - set(dirs) - set(files):
        kind, mode = image.kinds.get(ino, ("file", stat.S_IFREG | 0o644))
        if kind == "dir":
            dirs[ino] = (mode, {})
        else:
            files[ino] = (mode, b"")
    return Durable(files, dirs, image.kinds, image.next_ino)


def _save(backing: str, image: Durable) -> None:
    tmp = os.path.join(backing, IMAGE + ".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(image, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, os.path.join(backing, IMAGE))


def serve(mountpoint: str, backing: str, *, seed: int = 0, torn: bool = False,
          report: Connection | None = None) -> None:
    """Mount and serve until a power cut (or an unmount); ``report`` gets ("ready",) then ("crash", ops, where)."""
    ops = PowerCutFS(backing, seed=seed, torn=torn, report=report)
    if report is not None:
        original_init = ops.init

        def init(path: str) -> None:
            original_init(path)
            report.send(("ready",))

        ops.init = init  # type: ignore[method-assign]
    fuse.FUSE(ops, mountpoint, foreground=True, nothreads=True, hard_remove=True,
              attr_timeout=0, entry_timeout=0, negative_timeout=0)
    _save(backing, ops._crash_image())  # a clean unmount: the state as a power cut would leave it
