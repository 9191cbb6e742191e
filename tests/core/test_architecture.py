"""The dependency rules of DESIGN §2 / docs/ARCHITECTURE.md, checked with import-linter.

The contracts live in the root pyproject.toml (``[tool.importlinter]``); ``lint-imports``
prints which import breaks which contract. Imports under ``if TYPE_CHECKING:`` count.
"""

from __future__ import annotations

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
