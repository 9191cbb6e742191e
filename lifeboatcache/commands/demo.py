"""``lifeboatcache demo``: the README's first command."""

from __future__ import annotations

from pathlib import Path

import typer

from lifeboatcache.storage_demo import run_demo


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        storage_only: bool = typer.Option(False, "--storage-only",
                                          help="Only the storage round trip across a restart (no engine, seconds)."),
        out: Path = typer.Option(Path("demo-results"), help="Where the engine demo writes its table, JSON and plots."),
    ) -> None:
        """Plain vLLM, vLLM's offloading and lifeboatcache on agent sessions (SmolLM2 on CPU), then a restart."""
        if storage_only:
            raise typer.Exit(run_demo())
        from lifeboatcache.grid.console import wide_console
        from lifeboatcache.grid.demo import run_engine_demo
        from lifeboatcache.grid.server import terminate_unwinds

        with terminate_unwinds():  # ``kill`` stops the demo's servers as Ctrl-C does
            status = run_engine_demo(out, wide_console())
        raise typer.Exit(status)
