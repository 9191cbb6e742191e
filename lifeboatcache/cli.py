"""The ``lifeboatcache`` command line.

Sub-commands live in their own modules and are discovered, so a feature adds a file rather
than editing this one: every module in ``lifeboatcache/commands/`` and
``lifeboatcache/bench/`` defines ``register(app: typer.Typer) -> None``.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil

import typer

from lifeboatcache import bench, commands

app = typer.Typer(help="lifeboatcache: tiered, persistent KV cache for LLM inference servers.",
                  no_args_is_help=True, add_completion=False)
bench_app = typer.Typer(help="Benchmarks; each prints a table, or one JSON object with --json.",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")


def _register_all(package: object, target: typer.Typer) -> None:
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):  # type: ignore[attr-defined]
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")  # type: ignore[attr-defined]
        register = getattr(module, "register", None)
        if register is not None:
            register(target)


_register_all(commands, app)
_register_all(bench, bench_app)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
