"""A short id of a model checkpoint, for namespaces (DESIGN §4).

Engines key KV by tokens, not by weights, so a new checkpoint under the same name would
silently reuse stale KV. Every engine adapter puts this id into its namespace.
"""

from __future__ import annotations

from pathlib import Path

import xxhash

#: files whose change means other weights; read as size + head + tail (see weights_fingerprint)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
SAMPLE_BYTES = 1 << 20


def weights_fingerprint(model: str) -> str:
    """A short id of a local checkpoint directory (or file); ``""`` for a hub id.

    Each weight file contributes its name, size, first and last MiB: a safetensors header
    (first bytes) lists every tensor's dtype, shape and offsets and the tail holds real
    weights, so a swapped checkpoint changes the id, while start-up stays O(files), not
    O(bytes) (hashing 100 GB of weights on every start is not acceptable).
    """
    path = Path(model)
    if not model or not path.exists():
        return ""
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and (p.suffix in WEIGHT_SUFFIXES or p.name == "config.json")
    )
    digest = xxhash.xxh3_128()
    for file in files:
        size = file.stat().st_size
        digest.update(f"{file.relative_to(path) if file != path else file.name}\0{size}\0".encode())
        with open(file, "rb") as handle:
            digest.update(handle.read(SAMPLE_BYTES))
            if size > 2 * SAMPLE_BYTES:
                handle.seek(size - SAMPLE_BYTES)
                digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()[:32]
