"""Registrar for the ``lifeboatcache`` entry-point group (import-light: strings only)."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_adapters(register):  # type: ignore[no-untyped-def]
    register.adapter("vllm", "lifeboatcache_vllm.adapter:VllmAdapter",
                     config="lifeboatcache_vllm.settings:VllmSettings", extra="vllm")
