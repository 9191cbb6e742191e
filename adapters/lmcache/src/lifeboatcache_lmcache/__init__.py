"""lifeboatcache for LMCache (import-light: LMCache is imported only by l2_adapter)."""
