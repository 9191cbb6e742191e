"""lifeboatcache ``fp8`` codec (see :mod:`.codec`)."""
