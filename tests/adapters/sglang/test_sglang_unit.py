"""The SGLang adapter's engine-free parts: settings, flags, auto-enable, namespace, page buffers."""

from __future__ import annotations

import ctypes
import json
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from lifeboatcache_core.errors import ConfigError, PluginLoadError
from lifeboatcache_core.plugins import get_registry
from lifeboatcache_sglang import adapter as adapter_mod
from lifeboatcache_sglang import autoenable
from lifeboatcache_sglang.host_pages import PageBuffers, PageRegions
from lifeboatcache_sglang.namespace import namespace_for, page_digest
from lifeboatcache_sglang.settings import SGLangStorageSettings, dynamic_extra_config, launch_flags, on_error_of


def test_registered_as_the_sglang_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = get_registry()
    cls = registry.load("adapter", "sglang")
    assert cls.name == "sglang" and cls.storage_class == "lifeboatcache_sglang.storage:LifeboatHiCacheStorage"
    monkeypatch.setattr(adapter_mod, "version", lambda name: "0.5.23")
    assert cls.check_engine() == "0.5.23"
    monkeypatch.setattr(adapter_mod, "version", lambda name: "0.5.10")
    with pytest.raises(PluginLoadError, match=r"SGLang 0\.5\.10 is too old .*sglang>=0\.5\.19"):
        cls.check_engine()


def test_unknown_extra_config_key_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"lifeboat_confg: unknown key; valid keys: .*lifeboat_config"):
        SGLangStorageSettings.from_extra_config({**dynamic_extra_config(), "lifeboat_confg": "/x.toml"})
    # SGLang's own keys (also those older versions pass through) are accepted
    settings = SGLangStorageSettings.from_extra_config({**dynamic_extra_config(), "prefetch_threshold": 256})
    assert settings.interface_v1 is True


def test_launch_flags_load_our_class_with_the_v1_interface() -> None:
    flags = launch_flags(lifeboat_config="/etc/lb.toml")
    assert flags[:4] == ["--enable-hierarchical-cache", "--hicache-storage-backend", "dynamic",
                         "--hicache-storage-backend-extra-config"]
    extra = json.loads(flags[4])
    assert extra == {"backend_name": "lifeboatcache", "module_path": "lifeboatcache_sglang.storage",
                     "class_name": "LifeboatHiCacheStorage", "interface_v1": True, "lifeboat_config": "/etc/lb.toml"}


def test_on_error_comes_from_the_extra_config_or_the_lifeboat_config(tmp_path: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIFEBOAT_CACHE_CONFIG", raising=False)
    assert on_error_of({}) == "serve"
    assert on_error_of({"lifeboat_on_error": "fail"}) == "fail"
    cfg = tmp_path / "c.toml"
    cfg.write_text('[engine]\non_error = "fail"\n[[tiers]]\nbackend = "dram"\ncapacity_gb = 1\n')
    assert on_error_of({"lifeboat_config": str(cfg)}) == "fail"
    cfg.write_text("[[tiers]]\nbackend = 'nope'\n")  # broken config: the default, not a crash
    assert on_error_of({"lifeboat_config": str(cfg)}) == "serve"


@pytest.mark.parametrize(("argv", "expect_added"), [
    (["--model-path", "m"], True),
    (["--model-path", "m", "--hicache-storage-backend", "file"], False),
    (["--model-path", "m", "--hicache-storage-backend=mooncake"], False),
])
def test_auto_enable_adds_flags_unless_a_backend_is_given(argv: list[str], expect_added: bool) -> None:
    out = autoenable.rewrite_argv(argv)
    assert ("dynamic" in out) is expect_added
    if expect_added:
        assert out[:2] == argv[:2] and out[-2:] == ["--page-size", "64"]
        assert autoenable.rewrite_argv(out) == out  # idempotent (every SGLang process loads plugins)
    else:
        assert out == argv


def test_auto_enable_keeps_a_given_page_size_and_hierarchical_flag() -> None:
    out = autoenable.rewrite_argv(["--enable-hierarchical-cache", "--page-size", "32"])
    assert out.count("--enable-hierarchical-cache") == 1 and out.count("--page-size") == 1


def test_auto_enable_only_with_the_variable_in_launch_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/x/sglang/launch_server.py", "--model-path", "m"])
    monkeypatch.delenv("LIFEBOAT_CACHE", raising=False)
    autoenable.load()
    assert sys.argv == ["/x/sglang/launch_server.py", "--model-path", "m"]
    monkeypatch.setenv("LIFEBOAT_CACHE", "1")
    autoenable.load()
    assert "--hicache-storage-backend" in sys.argv
    monkeypatch.setattr(sys, "argv", ["/x/other.py", "--model-path", "m"])
    autoenable.load()
    assert sys.argv == ["/x/other.py", "--model-path", "m"]


def storage_config(**over: Any) -> SimpleNamespace:
    base = dict(model_name="org/model", is_mla_model=False, tp_rank=1, tp_size=2, pp_rank=0, pp_size=1,
                attn_cp_rank=0, attn_cp_size=1, is_page_first_layout=True)
    return SimpleNamespace(**{**base, **over})


class FakePool:
    layout, page_size, layer_num, head_num, head_dim = "page_first", 4, 2, 2, 8
    dtype = "torch.bfloat16"

    def get_size_per_token(self) -> int:
        return 2 * self.layer_num * self.head_num * self.head_dim * 2


def test_namespace_separates_what_makes_pages_differ(tmp_path: Any) -> None:
    base = namespace_for(storage_config(), None, FakePool())
    assert base.dtype == "bfloat16" and base.layout == "page_first" and base.block_tokens == 4
    assert base.rank == 1 and base.world_size == 2 and base.digest_bytes == 32
    assert namespace_for(storage_config(tp_rank=0), None, FakePool()).id != base.id
    assert namespace_for(storage_config(model_name="org/other"), None, FakePool()).id != base.id
    layer_first = FakePool()
    layer_first.layout = "layer_first"
    assert namespace_for(storage_config(), None, layer_first).id != base.id
    # MLA: rank-replicated pages, one namespace for all ranks
    assert (namespace_for(storage_config(is_mla_model=True, tp_rank=0), None, FakePool()).id
            == namespace_for(storage_config(is_mla_model=True, tp_rank=1), None, FakePool()).id)
    # another checkpoint under the same name
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(b"a" * 100)
    first = namespace_for(storage_config(), str(ckpt), FakePool())
    (ckpt / "model.safetensors").write_bytes(b"b" * 100)
    assert namespace_for(storage_config(), str(ckpt), FakePool()).id != first.id != base.id


def test_page_digest_of_sglang_hashes_and_other_keys() -> None:
    assert page_digest("ab" * 32) == bytes.fromhex("ab" * 32)
    other = page_digest("ab" * 32 + ".mamba")
    assert len(other) == 32 and other != page_digest("ab" * 32)


class RegionPool:
    """Two regions per page (K and V) in two numpy arrays, like MHA page_first."""

    def __init__(self, pages: int, region: int) -> None:
        self.k = np.zeros((pages, region), dtype=np.uint8)
        self.v = np.zeros((pages, region), dtype=np.uint8)
        self.region = region

    def get_page_buffer_meta(self, pages: list[int]) -> tuple[list[int], list[int]]:
        ptrs = []
        for p in pages:
            ptrs += [self.k[p].ctypes.data, self.v[p].ctypes.data]
        return ptrs, [self.region] * len(ptrs)


def test_page_buffers_gather_and_scatter_multi_region_pages() -> None:
    pool = RegionPool(4, 16)
    pool.k[1], pool.v[1], pool.k[2], pool.v[2] = 1, 2, 3, 4
    regions = PageRegions.of(pool, [1, 2], 2)
    assert regions.page_bytes == 32 and not regions.contiguous
    out = PageBuffers(regions, [0, 1])
    out.gather()
    assert bytes(out.buffers[0]) == b"\1" * 16 + b"\2" * 16 and bytes(out.buffers[1]) == b"\3" * 16 + b"\4" * 16
    back = PageBuffers(PageRegions.of(pool, [3, 0], 2), [0, 1])
    back.buffers[0][:] = bytes(out.buffers[1])
    back.buffers[1][:] = b"\x09" * 32
    back.scatter([0])  # only pages that arrived are copied in
    assert (pool.k[3] == 3).all() and (pool.v[3] == 4).all() and (pool.k[0] == 0).all()


def test_single_region_pages_are_views_of_pool_memory() -> None:
    mem = np.zeros((3, 8), dtype=np.uint8)

    class MLAPool:
        def get_page_buffer_meta(self, pages: list[int]) -> tuple[list[int], list[int]]:
            return [mem[p].ctypes.data for p in pages], [8] * len(pages)

    buffers = PageBuffers(PageRegions.of(MLAPool(), [2], 1), [0])
    assert buffers.staging is None
    buffers.buffers[0][:] = b"\7" * 8
    assert (mem[2] == 7).all() and ctypes.sizeof(ctypes.c_ubyte) == 1
