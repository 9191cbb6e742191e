"""Registers the ``lossless`` codec by import string; imports nothing heavy."""

from lifeboatcache_core.hookspecs import hookimpl


@hookimpl
def lifeboatcache_add_codecs(register):  # type: ignore[no-untyped-def]
    register.codec("lossless", "lifeboatcache_codec_lossless.codec:LosslessCodec",
                   config="lifeboatcache_codec_lossless.codec:LosslessConfig",
                   requires=["zstandard>=0.22", "lz4>=4.3", "numpy>=1.26"], extra="lossless")
