"""``lifeboatcache bench …``: one module per benchmark, each with ``register(app)``."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def engine_workdir(workdir: Path | None, prefix: str) -> Iterator[Path]:
    """Where an engine benchmark keeps its tiers and engine logs while it runs.

    ``workdir`` (``--workdir``) is created if needed and kept. Without it, a temporary folder
    that is removed once the run has succeeded: a ``bench returning`` run leaves about a
    gigabyte of tier files, and runs that each left theirs filled a user's /tmp. A run that
    fails (or is interrupted) keeps its folder and names it on stderr, since its error points
    at the engine log inside.
    """
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir
        return
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    except BaseException:
        print(f"kept {work} (tiers and engine logs of the failed run)", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)


def emit_json(result: dict[str, Any], out: Path | None, as_json: bool) -> None:
    """Write ``result`` to ``--out`` (if given) and print it with ``--json``, in one format."""
    text = json.dumps(result, indent=1)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
    if as_json:
        typer.echo(text)


def parse_codec_setting(text: str) -> tuple[str, float]:
    """``CODEC`` or ``CODEC@FILL``: a tier's ``codec`` and ``codec_from_fill`` (0: every block coded),
    the one syntax of the benches' codec options (``lossless@0.8`` is what ``LIFEBOAT_CACHE=1`` uses)."""
    codec, at, fill = text.strip().partition("@")
    if not codec:
        raise typer.BadParameter(f"codec setting {text!r}: CODEC or CODEC@FILL")
    if not at:
        return codec, 0.0
    try:
        value = float(fill)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise typer.BadParameter(f"codec setting {text!r}: FILL (codec_from_fill) must be a number in (0, 1]")
    return codec, value
