"""``lifeboatcache config validate FILE`` and ``config show``."""

from __future__ import annotations

import json

import typer
from lifeboatcache_core.config import config_from_env, load_config
from lifeboatcache_core.errors import LifeboatError


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Validate and inspect configuration.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("validate")
    def validate(path: str = typer.Argument(..., help="TOML or YAML config file")) -> None:
        """Exit 0 when valid; else exit 2 with a one-line reason naming the key."""
        try:
            load_config(path)
        except LifeboatError as exc:
            typer.echo(f"invalid config {path}: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"{path}: ok")

    @config_app.command("show")
    def show() -> None:
        """Print the effective config ($LIFEBOAT_CACHE_CONFIG or the embedded defaults) as JSON."""
        try:
            cfg = config_from_env()
        except LifeboatError as exc:
            typer.echo(f"invalid config: {exc}", err=True)
            raise typer.Exit(2) from None
        typer.echo(json.dumps(cfg.model_dump(mode="json"), indent=1))
