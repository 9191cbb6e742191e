"""Plugin loading: lazy, failure-isolated, with errors that say what to do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lifeboatcache_core.errors import (
    DuplicatePluginError,
    MissingPluginPackageError,
    PluginLoadError,
    UnknownPluginError,
)
from lifeboatcache_core.hookspecs import hookimpl
from lifeboatcache_core.plugins import get_registry, register_plugin, reset_registry, unregister_plugin


class ThrowawayBackends:
    @hookimpl
    def lifeboatcache_add_backends(self, register):  # type: ignore[no-untyped-def]
        register.backend("memtest", "lifeboatcache_core.builtin.dram:DramBackend")
        register.backend("needs-missing-dep", "no_such_module_xyz.backend:Backend", extra="s3")


def test_builtins_are_plugins() -> None:
    reg = get_registry()
    assert {"dram", "file"} <= set(reg.names("backend"))
    assert "lru" in reg.names("policy") and "none" in reg.names("codec")
    assert all(reg.plugins[n].status == "ok" for n in ("dram", "file", "lru", "none"))


def test_throwaway_plugin_registers_and_unregisters() -> None:
    register_plugin(ThrowawayBackends(), "throwaway")
    reg = get_registry()
    assert "memtest" in reg.names("backend")
    assert reg.load("backend", "memtest").__name__ == "DramBackend"
    unregister_plugin("throwaway")
    assert "memtest" not in reg.names("backend")


def test_dependency_import_failure_is_chained_with_install_hint() -> None:
    register_plugin(ThrowawayBackends(), "throwaway")
    with pytest.raises(PluginLoadError) as err:
        get_registry().load("backend", "needs-missing-dep")
    assert isinstance(err.value.__cause__, ImportError)
    assert "pip install 'lifeboatcache[s3]'" in str(err.value)
    unregister_plugin("throwaway")


def test_unknown_name() -> None:
    with pytest.raises(UnknownPluginError, match=r"Did you mean 'dram'\?.*Available backends: dram, file"):
        get_registry().load("backend", "dran")


def test_first_party_not_installed() -> None:
    reg = get_registry()
    reg.entries["backend"].pop("s3", None)  # as if lifeboatcache-backend-s3 were not installed
    with pytest.raises(MissingPluginPackageError, match=r"pip install 'lifeboatcache\[s3\]'"):
        reg.load("backend", "s3")


def test_duplicate_name_names_both_distributions() -> None:
    class Clash:
        @hookimpl
        def lifeboatcache_add_backends(self, register):  # type: ignore[no-untyped-def]
            register.backend("dram", "somewhere.else:DramBackend")

    register_plugin(Clash(), "clash", distribution="evil-dist")
    status = get_registry().plugins["clash"]
    assert status.status.startswith("FAILED") and isinstance(status.error, DuplicatePluginError)
    assert "lifeboatcache-core" in status.status and "evil-dist" in status.status
    # the built-in is untouched
    assert get_registry().registration("backend", "dram").distribution == "lifeboatcache-core"


def test_broken_plugin_does_not_stop_others() -> None:
    class Broken:
        @hookimpl
        def lifeboatcache_add_codecs(self, register):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom at registration")

    register_plugin(Broken(), "broken")
    reg = get_registry()
    assert reg.plugins["broken"].status == "FAILED: boom at registration"
    assert reg.load("codec", "none").__name__ == "NoneCodec"


def test_misspelt_hook_is_an_error() -> None:
    class Typo:
        @hookimpl
        def lifeboatcache_add_backend(self, register):  # type: ignore[no-untyped-def]
            pass

    register_plugin(Typo(), "typo")
    assert get_registry().plugins["typo"].status.startswith("FAILED")


def test_disable_plugins_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFEBOATCACHE_DISABLE_PLUGINS", "dram")
    reset_registry()
    reg = get_registry()
    assert "dram" not in reg.names("backend") and reg.plugins["dram"].status == "inactive"
    assert "file" in reg.names("backend")


def test_load_plugins_env_keeps_builtins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIFEBOATCACHE_LOAD_PLUGINS", "nothing-else")
    reset_registry()
    reg = get_registry()
    assert {"dram", "file"} <= set(reg.names("backend"))
    assert all(s.status in ("inactive", "ok") for s in reg.plugins.values())
    # the core's defaults (the nvme tier and the local fallback are file tiers) stay loadable
    assert reg.plugins["file"].status == "ok" and reg.plugins["file"].distribution == "lifeboatcache-backend-file"
    third_party = [n for n, s in reg.plugins.items() if s.distribution != "lifeboatcache-core" and n != "file"]
    assert all(reg.plugins[n].status == "inactive" for n in third_party)


def test_cli_plugins_json() -> None:
    out = subprocess.run([sys.executable, "-m", "lifeboatcache", "plugins", "--json"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    rows = json.loads(out)
    by_name = {(r["name"], r["kind"]): r for r in rows}
    for name, kind in [("dram", "backend"), ("lru", "policy"), ("none", "codec")]:
        row = by_name[(name, kind)]
        assert row["status"] == "ok" and row["distribution"] == "lifeboatcache-core" and row["version"]
    row = by_name[("file", "backend")]
    assert row["status"] == "ok" and row["distribution"] == "lifeboatcache-backend-file" and row["version"]
    assert all({"name", "kind", "distribution", "version", "status"} <= set(r) for r in rows)
