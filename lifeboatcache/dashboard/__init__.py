"""The node dashboard: live page, Prometheus ``/metrics`` and the config API on :9400.

``start_dashboard(cache)`` runs it in a background thread and never raises into the engine:
a busy port is one log line, after which this process spools its metrics for the process that
holds the port (one endpoint per node) and retries the port every few seconds, so another
process takes over when the serving one exits. Engine adapters reach it through
``lifeboatcache_core.dashboard_hook.start_dashboard`` (entry point ``lifeboatcache.dashboard``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lifeboatcache.dashboard.metrics_node import SamplePublisher, node_sample, spool_dir

if TYPE_CHECKING:
    import uvicorn
    from lifeboatcache_core.cache import TieredCache

    from lifeboatcache.dashboard.history import History

log = logging.getLogger("lifeboatcache.dashboard")

ENV_TOKEN = "LIFEBOAT_DASHBOARD_TOKEN"
RETRY_PORT_S = 10.0
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]


@dataclass
class DashboardHandle:
    """A running (or waiting-for-its-port) dashboard; ``stop()`` ends it."""

    host: str
    port: int
    token: str
    serving: threading.Event = field(default_factory=threading.Event)
    failed: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _server: uvicorn.Server | None = None
    _publisher: SamplePublisher | None = None
    _history: History | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def wait_serving(self, timeout: float = 10.0) -> bool:
        return self.serving.wait(timeout)

    def stop(self) -> None:
        """Stop serving and spooling; idempotent, never raises."""
        self._stop.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=10)
        for part in (self._publisher, self._history):
            if part is not None:
                part.stop()
        self.serving.clear()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _serve(handle: DashboardHandle, cache: TieredCache, announce: bool) -> None:
    try:
        _serve_until_stopped(handle, cache, announce)
    except Exception as exc:  # the engine keeps running without its dashboard
        handle.failed = f"{type(exc).__name__}: {exc}"
        log.warning("dashboard stopped: %s", handle.failed)


def _serve_until_stopped(handle: DashboardHandle, cache: TieredCache, announce: bool) -> None:
    import uvicorn

    from lifeboatcache.dashboard.server import create_app

    warned = False
    while not handle._stop.is_set():
        try:
            sock = _bind(handle.host, handle.port)
        except OSError as exc:
            if not warned:
                log.warning("dashboard: %s:%d is taken (%s); this process's metrics are spooled to %s for the "
                            "process serving it, retrying every %.0fs", handle.host, handle.port,
                            exc.strerror or exc, spool_dir(), RETRY_PORT_S)
                warned = True
            handle._stop.wait(RETRY_PORT_S)
            continue
        handle.port = sock.getsockname()[1]
        allowed = LOOPBACK_NAMES if _is_loopback(handle.host) else None
        app = create_app(cache, token=handle.token, history=handle._history, allowed_hosts=allowed)
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)
        handle._server = server
        if handle._stop.is_set():
            sock.close()
            return
        if announce:
            print(f"lifeboatcache dashboard: {handle.url}#token={handle.token}  (config writes need this token; "
                  "it is not printed again)", file=sys.stderr, flush=True)
        else:
            log.warning("lifeboatcache dashboard: %s", handle.url)
        watcher = threading.Thread(target=_mark_serving, args=(handle, server), daemon=True)
        watcher.start()
        try:
            server.run(sockets=[sock])
        finally:
            sock.close()
            handle.serving.clear()
        return


def _mark_serving(handle: DashboardHandle, server: uvicorn.Server) -> None:
    while not handle._stop.is_set():
        if server.started:
            handle.serving.set()
            return
        handle._stop.wait(0.02)


def start_dashboard(cache: TieredCache, host: str | None = None, port: int | None = None, *,
                    token: str | None = None) -> DashboardHandle:
    """Serve the dashboard of ``cache`` on ``host:port`` (config defaults: 127.0.0.1:9400) in the background.

    The write token is ``token``, else ``dashboard.token`` from the config, else
    ``$LIFEBOAT_DASHBOARD_TOKEN``, else a random one printed once to stderr. ``port=0`` picks a
    free port (see ``handle.port`` once ``handle.wait_serving()``). Never raises.
    """
    settings = cache.config.dashboard
    host = host or settings.host
    port = settings.port if port is None else port
    given = token or settings.token or os.environ.get(ENV_TOKEN)
    handle = DashboardHandle(host=host, port=port, token=given or secrets.token_urlsafe(24))
    try:
        from lifeboatcache.dashboard.history import History

        handle._history = History(lambda: node_sample()[0]).start()
        handle._publisher = SamplePublisher().start()
        handle._history.add_event("info", f"dashboard started in pid {os.getpid()}")
        handle._thread = threading.Thread(target=_serve, args=(handle, cache, given is None),
                                          name="lifeboat-dashboard", daemon=True)
        handle._thread.start()
    except Exception as exc:  # never into the engine
        handle.failed = f"{type(exc).__name__}: {exc}"
        log.warning("dashboard not started: %s", handle.failed)
    return handle


__all__ = ["DashboardHandle", "start_dashboard"]
