"""``lifeboatcache demo``: the README's first command."""

from __future__ import annotations

import typer

from lifeboatcache.storage_demo import run_demo


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(storage_only: bool = typer.Option(False, "--storage-only",
                                               help="Only the storage round trip across a restart.")) -> None:
        """Store agent sessions' KV blocks, restart, and serve them back from the tier."""
        raise typer.Exit(run_demo())
