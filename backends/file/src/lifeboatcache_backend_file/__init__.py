"""The ``file`` tier for lifeboatcache: a local directory holds one block file per key."""
