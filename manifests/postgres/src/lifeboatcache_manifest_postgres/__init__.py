"""The fleet's manifest store for lifeboatcache: ``manifest_url = "postgresql+psycopg://..."``."""
