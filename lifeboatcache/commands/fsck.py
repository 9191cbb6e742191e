"""``lifeboatcache fsck PATH [--fix] [--json]``: check (and repair) a file tier."""

from __future__ import annotations

import json

import typer
from lifeboatcache_backend_file.backend import FileConfig
from lifeboatcache_core.integrity import ENV_KEYS, signer_from_keys
from rich.console import Console
from rich.table import Table

from lifeboatcache.fsck import fsck


def register(app: typer.Typer) -> None:
    @app.command("fsck")
    def fsck_command(
        path: str = typer.Argument(..., help="The file tier's directory (its `path` option)."),
        fix: bool = typer.Option(False, "--fix", help="Quarantine damaged blocks and repair the manifest."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        tier: str | None = typer.Option(None, "--tier", help="Tier name in the manifest (if several)."),
        stale_partial_seconds: float = typer.Option(
            FileConfig.model_fields["stale_partial_seconds"].default, "--stale-partial-seconds", min=0.0,
            help="The tier's stale_partial_seconds: another host's .partial file is a live write until this old."),
        keyed: bool = typer.Option(False, "--keyed", help=f"The tier is keyed: also verify every block's tag with "
                                   f"the keys in ${ENV_KEYS} (never on the command line, where ps shows them)."),
    ) -> None:
        """Verify every block of a file tier against its hash and its manifest. Exit 1 if problems remain."""
        try:
            signer = signer_from_keys([], ENV_KEYS, "fsck --keyed") if keyed else None
            report = fsck(path, fix=fix, tier=tier, signer=signer, stale_partial_seconds=stale_partial_seconds)
        except (FileNotFoundError, NotADirectoryError, ValueError) as exc:
            typer.echo(f"fsck: {exc}", err=True)
            raise typer.Exit(2) from None
        if as_json:
            typer.echo(json.dumps(report.as_dict()))
        else:
            columns = ("ok", "corrupt", "partial", "in_flight", "orphan", "missing", "foreign")
            table = Table(*columns, title=f"{report.path} (manifest {report.manifest})")
            table.add_row(*(str(getattr(report, k)) for k in columns))
            console = Console()
            console.print(table)
            for line in report.examples:
                console.print(f"  {line}")
            if fix:
                console.print(f"fixed: {report.fixed}")
        raise typer.Exit(1 if report.problems_left else 0)
