"""lifeboatcache for vLLM (native mode).

vLLM's ``OffloadingConnector`` with the ``TieringOffloadingSpec`` keeps a CPU tier and fans
stored chunks out to secondary tiers; :class:`~lifeboatcache_vllm.tier.LifeboatTier` is one
such tier, backed by a whole :class:`~lifeboatcache_core.cache.TieredCache` (NVMe, NFS, S3,
codecs, integrity checks). :class:`~lifeboatcache_vllm.spec.LifeboatOffloadingSpec` adds the
defaults (256-token chunks, namespace fingerprint) and a worker for vLLM's CPU backend, and
:mod:`lifeboatcache_vllm.autoenable` wires both in when ``LIFEBOAT_CACHE=1``.

This module imports nothing from vLLM: it is loaded by vLLM's plugin machinery in every
process, including the API server.
"""

__version__ = "0.1.0"
