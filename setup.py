"""The app's extras, one per first-party plugin name, computed from the sibling package folders.

Why code and not a table in pyproject.toml: a new first-party package is then one copied folder
(``backends/<name>``, ``manifests/<name>``, ``codecs/<name>``, ``policies/<name>``, ``adapters/<name>``) and nothing
else to edit. Each folder's ``pyproject.toml`` names its distribution, version and plugin entry
point (group ``lifeboatcache``); every name its ``_plugin`` module registers gets an extra, so
``pip install 'lifeboatcache[<name>]'`` installs the package that provides ``<name>``. The core
reads these extras back from the installed metadata for its "not installed" hint
(``lifeboatcache_core.registry.first_party``).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

KINDS = ("backends", "manifests", "codecs", "policies", "adapters")
REGISTER_CALLS = {"backend", "manifest", "codec", "policy", "adapter"}
#: extras that are not a plugin package
STATIC_EXTRAS = {
    "fleet": ["lifeboatcache-manifest-postgres==0.1.0"],  # the fleet's shared manifest store
    "dashboard": ["starlette>=0.37", "uvicorn>=0.29"],
    "all": [],
}


def registered_names(module_file: Path) -> list[str]:
    """Names a ``_plugin`` module registers (``register.backend("s3", ...)`` ...), read without importing it."""
    names = []
    for node in ast.walk(ast.parse(module_file.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REGISTER_CALLS
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.append(node.args[0].value)
    return names


def plugin_extras(root: Path) -> dict[str, list[str]]:
    """``{name: ["<distribution>==<version>"]}`` for every plugin name of every package folder under ``root``."""
    extras: dict[str, list[str]] = {}
    for pyproject in sorted(p for kind in KINDS for p in root.glob(f"{kind}/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        requirement = f"{project['name']}=={project['version']}"
        for name, target in project.get("entry-points", {}).get("lifeboatcache", {}).items():
            module = pyproject.parent / "src" / Path(*target.split(":")[0].split("."))
            source = module.with_suffix(".py") if module.with_suffix(".py").exists() else module / "__init__.py"
            for extra in dict.fromkeys([name, *(registered_names(source) if source.exists() else [])]):
                if extras.setdefault(extra, [requirement]) != [requirement]:
                    raise SystemExit(f"{pyproject}: extra {extra!r} is already provided by {extras[extra]}")
    return extras


if __name__ == "__main__":
    from setuptools import setup

    setup(extras_require={**plugin_extras(Path(__file__).resolve().parent), **STATIC_EXTRAS})
