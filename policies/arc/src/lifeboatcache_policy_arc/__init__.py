"""ARC eviction policy for lifeboatcache tiers (registered as ``arc``)."""
