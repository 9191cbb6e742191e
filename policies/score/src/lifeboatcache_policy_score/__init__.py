"""Score eviction policy for lifeboatcache tiers (registered as ``score``)."""
