"""fsspec tier for lifeboatcache: any fsspec URL holds blocks in the core block format."""
