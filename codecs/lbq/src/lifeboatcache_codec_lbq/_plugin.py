"""Registers ``lbq``, ``int2`` and ``oscar`` by import string; imports nothing heavy."""

from lifeboatcache_core.hookspecs import hookimpl

_REQUIRES = ["numpy>=1.26", "ml_dtypes>=0.5"]


@hookimpl
def lifeboatcache_add_codecs(register):  # type: ignore[no-untyped-def]
    register.codec("lbq", "lifeboatcache_codec_lbq.lbq:LbqCodec",
                   config="lifeboatcache_codec_lbq.lbq:LbqConfig", requires=_REQUIRES, extra="lbq")
    register.codec("int2", "lifeboatcache_codec_lbq.lbq:Int2Codec",
                   config="lifeboatcache_codec_lbq.lbq:Int2Config", requires=_REQUIRES, extra="lbq")
    register.codec("oscar", "lifeboatcache_codec_lbq.oscar:OscarCodec",
                   config="lifeboatcache_codec_lbq.oscar:OscarConfig", requires=_REQUIRES, extra="lbq")
