"""The fault-injecting TCP proxy of the S3 tests: it lives in :mod:`lifeboatcache.loopback` (benchmarks use it too)."""

from lifeboatcache.loopback import FaultProxy

__all__ = ["FaultProxy"]
