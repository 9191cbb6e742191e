"""The LMCache adapter's engine-free parts: params, LMCache mode for vLLM (server command,
connector config, device refusal, auto-enable), plugin registration."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from lifeboatcache_core.config import LifeboatConfig
from lifeboatcache_core.errors import ConfigError, PluginLoadError
from lifeboatcache_core.plugins import get_registry
from lifeboatcache_lmcache import adapter as adapter_mod
from lifeboatcache_lmcache import autoenable, server
from lifeboatcache_lmcache.settings import L2AdapterParams, l2_adapter_json, on_error_of


def test_registered_as_the_lmcache_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    cls = get_registry().load("adapter", "lmcache")
    assert cls.name == "lmcache" and cls.adapter_class == "lifeboatcache_lmcache.l2_adapter:LifeboatL2Adapter"
    monkeypatch.setattr(adapter_mod, "version", lambda name: "0.5.6")
    assert cls.check_engine() == "0.5.6"
    monkeypatch.setattr(adapter_mod, "version", lambda name: "0.4.2")
    with pytest.raises(PluginLoadError, match=r"LMCache 0\.4\.2 is too old .*lmcache>=0\.5\.6"):
        cls.check_engine()


def test_adapter_params_reject_unknown_keys() -> None:
    with pytest.raises(ConfigError, match=r"lifeboat_confg: unknown key; valid keys: .*lifeboat_config"):
        L2AdapterParams.parse({"lifeboat_confg": "/x.toml"})
    spec = json.loads(l2_adapter_json(lifeboat_config="/etc/lb.toml"))
    assert spec == {"type": "plugin", "module_path": "lifeboatcache_lmcache.l2_adapter",
                    "class_name": "LifeboatL2Adapter", "adapter_params": {"lifeboat_config": "/etc/lb.toml"}}


def test_on_error_of_a_broken_config_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIFEBOAT_CACHE_CONFIG", raising=False)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tiers]]\nbackend = 'nope'\n")
    assert on_error_of({"lifeboat_config": str(bad)}) == "serve"
    assert on_error_of({"lifeboat_config": str(bad), "on_error": "fail"}) == "fail"


def test_server_command_puts_our_adapter_under_lmcache() -> None:
    config = LifeboatConfig.model_validate({"engine": {"vllm": {"native_cpu_gb": 8}}})
    cmd = server.server_command(config, port=6001, config_path="/etc/lb.toml", model_path="/models/q")
    assert cmd[1:6] == ["server", "--host", "localhost", "--port", "6001"]
    assert cmd[cmd.index("--l1-size-gb") + 1] == "8"
    l2 = json.loads(cmd[cmd.index("--l2-adapter") + 1])
    assert l2["adapter_params"] == {"lifeboat_config": "/etc/lb.toml", "model_path": "/models/q"}
    connector = server.kv_transfer_config_dict("localhost", 6001)
    assert connector["kv_connector"] == "LMCacheMPConnector"
    assert connector["kv_connector_extra_config"] == {"lmcache.mp.host": "tcp://localhost", "lmcache.mp.port": 6001}


def test_lmcache_mode_refuses_a_cpu_engine_and_says_why() -> None:
    with pytest.raises(server.LMCacheModeUnavailable, match=r"no CUDA/ROCm/XPU.*vllm_mode = 'native'"):
        server.check_device("cpu")


def lmcache_mode_config(tmp_path: Path, mode: str) -> Path:
    path = tmp_path / "lb.toml"
    path.write_text(f'[engine.vllm]\nvllm_mode = "{mode}"\n[[tiers]]\nbackend = "dram"\ncapacity_gb = 1\n')
    return path


def test_auto_enable_only_in_lmcache_mode_with_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFEBOAT_CACHE_CONFIG", str(lmcache_mode_config(tmp_path, "lmcache")))
    monkeypatch.delenv("LIFEBOAT_CACHE", raising=False)
    assert not autoenable.lmcache_mode_selected()
    monkeypatch.setenv("LIFEBOAT_CACHE", "1")
    assert autoenable.lmcache_mode_selected()
    monkeypatch.setenv("LIFEBOAT_CACHE_CONFIG", str(lmcache_mode_config(tmp_path, "native")))
    assert not autoenable.lmcache_mode_selected()


def test_apply_refuses_on_this_cpu_and_keeps_an_explicit_config(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFEBOAT_CACHE_CONFIG", str(lmcache_mode_config(tmp_path, "lmcache")))
    monkeypatch.setattr(server, "device_kind", lambda: "cpu")
    with pytest.raises(server.LMCacheModeUnavailable, match="LMCache has no CPU connector"):
        autoenable.apply(SimpleNamespace(kv_transfer_config=None, model="m"))
    explicit = SimpleNamespace(kv_transfer_config={"kv_connector": "X"}, model="m")
    assert autoenable.apply(explicit) is False and explicit.kv_transfer_config == {"kv_connector": "X"}


def test_lmcache_mode_replaces_the_native_adapters_config_only(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    native = {"kv_connector": "OffloadingConnector",
              "kv_connector_extra_config": {"spec_module_path": "lifeboatcache_vllm.spec"}}
    assert autoenable.set_by_native_mode(native)
    assert autoenable.set_by_native_mode(SimpleNamespace(**native))
    assert not autoenable.set_by_native_mode({"kv_connector": "LMCacheMPConnector", "kv_connector_extra_config": {}})
    monkeypatch.setenv("LIFEBOAT_CACHE_CONFIG", str(lmcache_mode_config(tmp_path, "lmcache")))
    monkeypatch.setattr(server, "device_kind", lambda: "cpu")
    with pytest.raises(server.LMCacheModeUnavailable):  # not kept: LMCache mode takes over, and refuses here
        autoenable.apply(SimpleNamespace(kv_transfer_config=native, model="m"))
