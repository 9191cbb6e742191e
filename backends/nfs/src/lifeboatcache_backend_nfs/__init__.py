"""NFS tier for lifeboatcache: the core file tier with NFS-safe choices and failure handling."""
