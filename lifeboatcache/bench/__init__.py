"""``lifeboatcache bench …``: one module per benchmark, each with ``register(app)``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import typer
from lifeboatcache_core.keys import BlockKey


def engine_like_key(namespace: str, i: int) -> BlockKey:
    """The ``i``-th block's key as engines make them: a uniform 32-byte hash of it.

    vLLM's block hashes and SGLang's and LMCache's chunk hashes are uniform, so the file tier's
    shard folders (``ab/cd/``) fill evenly. Sequential digests would put every block of a run in
    one folder, where each create and rename waits on that folder's lock: a cost no engine's
    keys cause.
    """
    return BlockKey(namespace, hashlib.sha256(i.to_bytes(8, "big")).digest())


def emit_json(result: dict[str, Any], out: Path | None, as_json: bool) -> None:
    """Write ``result`` to ``--out`` (if given) and print it with ``--json``, in one format."""
    text = json.dumps(result, indent=1)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if as_json:
        typer.echo(text)
