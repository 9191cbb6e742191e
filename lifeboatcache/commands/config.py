"""``lifeboatcache config validate FILE`` and ``config show``."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from lifeboatcache_core.config import config_from_env, config_problems, load_config, parse_text
from lifeboatcache_core.errors import LifeboatError


def register(app: typer.Typer) -> None:
    config_app = typer.Typer(help="Validate and inspect configuration.", no_args_is_help=True)
    app.add_typer(config_app, name="config")

    @config_app.command("validate")
    def validate(path: str = typer.Argument(..., help="TOML or YAML config file")) -> None:
        """Exit 0 when valid; else exit 2 listing every problem, one a line, each with its key path."""
        try:
            text = Path(path).read_text()
            data = parse_text(text, "yaml" if Path(path).suffix in (".yaml", ".yml") else "toml")
            problems = config_problems(data)
            if not problems:
                load_config(path)  # what an engine will run: the same checks, once more
        except OSError as exc:
            typer.echo(f"invalid config {path}: cannot read it: {exc.strerror or exc}", err=True)
            raise typer.Exit(2) from None
        except LifeboatError as exc:
            typer.echo(f"invalid config {path}: {exc}", err=True)
            raise typer.Exit(2) from None
        if problems:
            typer.echo(f"invalid config {path}: {len(problems)} problem{'s' if len(problems) > 1 else ''}", err=True)
            for where, reason in problems:
                typer.echo(f"  {where}: {reason}" if where else f"  {reason}", err=True)
            raise typer.Exit(2)
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
