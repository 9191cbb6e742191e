"""``lifeboatcache dashboard``: open the configured cache and serve its dashboard until Ctrl-C."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import typer
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import config_from_env, load_config
from lifeboatcache_core.errors import LifeboatError


def register(app: typer.Typer) -> None:
    @app.command("dashboard")
    def dashboard(
        config: Path | None = typer.Option(None, "--config", help="TOML/YAML config (default: "
                                           "$LIFEBOAT_CACHE_CONFIG or the embedded defaults)"),
        host: str | None = typer.Option(None, help="Bind address (default: dashboard.host, 127.0.0.1)"),
        port: int | None = typer.Option(None, help="Port (default: dashboard.port, 9400)"),
        token: str | None = typer.Option(None, envvar="LIFEBOAT_DASHBOARD_TOKEN",
                                         help="Token for config writes (default: generated and printed once)"),
    ) -> None:
        """Serve the live page, /metrics and the config API of a cache opened from the config."""
        from lifeboatcache.dashboard import start_dashboard

        try:
            cfg = load_config(config) if config else config_from_env()
        except LifeboatError as exc:
            typer.echo(f"invalid config: {exc}", err=True)
            raise typer.Exit(2) from None
        cache = TieredCache(cfg)
        handle = start_dashboard(cache, host, port, token=token)
        # Stop on Ctrl-C and on SIGTERM, installed explicitly: a SIGINT ignored by the parent (some
        # launchers and test runners) would otherwise never become a KeyboardInterrupt here.
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        try:
            if not handle.wait_serving(15):
                typer.echo(f"dashboard could not serve on {handle.host}:{handle.port} "
                           f"({handle.failed or 'port taken, see the log line above'}); choose another --port",
                           err=True)
                raise typer.Exit(1)
            while handle.serving.is_set() and not stop.wait(0.5):
                pass
        finally:
            handle.stop()
            cache.close()
