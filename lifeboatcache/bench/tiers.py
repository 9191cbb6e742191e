"""``lifeboatcache bench tiers``: the file tier's overhead over raw O_DIRECT I/O, side by side.

Both sides write then read the same byte pattern in blocks of the same size, with the same
number of threads, interleaved batch by batch in one run (so disk state and machine load hit
both alike). Reads are cold: both sides use O_DIRECT. The tier side goes through the whole
TieredCache path: block format, xxh3_128 over every payload, atomic rename, verification on
read.

With ``--codec NAME`` the tier encodes what it stores, so random bytes would tell nothing: both
sides then move real bf16 KV (SmolLM2-135M over the GPL-3 text, 256-token blocks, layout
``kv, layer, token, head, dim`` handed to the tier), and the tier side is reported two ways:
``tier_*_GBps`` is *logical* GB/s (raw KV bytes per second, what the engine sees, comparable
with the raw side's disk GB/s of the same run) and ``tier_*_stored_GBps`` the bytes that went
to or came from the disk; ``stored_per_raw`` is the tier's own ``bytes_written`` /
``raw_bytes_written``.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import typer
from lifeboatcache_core.abc import KVLayout
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import default_cache_dir, load_config_dict
from rich.console import Console
from rich.table import Table

from lifeboatcache.bench import engine_like_key

MiB = 1024 * 1024
GB = 1e9


@dataclass
class Phase:
    """Bytes moved and per-batch latencies of one side of one direction."""

    bytes: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    def add(self, nbytes: int, seconds: float) -> None:
        self.bytes += nbytes
        self.seconds += seconds
        self.latencies.append(seconds)

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / GB if self.seconds else 0.0

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies)
        if not lat:
            return 0.0
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000


def _aligned(size: int) -> mmap.mmap:
    return mmap.mmap(-1, size)  # page aligned, as O_DIRECT needs


class RawDirect:
    """Plain O_DIRECT files: open, one write (or read) of the whole block, close."""

    def __init__(self, root: Path, block_bytes: int, threads: int) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.block_bytes = block_bytes
        self.pool = ThreadPoolExecutor(threads)
        self.read_bufs = [_aligned(block_bytes) for _ in range(threads)]

    def _write(self, i: int, buf: mmap.mmap) -> None:
        fd = os.open(self.root / f"{i}.raw", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
        try:
            os.pwrite(fd, buf, 0)
        finally:
            os.close(fd)

    def _read(self, i: int, slot: int) -> None:
        fd = os.open(self.root / f"{i}.raw", os.O_RDONLY | os.O_DIRECT)
        try:
            if os.preadv(fd, [self.read_bufs[slot]], 0) != self.block_bytes:
                raise OSError("short raw read")
        finally:
            os.close(fd)

    def write_batch(self, ids: list[int], bufs: list[mmap.mmap]) -> None:
        list(self.pool.map(self._write, ids, bufs))

    def read_batch(self, ids: list[int]) -> None:
        list(self.pool.map(self._read, ids, range(len(ids))))


def smollm2_kv_blocks(block_tokens: int = 256, context: int = 2048) -> tuple[list[bytes], KVLayout]:
    """Real bf16 KV blocks (SmolLM2-135M over the first ``context`` tokens of the GPL-3 text) and their layout."""
    import numpy as np

    from lifeboatcache.bench.codecs import AXES, _default_text, smollm2_scorer, split_blocks

    exact = smollm2_scorer(_default_text(), context, 1).exact
    blocks = split_blocks(exact, block_tokens)
    layout = KVLayout("bfloat16", tuple(blocks[0].shape), AXES)
    return [np.ascontiguousarray(b).view(np.uint8).tobytes() for b in blocks], layout


def run_bench(path: Path, block_bytes: int, total_bytes: int, threads: int, backend: str = "file",
              tier_options: dict[str, object] | None = None, codec: str = "none",
              kv: tuple[list[bytes], KVLayout] | None = None) -> dict[str, float | int | str]:
    """Run both sides interleaved and return the JSON-able result.

    ``kv``: blocks of real KV and their layout (every block the same size, a multiple of 4096)
    to write instead of random bytes; ``block_bytes`` is then their size.
    """
    layout = None
    if kv is not None:
        kv_blocks, layout = kv
        block_bytes = len(kv_blocks[0])
        if block_bytes % 4096 or any(len(b) != block_bytes for b in kv_blocks):
            raise ValueError("KV blocks must all have one size, a multiple of 4096 (O_DIRECT)")
    blocks = max(1, total_bytes // block_bytes)
    patterns = [_aligned(block_bytes) for _ in range(threads)]
    for n, buf in enumerate(patterns):
        if kv is not None:
            buf.write(kv[0][n % len(kv[0])])
        else:
            buf.write(os.urandom(min(block_bytes, MiB)) * (block_bytes // min(block_bytes, MiB)))
        buf.seek(0)
        buf[:8] = n.to_bytes(8, "little")
    raw = RawDirect(path / "raw", block_bytes, threads)
    options = tier_options or {"path": str(path / "tier"), "o_direct": True}
    config = load_config_dict({
        "tiers": [{"name": "bench", "backend": backend, "capacity_gb": blocks * (block_bytes + 8192) / 1024**3 * 1.1,
                   "io_threads": threads, "codec": codec, **options}],
        "fallback_local": {"enabled": False},
    })
    cache = TieredCache(config, background_index=False)
    try:
        keys = [engine_like_key("bench", i) for i in range(blocks)]  # spread as real keys are
        sides = {"raw_write": Phase(), "tier_write": Phase(), "raw_read": Phase(), "tier_read": Phase()}
        batches = [list(range(s, min(s + threads, blocks))) for s in range(0, blocks, threads)]
        for n, ids in enumerate(batches):
            bufs = [patterns[j % threads] for j in range(len(ids))]
            order = (("raw", "tier") if n % 2 == 0 else ("tier", "raw"))
            for side in order:
                t0 = time.perf_counter()
                if side == "raw":
                    raw.write_batch(ids, bufs)
                else:
                    ok = cache.put([keys[i] for i in ids], bufs, layout=layout)
                    if not all(ok):
                        raise RuntimeError(f"tier put failed: {cache.health()}")
                sides[f"{side}_write"].add(block_bytes * len(ids), time.perf_counter() - t0)
        _drop_page_cache()
        dests = [_aligned(block_bytes) for _ in range(threads)]  # same kind of buffer as the raw side
        for n, ids in enumerate(batches):
            order = (("raw", "tier") if n % 2 == 0 else ("tier", "raw"))
            for side in order:
                t0 = time.perf_counter()
                if side == "raw":
                    raw.read_batch(ids)
                else:
                    ok = cache.get([keys[i] for i in ids], dests[: len(ids)])
                    if not all(ok):
                        raise RuntimeError("tier read missed a block it had stored")
                sides[f"{side}_read"].add(block_bytes * len(ids), time.perf_counter() - t0)
        for j, dest in enumerate(dests[: len(batches[-1])]):  # the bytes really round-tripped
            if dest[:] != patterns[j % threads][:]:
                raise RuntimeError("tier returned different bytes")
        tier_stats = cache.sample().tiers[0].stats()
    finally:
        cache.close()
        raw.pool.shutdown()
    result: dict[str, float | int | str] = {"block_bytes": block_bytes, "blocks": blocks, "threads": threads,
                                            "backend": backend}
    for name, phase in sides.items():
        result[f"{name}_GBps"] = round(phase.gbps, 4)
        result[f"{name}_p50_ms"] = round(phase.pct(0.50), 3)
        result[f"{name}_p99_ms"] = round(phase.pct(0.99), 3)
    result["write_ratio"] = round(sides["tier_write"].gbps / sides["raw_write"].gbps, 4)
    result["read_ratio"] = round(sides["tier_read"].gbps / sides["raw_read"].gbps, 4)
    result["codec"] = codec
    result["data"] = "kv" if kv is not None else "random"
    raw_written = int(tier_stats.get("raw_bytes_written", 0))
    stored = raw_written and int(tier_stats.get("bytes_written", 0)) / raw_written
    result["stored_per_raw"] = round(stored, 4) if raw_written else 0.0
    if stored:  # bytes on the disk per second: logical GB/s x stored share
        result["tier_write_stored_GBps"] = round(sides["tier_write"].gbps * stored, 4)
        result["tier_read_stored_GBps"] = round(sides["tier_read"].gbps * stored, 4)
    result["integrity"] = "xxh3_128"
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return result


def backend_options(backend: str, pairs: list[str], work: Path) -> dict[str, object] | None:
    """Tier options from ``KEY=VALUE`` pairs; local backends default to a directory in ``work``."""
    options: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"--option {pair!r} must look like KEY=VALUE")
        try:
            options[name] = json.loads(value)
        except ValueError:
            options[name] = value
    if backend == "file" and not options:
        return None  # run_bench's O_DIRECT file tier
    if backend == "nfs":
        options.setdefault("path", str(work / "tier"))
        Path(str(options["path"])).mkdir(parents=True, exist_ok=True)  # the nfs tier never creates its root
    if backend == "fsspec":
        options.setdefault("url", f"file://{work}/tier")
    return options


def _drop_page_cache() -> None:
    """Best effort: reads are O_DIRECT anyway; dropping also evicts metadata for fairness."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as fh:
            fh.write("3\n")
    except OSError:
        pass


def _print_table(result: dict[str, float | int | str]) -> None:
    coded = result.get("codec", "none") != "none"
    table = Table("side", "GB/s (tier: logical)" if coded else "GB/s", *(("stored GB/s",) if coded else ()),
                  "p50 ms/batch", "p99 ms/batch",
                  title=f"{result['blocks']} blocks of {int(result['block_bytes']) // 1024} KiB, "
                        f"{result['threads']} threads, batches of {result['threads']}, codec {result.get('codec')}"
                        + (f" (stored {float(result['stored_per_raw']):.3f} of raw)" if coded else ""))
    for name in ("raw_write", "tier_write", "raw_read", "tier_read"):
        stored = (f"{result.get(name + '_stored_GBps', result[name + '_GBps']):.3f}",) if coded else ()
        table.add_row(name, f"{result[name + '_GBps']:.3f}", *stored, f"{result[name + '_p50_ms']:.2f}",
                      f"{result[name + '_p99_ms']:.2f}")
    console = Console()
    console.print(table)
    console.print(f"write_ratio {result['write_ratio']:.3f}   read_ratio {result['read_ratio']:.3f}")


def register(app: typer.Typer) -> None:
    @app.command("tiers")
    def tiers(
        block_bytes: int = typer.Option(2 * MiB, "--block-bytes", help="Bytes per block (multiple of 4096)."),
        total_bytes: int = typer.Option(2 * 1024 * MiB, "--total-bytes", help="Bytes written per side."),
        threads: int = typer.Option(4, "--threads", help="I/O threads (and batch size) for both sides."),
        path: Path | None = typer.Option(None, "--path", help="Directory on the disk under test."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        backend: str = typer.Option("file", "--backend", help="Tier backend under test: file, nfs, s3, fsspec, ..."),
        option: list[str] = typer.Option([], "--option", help="Backend option KEY=VALUE (repeat; JSON values "
                                          "allowed), e.g. --option url=s3://bucket/bench --option endpoint_url=..."),
        codec: str = typer.Option("none", "--codec", help="The tier's codec (e.g. lossless). Not none: both sides "
                                  "move real SmolLM2 bf16 KV in 256-token blocks (--block-bytes ignored) and "
                                  "the tier's GB/s are logical (raw KV bytes/s)."),
    ) -> None:
        """Write then read N blocks through a tier and as raw O_DIRECT files under --path; compare."""
        if block_bytes % 4096:
            raise typer.BadParameter("--block-bytes must be a multiple of 4096 (O_DIRECT)")
        base = path or default_cache_dir() / "bench"
        base.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="tiers-", dir=base))
        try:
            result = run_bench(work, block_bytes, total_bytes, threads, backend,
                               backend_options(backend, option, work), codec=codec,
                               kv=smollm2_kv_blocks() if codec != "none" else None)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if as_json:
            typer.echo(json.dumps(result))
        else:
            _print_table(result)


