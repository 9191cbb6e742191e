"""The dependency rules of DESIGN §2 / docs/ARCHITECTURE.md, checked with import-linter.

The contracts live in the root pyproject.toml (``[tool.importlinter]``); ``lint-imports``
prints which import breaks which contract. Imports under ``if TYPE_CHECKING:`` count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _importlinter() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]  # type: ignore[no-any-return]


def test_import_contracts_hold() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    assert lint_imports.exists(), "import-linter is missing: `make setup` installs requirements-test.txt"
    run = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"an import breaks the architecture (docs/ARCHITECTURE.md):\n{run.stdout}{run.stderr}"


def test_every_package_of_the_repository_is_under_the_contracts() -> None:
    """A package the contracts do not name is not checked at all: list it in [tool.importlinter]."""
    found = {p.name for kind in ("backends", "manifests", "codecs", "policies", "adapters")
             for p in ROOT.glob(f"{kind}/*/src/*") if (p / "__init__.py").exists()}
    assert found, "no plugin packages found"
    missing = found - set(_importlinter()["root_packages"])  # type: ignore[arg-type]
    assert not missing, f"add {sorted(missing)} to root_packages and the contracts in pyproject.toml"


def _attribute_writes(source: str) -> list[tuple[int, str, str]]:
    """(line, root name, statement) of every assignment to an attribute (or an item of one) in ``source``."""
    writes = []
    for node in ast.walk(ast.parse(source)):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            while isinstance(target, ast.Subscript):
                target = target.value
            if not isinstance(target, ast.Attribute):
                continue
            root: ast.expr = target
            while isinstance(root, (ast.Attribute, ast.Subscript)):
                root = root.value
            writes.append((node.lineno, ast.unparse(root), ast.unparse(node)))
    return writes


def test_the_cache_writes_no_tiers_state() -> None:
    """``TieredCache`` owns its tier list, not its tiers: it asks a tier to count, link or load
    (``Tier.count``, ``link_below``, ``begin_index_load``) rather than setting the tier's
    attributes under the tier's lock itself (docs/ARCHITECTURE.md, "Who owns which state")."""
    source = (ROOT / "lifeboatcache_core/src/lifeboatcache_core/cache.py").read_text()
    own = {"self", "job", "result"}  # the cache, its job records, the reconfiguration result it builds
    foreign = [f"cache.py:{line}: {statement}" for line, root, statement in _attribute_writes(source)
               if root not in own]
    assert not foreign, "cache.py writes another object's state:\n" + "\n".join(foreign)


def test_cores_engine_settings_are_only_what_core_reads() -> None:
    """vLLM's chunk size, CPU tier and promotion rules are the vLLM adapter's (``[engine.vllm]``,
    its ``VllmSettings``); core's ``EngineConfig`` holds only ``on_error`` (``engine.open_for_engine``)."""
    from lifeboatcache_core.config import EngineConfig

    assert set(EngineConfig.model_fields) == {"on_error"}
