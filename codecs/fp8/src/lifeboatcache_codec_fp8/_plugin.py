"""Registers the ``fp8`` codec by import string; imports nothing heavy."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_codecs(register):  # type: ignore[no-untyped-def]
    register.codec("fp8", "lifeboatcache_codec_fp8.codec:Fp8Codec",
                   config="lifeboatcache_codec_fp8.codec:Fp8Config",
                   requires=["numpy>=1.26", "ml_dtypes>=0.5"], extra="fp8")
