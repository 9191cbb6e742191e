"""lifeboatcache ``lossless`` codec: byte planes + zstd/lz4 (see :mod:`.codec`)."""
