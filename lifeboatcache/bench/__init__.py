"""``lifeboatcache bench …``: one module per benchmark, each with ``register(app)``."""
