"""S3 tier for lifeboatcache: blocks in the core block format, one object per block."""
