"""lifeboatcache low-bit KV codecs: ``lbq`` and ``int2`` (:mod:`.lbq`), ``oscar`` (:mod:`.oscar`)."""
