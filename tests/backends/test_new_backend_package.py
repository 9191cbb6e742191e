"""A newcomer's first-party backend: copy one package folder, rename it, and it works.

No edit to core (its "not installed" hint reads the app's extras) and none to the root
pyproject.toml (setup.py gives every plugin name of every package folder an extra). The copy
is installed into a private directory, never into the shared environment, and runs the shared
contract tests in a subprocess that finds it through its entry point like any plugin.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

from lifeboatcache_core.registry import first_party_from_requirements

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "backends" / "fsspec"

CONTRACT_RUN = '''
import hashlib

from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import load_config_dict
from lifeboatcache_core.keys import BlockKey
from lifeboatcache_core.plugins import get_registry
from lifeboatcache_core.testing import BackendContract, CorruptionContract

CLS = get_registry().load("backend", "mystore")  # found through the copy's entry point


def make(where):
    root = hashlib.sha256(str(where).encode()).hexdigest()[:16]
    return CLS(CLS.config_model(url=f"memory://mystore-{root}"), tier="mystore")


def test_it_is_the_copy():
    assert CLS.__module__ == "lifeboatcache_backend_mystore.backend"
    assert get_registry().registration("backend", "mystore").distribution == "lifeboatcache-backend-mystore"


def test_a_cache_serves_from_it():
    config = load_config_dict({"tiers": [{"name": "m", "backend": "mystore", "url": "memory://mystore-cache",
                                           "capacity_gb": 0.01}], "fallback_local": {"enabled": False}})
    with TieredCache(config, background_index=False) as cache:
        key, buf = BlockKey("ns", bytes(32)), bytearray(4096)
        assert cache.put([key], [b"k" * 4096]) == [True] and cache.get([key], [buf]) == [True]
        assert bytes(buf) == b"k" * 4096


class TestMyStore(BackendContract, CorruptionContract):
    def make_backend(self, tmp_path):
        return make(tmp_path)

    def damage(self, backend, k, mutate):
        path = backend.path_of(k)
        backend.fs.pipe_file(path, mutate(backend.fs.cat_file(path)))
'''


def copy_as_newcomer(tree: Path) -> Path:
    """What CONTRIBUTING / docs/ARCHITECTURE.md tell a newcomer: copy the folder, rename three names."""
    new = tree / "backends" / "mystore"
    shutil.copytree(TEMPLATE, new, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build"))
    (new / "src" / "lifeboatcache_backend_fsspec").rename(new / "src" / "lifeboatcache_backend_mystore")
    for path in [new / "pyproject.toml", *new.rglob("*.py")]:
        text = path.read_text().replace("lifeboatcache_backend_fsspec", "lifeboatcache_backend_mystore")
        text = text.replace("lifeboatcache-backend-fsspec", "lifeboatcache-backend-mystore")
        if path.name == "_plugin.py":  # the registered name and its extra
            text = text.replace('"fsspec",', '"mystore",').replace('extra="fsspec"', 'extra="mystore"')
        if path.name == "pyproject.toml":  # the entry point's name
            text = text.replace('\nfsspec = "', '\nmystore = "')
        path.write_text(text)
    return new


def root_setup() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lifeboatcache_root_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # not __main__: setup() does not run
    return module


def test_a_copied_backend_folder_passes_the_contract_tests_with_no_other_edit(tmp_path: Path) -> None:
    new = copy_as_newcomer(tmp_path / "repo")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation",
                    "--target", str(site), str(new)], check=True, capture_output=True, timeout=300)
    (tmp_path / "run" / "test_mystore.py").parent.mkdir()
    (tmp_path / "run" / "test_mystore.py").write_text(textwrap.dedent(CONTRACT_RUN))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mystore.py"],
                         cwd=tmp_path / "run", env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "failed" not in run.stdout


def test_the_copy_gets_its_extra_and_the_install_hint(tmp_path: Path) -> None:
    copy_as_newcomer(tmp_path / "repo")
    extras = root_setup().plugin_extras(tmp_path / "repo")
    assert extras == {"mystore": ["lifeboatcache-backend-mystore==0.1.0"]}
    requires = [f'{req}; extra == "{extra}"' for extra, reqs in extras.items() for req in reqs]
    assert first_party_from_requirements(requires) == {("backend", "mystore"): ("lifeboatcache-backend-mystore",
                                                                                  "mystore")}


def test_the_repositorys_own_extras_are_one_per_plugin_name() -> None:
    extras = root_setup().plugin_extras(ROOT)
    assert {"s3", "nfs", "ontap", "fsspec", "fp8", "lossless", "lbq", "oscar", "int2", "arc", "score", "epicache",
            "vllm", "sglang", "lmcache"} <= set(extras)
    assert extras["oscar"] == extras["lbq"] == ["lifeboatcache-codec-lbq==0.1.0"]
