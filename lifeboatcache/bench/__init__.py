"""``lifeboatcache bench …``: one module per benchmark, each with ``register(app)``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer


def emit_json(result: dict[str, Any], out: Path | None, as_json: bool) -> None:
    """Write ``result`` to ``--out`` (if given) and print it with ``--json``, in one format."""
    text = json.dumps(result, indent=1)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if as_json:
        typer.echo(text)
