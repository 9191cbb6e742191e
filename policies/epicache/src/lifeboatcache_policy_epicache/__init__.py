"""EpiCache-style episode eviction for lifeboatcache tiers (registered as ``epicache``)."""
