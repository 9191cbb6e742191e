"""The dashboard's HTTP app (starlette): page, Prometheus text, stats and the config API.

Routes
    GET  /                      the page (static, no CDN)
    GET  /static/app.js|app.css fixed files: names come from a table, never from the URL path
    GET  /metrics               Prometheus text for the whole node (metrics_node.NodeCollector)
    GET  /api/stats             current numbers, per-tier health, recent events (JSON)
    GET  /api/history           the sampled history, so charts are filled on first load
    GET  /api/config            the running config (the dashboard token redacted)
    POST /api/config/validate   validate a config with the same pydantic models; errors per field
    POST /api/config            validate and apply live (needs the token); says what needs a restart
    POST /api/stage             staging hint {"session", "eta_s"}: the session returns in eta_s seconds (token)
    POST /api/release           staging hint {"session"}: the session is done; unused staged copies go (token)

Config writes and staging hints need the token (``Authorization: Bearer …`` or
``X-Lifeboat-Token``). A config names plugins by registered name only, and is validated before
anything is applied. A session is the ``BlockHint.tag`` its blocks were stored with (the vLLM
adapter's: the hex of the prompt's first chunk hash; docs/ARCHITECTURE.md, "Predictive staging").
"""

from __future__ import annotations

import hmac
import json
import math
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import LifeboatConfig, validation_problems
from lifeboatcache_core.metrics import LATENCY_BUCKETS, Sample, derived
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from lifeboatcache.dashboard.history import History
from lifeboatcache.dashboard.metrics_node import NodeCollector, node_sample

REDACTED = "********"
MAX_BODY_BYTES = 1 << 20
MAX_SESSION_CHARS = 512
MAX_ETA_S = 86400.0
STATIC_FILES = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}


def _static(name: str) -> bytes:
    return resources.files("lifeboatcache.dashboard").joinpath("static", name).read_bytes()


def latency_quantile(hist: dict[str, Any], q: float) -> float | None:
    """Upper bound of the bucket holding quantile ``q`` (None without observations)."""
    if not hist or not hist["count"]:
        return None
    rank, running = q * hist["count"], 0
    for bound, count in zip(LATENCY_BUCKETS, hist["counts"], strict=False):
        running += count
        if running >= rank:
            return bound
    return float("inf")


def stats_payload(sample: Sample, processes: int, cache: TieredCache, events: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = derived(sample)
    order = [t.name for t in cache.sample().tiers]  # this process's tier order; other processes' tiers after
    names = [n for n in order if n in sample["tiers"]] + sorted(set(sample["tiers"]) - set(order))
    tiers = []
    for name in names:
        t = sample["tiers"][name]
        tiers.append({
            "name": name, **{k: v for k, v in t.items() if k != "latency"}, **ratios["tiers"][name],
            "get_p50_s": latency_quantile(t["latency"].get("get", {}), 0.5),
            "get_p99_s": latency_quantile(t["latency"].get("get", {}), 0.99),
        })
    jobs = sample["job_latency"]
    return {
        "t": time.time(),
        "pid": os.getpid(),
        "processes": processes,
        "cache": sample["cache"],
        "hit_rate_blocks": ratios["hit_rate_blocks"],
        "hit_rate_tokens": ratios["hit_rate_tokens"],
        "get_p50_s": latency_quantile(jobs.get("get", {}), 0.5),
        "get_p99_s": latency_quantile(jobs.get("get", {}), 0.99),
        "staging": ratios["staging"],
        "tiers": tiers,
        "events": events,
    }


def redacted_config(config: LifeboatConfig) -> dict[str, Any]:
    data = config.model_dump(mode="json")
    if data["dashboard"].get("token"):
        data["dashboard"]["token"] = REDACTED
    for tier in data["tiers"]:  # keyed-integrity secrets stay on the server, like the token
        tier["integrity_keys"] = [REDACTED] * len(tier.get("integrity_keys") or [])
    return data


def parse_config(data: Any, running: LifeboatConfig) -> tuple[LifeboatConfig | None, list[dict[str, str]]]:
    """Validate ``data`` with the core's models: (config, []) or (None, [{loc, msg}, ...])."""
    if not isinstance(data, dict):
        return None, [{"loc": "", "msg": f"the config must be a JSON object, got {type(data).__name__}"}]
    dashboard = data.get("dashboard")
    if isinstance(dashboard, dict) and dashboard.get("token") == REDACTED:
        dashboard["token"] = running.dashboard.token  # the page round-trips the redacted value
    running_keys = {t.label: t.integrity_keys for t in running.tiers}
    tiers = data.get("tiers")
    for tier in tiers if isinstance(tiers, list) else []:  # anything else is the model's to reject
        keys = tier.get("integrity_keys") if isinstance(tier, dict) else None
        if isinstance(keys, list) and REDACTED in keys:
            label = tier.get("name") or tier.get("backend")
            tier["integrity_keys"] = running_keys.get(label, [])
    try:
        return LifeboatConfig.model_validate(data), []
    except ValidationError as exc:
        return None, [{"loc": loc, "msg": msg} for loc, msg in validation_problems(exc, LifeboatConfig)]


def parse_hint(data: Any, *, eta: bool) -> tuple[str, float, list[dict[str, str]]]:
    """Check a staging hint's body: (session, eta_s, []) or ("", 0, [{loc, msg}, ...])."""
    if not isinstance(data, dict):
        return "", 0.0, [{"loc": "", "msg": f"the hint must be a JSON object, got {type(data).__name__}"}]
    errors = []
    session = data.get("session")
    if not isinstance(session, str) or not 0 < len(session) <= MAX_SESSION_CHARS:
        errors.append({"loc": "session", "msg": f"a non-empty string of at most {MAX_SESSION_CHARS} characters "
                                                "(the tag the session's blocks were stored with)"})
    eta_s = data.get("eta_s", 0.0)
    if eta and (isinstance(eta_s, bool) or not isinstance(eta_s, int | float) or not math.isfinite(eta_s)
                or not 0 <= eta_s <= MAX_ETA_S):
        errors.append({"loc": "eta_s", "msg": f"seconds from now until the session returns, 0 to {MAX_ETA_S:g}"})
    unknown = set(data) - ({"session", "eta_s"} if eta else {"session"})
    errors += [{"loc": name, "msg": "unknown key"} for name in sorted(unknown)]
    if errors:
        return "", 0.0, errors
    return session, float(eta_s), []  # type: ignore[return-value]


async def _json_body(request: Request) -> tuple[Any, JSONResponse | None]:
    if int(request.headers.get("content-length") or 0) > MAX_BODY_BYTES:
        return None, JSONResponse({"error": f"body larger than {MAX_BODY_BYTES} bytes"}, status_code=413)
    body = await request.body()
    if len(body) > MAX_BODY_BYTES:
        return None, JSONResponse({"error": f"body larger than {MAX_BODY_BYTES} bytes"}, status_code=413)
    try:
        return json.loads(body), None
    except ValueError as exc:
        return None, JSONResponse({"ok": False, "errors": [{"loc": "", "msg": f"not valid JSON: {exc}"}]},
                                  status_code=400)


def create_app(cache: TieredCache, *, token: str, history: History | None = None, spool: Path | None = None,
               allowed_hosts: list[str] | None = None) -> Starlette:
    """The dashboard app for ``cache``; ``allowed_hosts`` guards loopback binds against DNS rebinding."""
    if len(token) < 16:
        raise ValueError("the dashboard token must have at least 16 characters")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(spool))
    history = history or History(lambda: node_sample(spool)[0])
    page = _static("index.html")
    static = {name: (_static(name), media) for name, media in STATIC_FILES.items()}

    def authorized(request: Request) -> JSONResponse | None:
        given = request.headers.get("x-lifeboat-token") or ""
        auth = request.headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if not given:
            return JSONResponse({"error": "config writes need the dashboard token (printed at start, or "
                                          "dashboard.token in the config): send it as X-Lifeboat-Token"},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"error": "wrong dashboard token"}, status_code=403)
        return None

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    def static_file(name: str):  # type: ignore[no-untyped-def]
        body, media = static[name]

        async def serve(request: Request) -> Response:
            return Response(body, media_type=media, headers={"Cache-Control": "no-store"})
        return serve

    async def metrics(request: Request) -> Response:
        return Response(await run_in_threadpool(generate_latest, registry), media_type=CONTENT_TYPE_LATEST)

    async def stats(request: Request) -> Response:
        sample, processes = await run_in_threadpool(node_sample, spool)
        return JSONResponse(stats_payload(sample, processes, cache, history.recent_events()))

    async def history_points(request: Request) -> Response:
        return JSONResponse({"interval_s": history.interval_s, "points": history.recent_points()})

    async def get_config(request: Request) -> Response:
        last = cache.last_reconfiguration
        return JSONResponse({"config": redacted_config(cache.config), "pid": os.getpid(),
                             "restart_pending": last.restart if last else []})

    async def validate(request: Request) -> Response:
        data, problem = await _json_body(request)
        if problem is not None:
            return problem
        config, errors = await run_in_threadpool(parse_config, data, cache.config)
        return JSONResponse({"ok": config is not None, "errors": errors}, status_code=200 if config else 422)

    async def guarded_body(request: Request) -> tuple[Any, Response | None]:
        """The JSON body of a request that changes the node (token checked), or the refusal to send."""
        refused = authorized(request)
        if refused is not None:
            return None, refused
        return await _json_body(request)

    async def post_config(request: Request) -> Response:
        data, problem = await guarded_body(request)
        if problem is not None:
            return problem
        config, errors = await run_in_threadpool(parse_config, data, cache.config)
        if config is None:
            return JSONResponse({"ok": False, "errors": errors}, status_code=422)
        restart = await run_in_threadpool(cache.apply_config, config)
        result = cache.last_reconfiguration
        applied = result.applied if result else []
        for line in applied:
            history.add_event("info", f"config: {line}")
        for line in restart:
            history.add_event("warning", f"config (needs restart): {line}")
        return JSONResponse({"ok": True, "applied": applied, "restart": restart,
                             "config": redacted_config(cache.config)})

    async def hint(request: Request, *, eta: bool) -> Response:
        data, problem = await guarded_body(request)
        if problem is not None:
            return problem
        session, eta_s, errors = parse_hint(data, eta=eta)
        if errors:
            return JSONResponse({"ok": False, "errors": errors}, status_code=422)
        if eta:
            blocks = await run_in_threadpool(cache.stage, session, eta_s)
            return JSONResponse({"ok": True, "session": session, "eta_s": eta_s, "blocks": blocks})
        wasted = await run_in_threadpool(cache.release, session)
        return JSONResponse({"ok": True, "session": session, "wasted_bytes": wasted})

    async def post_stage(request: Request) -> Response:
        return await hint(request, eta=True)

    async def post_release(request: Request) -> Response:
        return await hint(request, eta=False)

    routes = [
        Route("/", index),
        *(Route(f"/static/{name}", static_file(name)) for name in STATIC_FILES),
        Route("/metrics", metrics),
        Route("/api/stats", stats),
        Route("/api/history", history_points),
        Route("/api/config", get_config, methods=["GET"]),
        Route("/api/config", post_config, methods=["POST"]),
        Route("/api/config/validate", validate, methods=["POST"]),
        Route("/api/stage", post_stage, methods=["POST"]),
        Route("/api/release", post_release, methods=["POST"]),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    app = Starlette(routes=routes, middleware=middleware)
    app.state.history = history
    return app
