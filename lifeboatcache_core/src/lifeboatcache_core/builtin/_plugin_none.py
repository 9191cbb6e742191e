from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_codecs(register):  # type: ignore[no-untyped-def]
    register.codec("none", "lifeboatcache_core.builtin.none_codec:NoneCodec")
