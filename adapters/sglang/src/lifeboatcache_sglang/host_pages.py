"""Byte views of pages in SGLang's host (L2) pool, from ``get_page_buffer_meta``.

The pool describes each page as one or more contiguous regions (MLA: 1; MHA ``page_first``:
K then V; ``layer_first``: K and V per layer). A page with one region is handed to the
cache as a view of pool memory (no copy). A page with several regions is gathered into one
staging row on writes and scattered back on reads: one memcpy per region, done by
``ctypes.memmove`` which releases the GIL. The layout-specific arithmetic stays SGLang's.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def view_of(ptr: int, size: int) -> memoryview:
    """The ``size`` bytes of host memory at address ``ptr``, as a writable byte view (no copy)."""
    return memoryview((ctypes.c_ubyte * size).from_address(ptr)).cast("B")


@dataclass
class PageRegions:
    """The regions of ``n`` pages: ``ptrs[i]``/``sizes[i]`` for page ``i`` (same sizes for all pages)."""

    ptrs: list[list[int]]
    sizes: list[int]

    @classmethod
    def of(cls, pool: Any, host_indices: Any, n_pages: int) -> PageRegions:
        ptr_list, size_list = pool.get_page_buffer_meta(host_indices)
        if n_pages == 0:
            return cls([], [])
        per_page, rem = divmod(len(ptr_list), n_pages)
        if rem or per_page == 0:
            raise ValueError(f"host pool gave {len(ptr_list)} regions for {n_pages} pages")
        sizes = [int(s) for s in size_list[:per_page]]
        ptrs = [[int(p) for p in ptr_list[i * per_page:(i + 1) * per_page]] for i in range(n_pages)]
        return cls(ptrs, sizes)

    @property
    def page_bytes(self) -> int:
        return sum(self.sizes)

    @property
    def contiguous(self) -> bool:
        return len(self.sizes) == 1


class PageBuffers:
    """Buffers for ``pages`` (indices into the region list): direct views or staging rows."""

    def __init__(self, regions: PageRegions, pages: Sequence[int]) -> None:
        self.regions = regions
        self.pages = list(pages)
        self.staging: np.ndarray | None = None
        if regions.contiguous:
            self.buffers: list[memoryview] = [view_of(regions.ptrs[p][0], regions.sizes[0]) for p in self.pages]
        else:
            self.staging = np.empty((len(self.pages), regions.page_bytes), dtype=np.uint8)
            self.buffers = [memoryview(row) for row in self.staging]

    def gather(self) -> None:
        """Copy the pages' regions into the staging rows (before a write)."""
        if self.staging is None:
            return
        base, stride = self.staging.ctypes.data, self.regions.page_bytes
        for row, page in enumerate(self.pages):
            offset = base + row * stride
            for ptr, size in zip(self.regions.ptrs[page], self.regions.sizes, strict=True):
                ctypes.memmove(offset, ptr, size)
                offset += size

    def scatter(self, rows: Sequence[int]) -> None:
        """Copy staging ``rows`` back into their pages' regions (after a read)."""
        if self.staging is None:
            return
        base, stride = self.staging.ctypes.data, self.regions.page_bytes
        for row in rows:
            offset = base + row * stride
            for ptr, size in zip(self.regions.ptrs[self.pages[row]], self.regions.sizes, strict=True):
                ctypes.memmove(ptr, offset, size)
                offset += size
