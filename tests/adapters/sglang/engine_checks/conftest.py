"""Fixtures for the checks that run inside the SGLang venv (see ../test_sglang_engine.py).

Import-light on purpose: the main test run walks this directory too (it collects no
``check_*.py`` files but loads this conftest), where SGLang and torch are absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

LAYERS, HEADS, HEAD_DIM, PAGE, DEVICE_TOKENS = 2, 2, 8, 4, 64


def write_config(tmp_path: Path, *, extra_tier: str = "") -> Path:
    """A lifeboatcache config with one file tier under ``tmp_path`` (no DRAM tier: reads hit disk)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "lifeboat.toml"
    path.write_text(
        f'[[tiers]]\nname = "nvme"\nbackend = "file"\npath = "{tmp_path / "tier"}"\ncapacity_gb = 1\n'
        f"{extra_tier}\n[fallback_local]\nenabled = false\n"
    )
    return path


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path)


@pytest.fixture
def make_storage_config() -> Callable[..., Any]:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig

    def make(extra_config: dict[str, Any], *, tp_rank: int = 0, tp_size: int = 1, mla: bool = False,
             metrics: bool = False, model: str = "test-org/tiny-model") -> Any:
        return HiCacheStorageConfig(
            tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=mla, enable_storage_metrics=metrics, is_page_first_layout=True,
            model_name=model, extra_config=extra_config,
        )

    return make


@pytest.fixture
def make_host_pool() -> Callable[[str], Any]:
    """A real SGLang MHA host pool (bf16, pinned memory off: no CUDA here)."""
    import torch
    from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost

    keep: list[Any] = []

    def make(layout: str) -> Any:
        k = tuple(torch.zeros(DEVICE_TOKENS, HEADS, HEAD_DIM, dtype=torch.bfloat16) for _ in range(LAYERS))
        v = tuple(torch.zeros(DEVICE_TOKENS, HEADS, HEAD_DIM, dtype=torch.bfloat16) for _ in range(LAYERS))
        keep.append((k, v))

        def ptrs(bufs: tuple[Any, ...]) -> Any:
            return torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)

        info = MHABufferInfo(
            buffers=KVBuffers(k=k, v=v, k_data_ptrs=ptrs(k), v_data_ptrs=ptrs(v), layout=KVBufferLayout.NHD),
            page_size=PAGE, head_num=HEADS, head_dim=HEAD_DIM, v_head_dim=HEAD_DIM,
            dtype=torch.bfloat16, device=torch.device("cpu"),
        )
        return MHATokenToKVPoolHost(info, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu",
                                    device_capacity_tokens=DEVICE_TOKENS, start_layer=0, end_layer=LAYERS)

    return make


@pytest.fixture
def backends() -> Iterator[list[Any]]:
    """Backends a test made; closed afterwards (their TieredCaches own threads)."""
    made: list[Any] = []
    yield made
    for backend in made:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
