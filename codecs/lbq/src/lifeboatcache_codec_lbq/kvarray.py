"""Block bytes as float32 arrays by their KVLayout, K and V halves, and rows of groups.

A block's layout names its axes (``kv``, ``layer``, ``token``, ``head``, ``dim``...); the
quantizers find the axes they group along by name, so they work for any engine's layout
(vLLM, SGLang, LMCache order their axes differently).
"""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
from lifeboatcache_core.abc import KVLayout

#: float dtypes the quantizers accept (bf16 through ml_dtypes)
FLOAT_DTYPES: dict[str, np.dtype] = {
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype(np.float16),
    "float32": np.dtype(np.float32),
}


def quantizable(layout: KVLayout | None) -> bool:
    """A float block with a known shape; axes the codec needs but lacks fall back to the last axis."""
    return layout is not None and layout.dtype in FLOAT_DTYPES and all(layout.shape)


def load(raw: memoryview, layout: KVLayout) -> np.ndarray:
    """The block as float32 in its layout's shape."""
    return np.frombuffer(raw, dtype=FLOAT_DTYPES[layout.dtype]).reshape(layout.shape).astype(np.float32)


def store(values: np.ndarray, layout: KVLayout, dest: memoryview) -> None:
    """Write float32 ``values`` into ``dest`` in the layout's own dtype (round to nearest)."""
    out = np.frombuffer(dest.cast("B") if dest.format != "B" else dest, dtype=FLOAT_DTYPES[layout.dtype])
    out.reshape(layout.shape)[...] = values


def raw_size(layout: KVLayout) -> int:
    return int(np.prod(layout.shape)) * FLOAT_DTYPES[layout.dtype].itemsize


def halves(layout: KVLayout) -> Iterator[tuple[str, tuple[slice | int, ...]]]:
    """("k" | "v", index into the block) per half; a block without a ``kv`` axis is one "v" half."""
    if "kv" not in layout.axes:
        yield "v", (Ellipsis,)  # type: ignore[misc]
        return
    axis = layout.axes.index("kv")
    for i in range(layout.shape[axis]):
        index: tuple[slice | int, ...] = (slice(None),) * axis + (i,)
        yield ("k" if i == 0 else "v"), index


def half_axes(layout: KVLayout) -> tuple[str, ...]:
    return tuple(a for a in layout.axes if a != "kv")


def half_shape(layout: KVLayout) -> tuple[int, ...]:
    return tuple(n for a, n in zip(layout.axes, layout.shape, strict=True) if a != "kv")


def group_axis(axes: tuple[str, ...], name: str) -> int:
    """Index of axis ``name``; the last axis when there is none (``dim`` is innermost by convention)."""
    return axes.index(name) if name in axes else len(axes) - 1


def rows_shape(shape: tuple[int, ...], axis: int, group: int) -> tuple[int, int]:
    """(rows, group length) of :func:`to_rows` for an array of ``shape``."""
    length = shape[axis]
    width = min(group, length)
    padded = length + (-length % width)
    return int(np.prod(shape)) // length * padded // width, width


def to_rows(x: np.ndarray, axis: int, group: int) -> np.ndarray:
    """Groups of ``group`` consecutive elements along ``axis``, one per row.

    A trailing partial group is padded with copies of its last element (which cannot widen
    its range) and the padding is dropped again by :func:`from_rows`.
    """
    moved = np.moveaxis(x, axis, -1)
    width = min(group, moved.shape[-1])
    pad = -moved.shape[-1] % width
    if pad:
        moved = np.concatenate([moved, np.repeat(moved[..., -1:], pad, axis=-1)], axis=-1)
    return np.ascontiguousarray(moved).reshape(-1, width)


def from_rows(rows: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Inverse of :func:`to_rows` for an array of ``shape``."""
    moved_shape = tuple(n for i, n in enumerate(shape) if i != axis)
    length = shape[axis]
    moved = rows.reshape(*moved_shape, -1)[..., :length]
    return np.moveaxis(moved, -1, axis)
