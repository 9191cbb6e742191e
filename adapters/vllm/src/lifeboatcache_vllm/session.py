"""The session a vLLM request belongs to, where the request names it.

lifeboatcache's session-aware parts (EpiCache's episodes, predictive staging's plans and the
``TieredCache.stage`` / ``POST /api/stage`` hints) know a session by its blocks'
``BlockHint.tag``. Without help the vLLM tier names a session by the request's first chunk
(``LifeboatTier._hints``): the same for every turn that starts with the same 256 tokens, but a
32-hex-digit hash an agent framework or router cannot know in advance. So a request may name
its session itself, in what vLLM hands a secondary tier (``ReqContext``), first match wins:

1. ``kv_transfer_params["lifeboat_session"]`` (the OpenAI API's ``kv_transfer_params`` field,
   or ``SamplingParams.extra_args["kv_transfer_params"]`` offline);
2. a ``kv_hints`` action (vLLM's ``KvHintsEnvelope``) of ``action_type`` ``"lifeboat.session"``
   with ``payload {"session": ...}``.

A string or an integer of 1 to ``MAX_SESSION_CHARS`` characters is taken (an integer as its
decimal text); anything else is ignored with one warning per request, and the first chunk
names the session as before: a malformed hint never fails a request. ``cache_salt`` is not
visible to a secondary tier (vLLM folds it into the block hashes, so requests with different
salts already get different first-chunk identities).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.v1.kv_offload.base import ReqContext

log = logging.getLogger("lifeboatcache.vllm")

#: the ``kv_transfer_params`` key that names a request's session
PARAMS_KEY = "lifeboat_session"
#: the ``kv_hints`` action type that names a request's session (``payload["session"]``)
HINT_ACTION = "lifeboat.session"
MAX_SESSION_CHARS = 256


@dataclass(frozen=True)
class _Named:
    """Per-request cache of the answer (``ReqContext`` state is keyed by type)."""

    session: str | None


def request_session(req_context: ReqContext) -> str | None:
    """The session the request names (see the module docstring), else None. Parsed once per request."""
    cached = req_context.get_state(_Named)
    if cached is not None:
        return cached.session
    session = _from_params(req_context) or _from_hints(req_context)
    req_context.set_state(_Named(session))
    return session


def _valid(value: Any, where: str, req_id: str) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int):
        log.warning("request %s: %s must be a string or an integer, not %s; the session is named by "
                    "its first chunk", req_id, where, type(value).__name__)
        return None
    text = str(value)
    if not 0 < len(text) <= MAX_SESSION_CHARS:
        log.warning("request %s: %s must have 1 to %d characters (has %d); the session is named by its "
                    "first chunk", req_id, where, MAX_SESSION_CHARS, len(text))
        return None
    return text


def _from_params(req_context: ReqContext) -> str | None:
    params = req_context.kv_transfer_params
    if not isinstance(params, dict) or PARAMS_KEY not in params:
        return None
    return _valid(params[PARAMS_KEY], f"kv_transfer_params[{PARAMS_KEY!r}]", req_context.req_id)


def _from_hints(req_context: ReqContext) -> str | None:
    envelope = getattr(req_context, "kv_hints", None)
    for action in getattr(envelope, "actions", None) or ():
        if getattr(action, "action_type", None) != HINT_ACTION:
            continue
        payload = getattr(action, "payload", None)
        if isinstance(payload, dict) and "session" in payload:
            return _valid(payload["session"], f"kv_hints action {HINT_ACTION!r} payload['session']",
                          req_context.req_id)
    return None
