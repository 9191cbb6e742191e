"""Contract tests every plugin package reuses (DESIGN §8), like fsspec's abstract test suite.

    from lifeboatcache_core.testing import BackendContract

    class TestMyBackend(BackendContract):
        def make_backend(self, tmp_path):
            return MyBackend(MyConfig(...), tier="t")

Import requires pytest and hypothesis (``pip install 'lifeboatcache-core[testing]'``).
"""

from lifeboatcache_core.testing.contracts import (
    BackendContract,
    ClaimedSizeContract,
    CodecContract,
    CorruptionContract,
    ManifestStoreContract,
    PolicyContract,
    claiming_block,
    random_kv,
)
from lifeboatcache_core.testing.recovery import RecoveryContract, RecoveryHelperContract
from lifeboatcache_core.testing.statemachine import backend_state_machine

__all__ = [
    "BackendContract",
    "ClaimedSizeContract",
    "CodecContract",
    "CorruptionContract",
    "ManifestStoreContract",
    "PolicyContract",
    "RecoveryContract",
    "RecoveryHelperContract",
    "backend_state_machine",
    "claiming_block",
    "random_kv",
]
