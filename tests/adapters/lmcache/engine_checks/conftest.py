"""Fixtures for the checks that run inside the LMCache venv (see ../test_lmcache_engine.py).

Import-light: the main test run loads this conftest too (it collects no ``check_*.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SHAPE = (2, 2, 16, 32)  # KV_2LTD: [K/V, layers, tokens, hidden]


def write_config(tmp_path: Path, *, capacity_gb: float = 1.0, on_error: str | None = None) -> Path:
    """A lifeboatcache config with one file tier under ``tmp_path`` (reads hit disk)."""
    engine = f'[engine]\non_error = "{on_error}"\n' if on_error else ""
    path = tmp_path / "lifeboat.toml"
    path.write_text(
        f'{engine}[[tiers]]\nname = "nvme"\nbackend = "file"\npath = "{tmp_path / "tier"}"\n'
        f"capacity_gb = {capacity_gb}\n\n[fallback_local]\nenabled = false\n"
    )
    return path


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path)


@pytest.fixture
def make_obj() -> Callable[..., Any]:
    """A real LMCache L1 object (TensorMemoryObj over host memory), optionally filled."""
    import torch
    from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj

    def make(seed: int | None = None, dtype: Any = None, shape: tuple[int, ...] = SHAPE) -> Any:
        dtype = dtype or torch.bfloat16
        numel = 1
        for d in shape:
            numel *= d
        raw = torch.zeros(numel * torch.empty((), dtype=dtype).element_size(), dtype=torch.uint8)
        if seed is not None:
            raw.copy_(torch.randint(0, 256, raw.shape, generator=torch.Generator().manual_seed(seed),
                                    dtype=torch.uint8))
        meta = MemoryObjMetadata(shape=torch.Size(shape), dtype=dtype, address=0, phy_size=raw.numel(),
                                 ref_count=1, fmt=MemoryFormat.KV_2LTD, shapes=[torch.Size(shape)], dtypes=[dtype])
        return TensorMemoryObj(raw, meta, None)

    return make


@pytest.fixture
def adapters() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for adapter in made:
        adapter.close()
