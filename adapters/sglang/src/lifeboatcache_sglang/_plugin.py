"""Registrar for the ``lifeboatcache`` entry-point group (import-light: strings only)."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_adapters(register):  # type: ignore[no-untyped-def]
    register.adapter("sglang", "lifeboatcache_sglang.adapter:SGLangAdapter", extra="sglang",
                     requires=["sglang>=0.5.19"])
