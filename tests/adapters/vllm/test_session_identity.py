"""The vLLM tier takes a request's session from the request where it names one (lifeboatcache_vllm.session).

A router or agent framework names the session in ``kv_transfer_params["lifeboat_session"]`` or
a ``kv_hints`` action ``lifeboat.session``; the blocks are tagged with that name, so its
``TieredCache.stage(name, eta)`` hint finds them. Without a name the first chunk names it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from lifeboatcache_vllm.session import request_session
from vllm.v1.kv_hints.protocol import KvHintAction, KvHintsEnvelope
from vllm.v1.kv_offload.base import ReqContext
from vllm.v1.kv_offload.tiering.base import TransferJob

from tests.adapters.vllm.test_tier_unit import SESSION_A, SESSION_B, file_config, finish, make_tier


def context(req_id: str, keys: list[bytes], **fields: object) -> ReqContext:
    """A request context as vLLM's scheduler fills it (``_create_req_context`` plus key positions)."""
    ctx = ReqContext(req_id=req_id, **fields)  # type: ignore[arg-type]
    for i, key in enumerate(keys):
        ctx.set_offload_key_position(key, (i + 1) * 128)
    return ctx


def hint_envelope(payload: dict[str, object], action_type: str = "lifeboat.session") -> KvHintsEnvelope:
    return KvHintsEnvelope(protocol_version="1", message_id="m1",
                           actions=[KvHintAction(action_id="a1", action_type=action_type, action_version="1",
                                                 payload=payload)])


def test_the_request_names_its_session_by_params_or_hints_else_none() -> None:
    assert request_session(ReqContext(req_id="r", kv_transfer_params={"lifeboat_session": "agent-7"})) == "agent-7"
    assert request_session(ReqContext(req_id="r", kv_transfer_params={"lifeboat_session": 42})) == "42"
    assert request_session(ReqContext(req_id="r", kv_hints=hint_envelope({"session": "agent-8"}))) == "agent-8"
    both = ReqContext(req_id="r", kv_transfer_params={"lifeboat_session": "p"},
                      kv_hints=hint_envelope({"session": "h"}))
    assert request_session(both) == "p", "kv_transfer_params wins"
    assert request_session(ReqContext(req_id="r")) is None
    assert request_session(ReqContext(req_id="r", kv_transfer_params={"do_remote_prefill": True})) is None
    assert request_session(ReqContext(req_id="r", kv_hints=hint_envelope({"session": "x"}, "other.action"))) is None


@pytest.mark.parametrize("value", ["", "x" * 257, 1.5, True, None, ["a"]])
def test_a_malformed_name_is_ignored_with_a_warning(value: object, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lifeboatcache.vllm"):
        assert request_session(ReqContext(req_id="r9", kv_transfer_params={"lifeboat_session": value})) is None
    assert any("r9" in r.getMessage() and "lifeboat_session" in r.getMessage() for r in caplog.records)


def test_blocks_of_a_named_session_carry_its_name_and_a_stage_hint_finds_them(tmp_path: Path) -> None:
    tier, region = make_tier(file_config(tmp_path / "t"))
    try:
        region[:8] = 5
        named = context("a1", SESSION_A, kv_transfer_params={"lifeboat_session": "agent-7"})
        hints = tier._hints(SESSION_A, named)
        assert [h.tag for h in hints] == ["agent-7"] * 4  # type: ignore[union-attr]
        assert [h.depth for h in hints] == [0, 1, 2, 3]  # type: ignore[union-attr]
        unnamed = tier._hints(SESSION_B, context("b1", SESSION_B))
        assert {h.tag for h in unnamed} == {SESSION_B[0][:16].hex()}  # type: ignore[union-attr]
        no_positions = ReqContext(req_id="a2", kv_hints=hint_envelope({"session": "agent-7"}))
        assert [h.tag for h in tier._hints(SESSION_A[:1], no_positions)] == ["agent-7"]  # type: ignore[union-attr]

        tier.submit_store(TransferJob(1, SESSION_A, np.arange(4, dtype=np.int32), False, named))
        assert finish(tier, 1).success
        assert tier.cache is not None
        assert tier.cache.stage("agent-7", 30.0) == 4, "the router's hint by name reaches the stored blocks"
        assert tier.cache.stage(SESSION_A[0][:16].hex(), 30.0) == 0
    finally:
        tier.shutdown()
