"""``lifeboatcache plugins``: what is installed, from which distribution, and whether it loaded."""

from __future__ import annotations

import json

import typer
from lifeboatcache_core.plugins import get_registry
from rich.console import Console
from rich.table import Table


def plugin_rows() -> list[dict[str, str]]:
    """One row per registered name (kind, name), plus one per plugin that registered nothing."""
    registry = get_registry()
    rows: list[dict[str, str]] = []
    named: set[str] = set()
    for kind, entries in registry.entries.items():
        for name, reg in sorted(entries.items()):
            status = registry.plugins.get(reg.plugin)
            rows.append({
                "name": name,
                "kind": kind,
                "distribution": reg.distribution,
                "version": reg.version,
                "status": status.status if status else "ok",
                "plugin": reg.plugin,
                "target": reg.target,
            })
            named.add(reg.plugin)
    for plugin, status in sorted(registry.plugins.items()):
        if plugin not in named:
            rows.append({
                "name": plugin, "kind": "plugin", "distribution": status.distribution,
                "version": status.version, "status": status.status, "plugin": plugin, "target": "",
            })
    return rows


def register(app: typer.Typer) -> None:
    @app.command("plugins")
    def plugins(as_json: bool = typer.Option(False, "--json", help="Print a JSON list.")) -> None:
        """List backends, codecs, policies and adapters with their status."""
        rows = plugin_rows()
        if as_json:
            typer.echo(json.dumps(rows, indent=1))
            return
        table = Table("name", "kind", "distribution", "version", "status")
        for row in rows:
            table.add_row(row["name"], row["kind"], row["distribution"], row["version"], row["status"])
        Console().print(table)
