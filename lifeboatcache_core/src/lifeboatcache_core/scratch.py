"""Per-thread page-aligned scratch buffers, kept and reused across blocks.

Why: the cache's I/O threads each move one block at a time, so one buffer per thread serves
every block. Fresh memory per block costs a page fault per 4 KiB touched (about a tenth of a
lossless encode), and ``O_DIRECT`` needs page-aligned memory, which an anonymous ``mmap`` is.
"""

from __future__ import annotations

import mmap
import threading

#: buffers grow in steps of this, so blocks of slightly different sizes share one
GROW_STEP = 1 << 20


class ThreadScratch(threading.local):
    """One page-aligned buffer per thread, grown (never shrunk) to the largest size asked for."""

    def __init__(self) -> None:
        self.buf: mmap.mmap | None = None

    def get(self, size: int) -> mmap.mmap:
        """This thread's buffer, at least ``size`` bytes; valid until this thread's next ``get``
        of a larger size (the old map is then unmapped once nothing views it; not closed here:
        a view a caller still holds, e.g. in a traceback, would make ``close()`` raise)."""
        if self.buf is None or len(self.buf) < size:
            self.buf = mmap.mmap(-1, -(-max(size, 1) // GROW_STEP) * GROW_STEP)
        return self.buf
