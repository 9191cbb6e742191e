"""``oscar``: 2-bit KV with a calibrated orthogonal rotation and calibrated clipping.

After OSCAR (Zhou et al., "Offline Spectral Covariance-Aware Rotation for 2-bit KV Cache
Quantization", 2026). Plain 2-bit groups fail because a few large coordinates set each
group's range and the other values collapse onto one or two of the four levels. OSCAR rotates
every head's vectors by a fixed orthogonal matrix calibrated offline — an eigenbasis of a
covariance followed by a Walsh-Hadamard transform, which spreads the variance evenly over
all coordinates — and clips each group's range by a calibrated factor before quantizing.

What we had to choose, since a storage codec sees only the cache:
- OSCAR's key eigenbasis comes from the *query* covariance and its value eigenbasis from the
  attention-score-weighted value covariance. Queries and scores never reach a KV store, so we
  use the second-moment matrix of the keys and values themselves, per (layer, head). The
  Hadamard step after it then makes every rotated coordinate's variance equal on the sample.
  (Subtracting a calibrated per-channel mean first lowered the squared error slightly but
  raised SmolLM2's perplexity from 17.3 to 21.9, so we do not.)
- Groups are one per (token, head) vector (64 values, their grid in two bytes, ``ranges =
  "log8"``: 7.1x on bf16; a float16 scale + zero, 6.4x, before 2026-12-07), so OSCAR's
  permuted bit-reversal ordering across several groups per head has nothing to do.
- The clip factor is chosen per (layer, K/V) from a grid by the smallest reconstruction error
  on the sample (OSCAR also calibrates clipping thresholds offline).
- OSCAR keeps the first 64 and the last 256 tokens of a request in bf16 inside its attention
  kernel. A block store does not know positions, and the recent window never reaches it; what
  it can keep is the attention sink (the first token), which takes a large share of every
  query's attention. Sinks are recognizable by their norms (far from the block's other tokens
  in most layers and heads), so each block keeps up to ``exact_tokens`` such tokens unquantized
  (default 2 per block: at worst 6.2x instead of 6.4x). On SmolLM2 this mattered with
  mean-centring (perplexity 21.9 -> 16.8) and not with the rotation as it is now (17.3 vs
  17.4, i.e. nothing); we keep it, as OSCAR does, for models whose sinks are fragile.

- OSCAR quantizes every layer at 2 bits. On SmolLM2 a few layers' keys cost most of the
  perplexity (K17 and K18 alone 0.67 of GPL-3's 1.56 points), and a store cannot see which:
  ``precise_k``/``precise_v`` name layers kept at ``precise_bits`` (rotated as the rest, not
  clipped), and ``four_bit_k``/``four_bit_v`` the few kept at 4 bits, chosen offline with the
  model (``lifeboatcache bench codecs --rank-oscar-layers``: the head of its ranking at 4 bits,
  as many more at 3 as keep 6x).

The rotation (matrices and clip factors) is calibrated on the first block the codec
encodes for a given KV shape — or explicitly with :meth:`OscarCodec.calibrate` — and stored
once, content-addressed, as ``oscar-<id>.npz`` in ``rotation_dir``, with ``current-<shape>.txt``
naming the one new blocks of that shape use (also after a restart); each block records the id.
The codec never sees a block's namespace, so "once per namespace" is "once per KV shape":
models of one shape share a rotation unless ``calibrate`` is called for one of them.
A block whose rotation file is missing decodes as a miss. Tiers that share blocks between
hosts must share ``rotation_dir`` too (put it on the shared storage).
"""

from __future__ import annotations

import io
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import platformdirs
import xxhash
from lifeboatcache_core.abc import KVLayout, PluginConfig
from lifeboatcache_core.chunkfile import Buffer
from lifeboatcache_core.errors import CorruptBlockError
from pydantic import Field, field_validator, model_validator
from threadpoolctl import ThreadpoolController

from lifeboatcache_codec_lbq import kvarray
from lifeboatcache_codec_lbq.groups import dequantize_rows, quantize_rows
from lifeboatcache_codec_lbq.lbq import LOG8, ROUNDING_SLACK, GroupQuantCodec

log = logging.getLogger("lifeboatcache.codec.oscar")

BITS = 2
#: mean |log(norm / median norm)| above which a token is kept exact (see sink_tokens)
SINK_SCORE = 0.8
#: largest head dimension we rotate (the rotation is dim x dim per layer and head)
MAX_DIM = 1024
class _SingleThreadedBlas:
    """Limit BLAS to one thread while any thread is inside; restore it once none has been for ``linger_s``.

    threadpoolctl's limiter is process-wide and restores what it saw on entry, so two tier I/O
    threads nesting it could leave BLAS limited for good; a counted limiter cannot. The restore
    lingers because codec threads enter and leave many times per block: restoring whenever the
    count touched zero woke BLAS's own worker threads between two blocks, which then spun on the
    cores the codec threads needed (oscar gained nothing from a second thread: 0.27 GB/s either
    way, 0.62 with BLAS single-threaded for the whole process).
    """

    def __init__(self, linger_s: float = 1.0) -> None:
        self.linger_s = linger_s
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # the restorer waits on it
        self._inside = 0
        self._idle_since = 0.0
        self._limiter: Any = None
        self._controller: ThreadpoolController | None = None  # finds the loaded BLAS once
        self._restorer: threading.Thread | None = None  # one for the process, started on first use
        #: how many times BLAS was limited (a test's view of the toggling)
        self.limited = 0

    def __enter__(self) -> None:
        with self._lock:
            if self._limiter is None:
                if self._controller is None:
                    self._controller = ThreadpoolController()
                self._limiter = self._controller.limit(limits=1, user_api="blas")
                self.limited += 1
                if self._restorer is None:
                    self._restorer = threading.Thread(target=self._restore_when_idle, name="lifeboat-oscar-blas",
                                                      daemon=True)
                    self._restorer.start()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                self._idle_since = time.monotonic()
                self._idle.notify()

    def _restore_when_idle(self) -> None:
        """Restore BLAS's limits once no thread has been inside for ``linger_s`` (a wait and a notify per
        block, not a timer thread per block)."""
        with self._lock:
            while True:
                if self._limiter is None or self._inside:
                    self._idle.wait()
                    continue
                remaining = self._idle_since + self.linger_s - time.monotonic()
                if remaining > 0:
                    self._idle.wait(remaining)
                    continue
                self._limiter.restore_original_limits()
                self._limiter = None

    def restored(self, timeout_s: float) -> bool:
        """Wait until BLAS has its original limits back (True), or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._limiter is None:
                    return True
            time.sleep(0.02)
        return False


#: around our small matmuls and eigendecompositions (see _rotate)
_SINGLE_THREADED_BLAS = _SingleThreadedBlas()
CLIP_GRID = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5)


def default_rotation_dir() -> Path:
    return Path(platformdirs.user_cache_dir("lifeboatcache")) / "oscar"


class OscarConfig(PluginConfig):
    """Options of the ``oscar`` codec (a tier's ``codec_options``)."""

    rotation_dir: Path = Field(
        default_factory=default_rotation_dir,
        description="where calibrated rotations are kept; share it between hosts that share a tier")
    exact_tokens: int = Field(
        2, ge=0, le=64, description="most tokens per block kept unquantized when their norms mark them as sinks")
    precise_k: list[int] = Field(
        default_factory=list,
        description="layers whose keys are stored at precise_bits, not 2: the few a model's perplexity is most "
                    "sensitive to (rank them with `lifeboatcache bench codecs --rank-oscar-layers`)")
    precise_v: list[int] = Field(default_factory=list, description="the same for values")
    precise_bits: Literal[3, 4] = Field(
        3, description="bits per value of the precise layers (3: twice as many layers as 4 at one ratio, which "
                       "held up better on texts the layers were not chosen on)")
    four_bit_k: list[int] = Field(
        default_factory=list,
        description="layers whose keys are stored at 4 bits whatever precise_bits says: the head of a ranking, "
                    "far costlier at 2 bits than the rest (SmolLM2: K17, K18); not also in precise_k")
    four_bit_v: list[int] = Field(default_factory=list, description="the same for values; not also in precise_v")
    ranges: Literal["log8", "float16"] = Field(
        "log8", description="each row's grid (64 values) in two bytes (log8: 7.1x plain, room for about 24 precise "
                            "layers at 6x) or in a float16 scale and zero (6.4x plain; blocks written before "
                            "2026-12-07)")

    @field_validator("precise_k", "precise_v", "four_bit_k", "four_bit_v")
    @classmethod
    def _layers(cls, layers: list[int]) -> list[int]:
        if any(layer < 0 for layer in layers) or len(set(layers)) != len(layers):
            raise ValueError(f"precise layers must be distinct layer indices >= 0, got {layers}")
        return sorted(layers)

    @model_validator(mode="after")
    def _one_width_a_layer(self) -> OscarConfig:
        for half in ("k", "v"):
            both = set(getattr(self, f"precise_{half}")) & set(getattr(self, f"four_bit_{half}"))
            if both:
                raise ValueError(f"layers {sorted(both)} are in both precise_{half} and four_bit_{half}: name each "
                                 "layer once, at the width it is to have")
        return self


def hadamard(n: int) -> np.ndarray:
    """The orthonormal n x n Walsh-Hadamard matrix (Sylvester), n a power of two."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    h = np.ones((1, 1), dtype=np.float64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def _mixer(n: int) -> np.ndarray:
    """Hadamard when ``n`` is a power of two, else a fixed seeded random orthogonal matrix."""
    if n & (n - 1) == 0:
        return hadamard(n)
    q, r = np.linalg.qr(np.random.default_rng(n).standard_normal((n, n)))
    return q * np.sign(np.diag(r))


class Rotation:
    """Per half ("k", "v"): matrices (layer, head, dim, dim) and clip factors (layer,)."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        self.blob = buf.getvalue()
        self.id = xxhash.xxh3_128_hexdigest(b"".join(arrays[k].tobytes() for k in sorted(arrays)))

    def matrix(self, half: str) -> np.ndarray:
        return self.arrays[f"{half}_rot"]

    def clip(self, half: str) -> np.ndarray:
        return self.arrays[f"{half}_clip"]

    @classmethod
    def from_blob(cls, blob: bytes) -> Rotation:
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            return cls({k: data[k] for k in data.files})


def _heads_last(x: np.ndarray, axes: tuple[str, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """View a half as (layer, head, rest, dim); also return the permutation used."""
    lead = [axes.index(a) for a in ("layer", "head") if a in axes]
    dim = kvarray.group_axis(axes, "dim")
    rest = [i for i in range(len(axes)) if i not in lead and i != dim]
    perm = (*lead, *rest, dim)
    moved = np.transpose(x, perm)
    n_layer = x.shape[axes.index("layer")] if "layer" in axes else 1
    n_head = x.shape[axes.index("head")] if "head" in axes else 1
    # contiguous, so that the batched matmul below runs in BLAS rather than numpy's generic loop
    return np.ascontiguousarray(moved).reshape(n_layer, n_head, -1, x.shape[dim]), perm


def _rotate(x: np.ndarray, matrices: np.ndarray) -> np.ndarray:
    """``x[l, h] @ matrices[l, h]`` for every (layer, head), in one stacked matmul.

    numpy 2 runs a stacked matmul of C-contiguous operands as one single-threaded BLAS call per
    (layer, head) inside one ufunc loop, with the GIL released for all of it; a Python loop of
    per-slice calls (what this was) took the GIL back 90 times per half block and was 2x slower
    on one thread, and did not scale across the cache's I/O threads at all. A non-contiguous
    operand would send numpy to its generic loop (~100x slower here), hence the copies (a view
    of ``x`` with heads moved, usually). A multi-threaded BLAS spends longer waking its threads
    than multiplying a 256 x 64 matrix (and stalls badly on a busy machine), hence the limiter.
    """
    out = np.empty(x.shape[:-1] + matrices.shape[-1:], dtype=np.float32)
    with _SINGLE_THREADED_BLAS:
        np.matmul(np.ascontiguousarray(x, dtype=np.float32), np.ascontiguousarray(matrices, dtype=np.float32),
                  out=out)
    return out


def _restore(y: np.ndarray, shape: tuple[int, ...], perm: tuple[int, ...]) -> np.ndarray:
    moved_shape = tuple(shape[i] for i in perm)
    inverse = [perm.index(i) for i in range(len(perm))]
    return np.transpose(y.reshape(moved_shape), inverse)


class OscarCodec(GroupQuantCodec):
    """2-bit per-(token, head) groups after a calibrated rotation, with calibrated clipping."""

    name = "oscar"
    version = 2  # log8 grids and four-bit layers (2026-12-07): params an oscar@1 reader does not know
    reads_versions = (1,)  # float16 grids, precise layers at one width: the same params, read as before
    mode = "oscar"
    config_model: ClassVar[type[PluginConfig]] = OscarConfig

    def __init__(self, config: PluginConfig | None = None) -> None:
        super().__init__(config)
        self.options: OscarConfig = self.config  # type: ignore[assignment]
        self._lock = threading.Lock()
        self._calibrating = threading.Lock()
        self._loading = threading.Lock()
        self._warned = False
        self._by_id: dict[str, Rotation] = {}
        self._by_shape: dict[tuple[Any, ...], Rotation] = {}

    def error_bound(self, layout: KVLayout | None) -> float:
        """Worst case only: a rotation can gather one vector's whole error into one coordinate.

        Typical errors are far smaller (see ``lifeboatcache bench codecs``); this is the bound
        the rotation can prove: per coordinate at most the vector's rotated error norm.
        """
        if layout is None or not kvarray.quantizable(layout) or "dim" not in layout.axes:
            return 0.0  # stored raw
        dim = layout.shape[layout.axes.index("dim")]
        # rotated coordinates are within +-sqrt(dim) * max|x|; the grid's error is <= its range;
        # the error vector's norm is <= sqrt(dim) times its largest coordinate.
        return 2.0 * dim * (1.0 + ROUNDING_SLACK)

    # ------------------------------------------------------------------ rotations

    @staticmethod
    def _shape_key(layout: KVLayout) -> tuple[Any, ...]:
        pairs = zip(layout.axes, layout.shape, strict=True)
        return tuple((a, n) for a, n in pairs if a not in ("token", "block", "page"))

    def calibrate(self, sample: np.ndarray, layout: KVLayout) -> str:
        """Fit a rotation to ``sample`` (float32, in ``layout``), store it, make it current; return its id.

        "Current" means: later blocks of the same shape (all axes but tokens) are encoded with
        it, in this process and — through ``current-<shape>.txt`` in ``rotation_dir`` — in
        processes started later, so a restart does not calibrate (and store) another one.
        """
        rotation = Rotation(_fit(sample, layout))
        _write_atomic(self.options.rotation_dir / f"oscar-{rotation.id}.npz", rotation.blob, keep_existing=True)
        _write_atomic(self._current_path(layout), rotation.id.encode(), keep_existing=False)
        with self._lock:
            self._by_id[rotation.id] = rotation
            self._by_shape[self._shape_key(layout)] = rotation
        return rotation.id

    def _current_path(self, layout: KVLayout) -> Path:
        shape = xxhash.xxh3_64_hexdigest(repr(self._shape_key(layout)).encode())
        return self.options.rotation_dir / f"current-{shape}.txt"

    def _current_rotation(self, x: np.ndarray, layout: KVLayout) -> Rotation:
        """This shape's rotation: in memory, else the stored current one, else calibrated on ``x``."""
        key = self._shape_key(layout)
        with self._lock:
            found = self._by_shape.get(key)
        if found is not None:
            return found
        with self._calibrating:  # concurrent first blocks of one shape share one rotation
            with self._lock:
                found = self._by_shape.get(key)
            if found is not None:
                return found
            try:
                found = self.rotation(self._current_path(layout).read_text().strip())
            except (OSError, CorruptBlockError):
                return self.rotation(self.calibrate(x, layout))
            with self._lock:
                self._by_shape[key] = found
            return found

    def rotation(self, rotation_id: str) -> Rotation:
        """The stored rotation ``rotation_id`` (cached); CorruptBlockError when it cannot be had.

        Read by one thread at a time: after a restart every I/O thread's first block asks for the
        same file at once, and ``np.load`` parses its header with ``ast``, which CPython 3.11 does
        not keep apart between threads ("AST constructor recursion depth mismatch"): a good block
        was set aside as corrupt. The others wait and find it cached.
        """
        with self._lock:
            found = self._by_id.get(rotation_id)
        if found is not None:
            return found
        with self._loading:
            with self._lock:
                found = self._by_id.get(rotation_id)
            if found is not None:
                return found
            path = self.options.rotation_dir / f"oscar-{rotation_id}.npz"
            try:
                found = Rotation.from_blob(path.read_bytes())
            except (OSError, ValueError, KeyError) as exc:
                raise CorruptBlockError(
                    f"oscar: rotation {rotation_id} is not readable at {path} ({exc}); blocks written with it are "
                    "misses until that file is back (share rotation_dir between hosts that share a tier)") from None
            if found.id != rotation_id:
                raise CorruptBlockError(f"oscar: rotation file {path} is damaged (content id {found.id})")
            with self._lock:
                self._by_id[rotation_id] = found
        return found

    # ------------------------------------------------------------------ GroupQuantCodec hooks

    def _can_quantize(self, layout: KVLayout | None) -> bool:
        """Rotations act on head vectors: the layout must name its ``dim`` axis."""
        if not kvarray.quantizable(layout):
            return False
        assert layout is not None
        if "dim" in layout.axes and layout.shape[layout.axes.index("dim")] <= MAX_DIM:
            return True
        if not self._warned:
            self._warned = True
            log.warning("oscar: blocks of layout %s have no 'dim' axis of at most %d, so they are stored "
                        "unquantized; the engine adapter must describe blocks with (kv, layer, token, head, "
                        "dim) axes for oscar to apply", layout.axes, MAX_DIM)
        return False

    def _params(self, layout: KVLayout, x: np.ndarray) -> dict[str, Any]:
        rotation_id = self._current_rotation(x, layout).id
        exact = sink_tokens(x, layout, self.options.exact_tokens)
        params = {"mode": self.mode, "bits": BITS, "rotation": rotation_id, "exact_tokens": exact}
        if self.options.ranges == LOG8:
            params["ranges"] = LOG8  # encode adds each run's base
        layers = _layer_count(layout)
        precise = {half: [n for n in getattr(self.options, f"precise_{half}") if n < layers] for half in ("k", "v")}
        four_bit = {half: [n for n in getattr(self.options, f"four_bit_{half}") if n < layers] for half in ("k", "v")}
        if layers and (precise["k"] or precise["v"] or four_bit["k"] or four_bit["v"]):
            params.update(precise=precise, precise_bits=self.options.precise_bits)
            if four_bit["k"] or four_bit["v"]:
                params["four_bit"] = four_bit
        return params

    def _check_params(self, params: dict[str, Any]) -> None:
        exact = params.get("exact_tokens")
        keys = {"mode", "bits", "rotation", "exact_tokens"}
        precise = params.get("precise")
        if precise is not None:
            keys |= {"precise", "precise_bits"}
            if "four_bit" in params:
                keys.add("four_bit")
        if "ranges" in params:
            keys |= {"ranges", "range_base"}
        if (set(params) != keys or params["bits"] != BITS
                or params.get("ranges", LOG8) != LOG8
                or not isinstance(params["rotation"], str) or not isinstance(exact, list)
                or not all(isinstance(t, int) and t >= 0 for t in exact) or len(set(exact)) != len(exact)
                or (precise is not None and not _precise_understood(precise, params.get("precise_bits"),
                                                                    params.get("four_bit")))):
            raise CorruptBlockError(f"{self.tag}: params not understood: {params!r}")

    def _bit_runs(self, half: str, layout: KVLayout, params: dict[str, Any], n_rows: int) -> list[tuple[int, int, int]]:
        """The precise layers' rows at ``precise_bits``, the four-bit layers' at 4, the others at 2 (rows are laid
        out layer-major)."""
        widths = _precise_widths(half, params)
        layers = _layer_count(layout)
        if not widths or not layers or n_rows % layers or max(widths) >= layers:
            if widths:
                raise CorruptBlockError(f"oscar: precise layers {sorted(widths)} do not fit layout {layout}")
            return [(0, n_rows, BITS)]
        per_layer = n_rows // layers
        runs: list[tuple[int, int, int]] = []
        for layer in range(layers):
            bits = widths.get(layer, BITS)
            if runs and runs[-1][2] == bits:
                runs[-1] = (runs[-1][0], (layer + 1) * per_layer, bits)
            else:
                runs.append((layer * per_layer, (layer + 1) * per_layer, bits))
        return runs

    # ------------------------------------------------------------------ exact (sink) tokens

    def encode(self, raw: memoryview, layout: KVLayout | None) -> tuple[Sequence[Buffer], dict[str, Any]]:
        """The quantized block, then the raw bytes of its sink tokens (token order of ``exact_tokens``)."""
        pieces, params = super().encode(raw, layout)
        if params["mode"] != self.mode or not params["exact_tokens"]:
            return pieces, params
        assert layout is not None
        unsigned = np.dtype(f"u{kvarray.FLOAT_DTYPES[layout.dtype].itemsize}")  # the bits, untouched
        source = np.frombuffer(raw, dtype=unsigned)
        tokens = np.take(source.reshape(layout.shape), params["exact_tokens"], axis=layout.axes.index("token"))
        return [*pieces, tokens.tobytes()], params

    def decode(self, payload: memoryview, params: dict[str, Any], layout: KVLayout | None,
               dest: memoryview) -> None:
        exact = params.get("exact_tokens") if params.get("mode") == self.mode else None
        if not exact:
            super().decode(payload, params, layout, dest)
            return
        self._check_params(params)
        if layout is None or "token" not in layout.axes or max(exact) >= layout.shape[layout.axes.index("token")]:
            raise CorruptBlockError(f"oscar: exact tokens {exact} do not fit layout {layout}")
        axis = layout.axes.index("token")
        exact_bytes = kvarray.raw_size(layout) // layout.shape[axis] * len(exact)
        if payload.nbytes < exact_bytes:
            raise CorruptBlockError(f"oscar: payload of {payload.nbytes} bytes cannot hold {len(exact)} exact tokens")
        super().decode(payload[: payload.nbytes - exact_bytes], params, layout, dest)
        unsigned = np.dtype(f"u{kvarray.FLOAT_DTYPES[layout.dtype].itemsize}")
        out = np.frombuffer(dest.cast("B") if dest.format != "B" else dest, dtype=unsigned).reshape(layout.shape)
        shape = list(layout.shape)
        shape[axis] = len(exact)
        values = np.frombuffer(payload[payload.nbytes - exact_bytes:], dtype=unsigned).reshape(shape)
        index: list[Any] = [slice(None)] * len(shape)
        index[axis] = exact
        out[tuple(index)] = values

    def _grouping(self, half: str, layout: KVLayout, params: dict[str, Any]) -> tuple[int, int]:
        axes = kvarray.half_axes(layout)
        dim_axis = kvarray.group_axis(axes, "dim")
        return dim_axis, kvarray.half_shape(layout)[dim_axis]

    def _check_fits(self, rotation: Rotation, half: str, x: np.ndarray) -> None:
        if rotation.matrix(half).shape[:2] != x.shape[:2] or rotation.matrix(half).shape[-1] != x.shape[-1]:
            raise CorruptBlockError(
                f"oscar: rotation {rotation.id} is for {rotation.matrix(half).shape[:-1]} (layer, head, dim), "
                f"the block has {x.shape[:2] + x.shape[-1:]}")

    def _forward(self, half: str, x: np.ndarray, layout: KVLayout, params: dict[str, Any]) -> np.ndarray:
        rotation = self.rotation(params["rotation"])
        axes = kvarray.half_axes(layout)
        heads, perm = _heads_last(x, axes)
        self._check_fits(rotation, half, heads)
        y = _rotate(heads, rotation.matrix(half))
        return _restore(y, x.shape, perm)

    def _inverse(self, half: str, x: np.ndarray, layout: KVLayout, params: dict[str, Any]) -> np.ndarray:
        rotation = self.rotation(params["rotation"])
        axes = kvarray.half_axes(layout)
        heads, perm = _heads_last(x, axes)
        self._check_fits(rotation, half, heads)
        y = _rotate(heads, np.swapaxes(rotation.matrix(half), -1, -2))
        return _restore(y, x.shape, perm)

    def _clip(self, half: str, layout: KVLayout, params: dict[str, Any], n_rows: int) -> float | np.ndarray:
        """Per row: the clip factor of the row's layer (rows are laid out layer-major); none on a
        precise layer (the factors are calibrated for 2 bits)."""
        clips = self.rotation(params["rotation"]).clip(half)
        per_layer = n_rows // len(clips)
        if "layer" not in kvarray.half_axes(layout) or kvarray.half_axes(layout)[0] != "layer":
            return float(np.max(clips))  # layer is not the outer axis: one factor for all rows
        precise = list(_precise_widths(half, params))
        if precise:
            clips = clips.copy()
            clips[precise] = 1.0
        return np.repeat(clips, per_layer)


def _layer_count(layout: KVLayout) -> int:
    """Layers of a block whose halves are laid out layer-major (0 otherwise: no precise layers)."""
    axes = kvarray.half_axes(layout)
    if not axes or axes[0] != "layer":
        return 0
    return layout.shape[layout.axes.index("layer")]


def _layer_lists(lists: Any) -> bool:
    """{"k": [layers], "v": [layers]} of distinct sorted indices."""
    return (isinstance(lists, dict) and set(lists) == {"k", "v"}
            and all(isinstance(layers, list) and all(isinstance(n, int) and n >= 0 for n in layers)
                    and layers == sorted(set(layers)) for layers in lists.values()))


def _precise_understood(precise: Any, bits: Any, four_bit: Any) -> bool:
    """``params["precise"]`` at 3 or 4 bits, and ``params["four_bit"]`` (if any) at 4, no layer in both."""
    return (bits in (3, 4) and _layer_lists(precise)
            and (four_bit is None or (_layer_lists(four_bit)
                                      and not any(set(precise[h]) & set(four_bit[h]) for h in ("k", "v")))))


def _precise_widths(half: str, params: dict[str, Any]) -> dict[int, int]:
    """Layer -> bits of the half's layers not at 2 bits (``_check_params`` has vetted the lists)."""
    widths = {layer: params["precise_bits"] for layer in params.get("precise", {}).get(half, [])}
    widths.update((layer, 4) for layer in params.get("four_bit", {}).get(half, []))
    return widths


def _write_atomic(path: Path, data: bytes, *, keep_existing: bool) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename (readers never see half)."""
    if keep_existing and path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sink_tokens(x: np.ndarray, layout: KVLayout, limit: int) -> list[int]:
    """Up to ``limit`` tokens of block ``x`` whose norms mark them as attention sinks.

    Score per token: the mean over (K/V, layer, head) of ``|log(norm / median norm)|``. On
    SmolLM2 the first token scores ~1.2 and no other token above 0.5 (typical: 0.12); tokens
    above ``SINK_SCORE`` (norms ~2.2x off on average) are kept exact.
    """
    if limit == 0 or "token" not in layout.axes or "dim" not in layout.axes:
        return []
    token, dim = layout.axes.index("token"), layout.axes.index("dim")
    norms = np.linalg.norm(x, axis=dim)
    token_in_norms = token if token < dim else token - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.abs(np.log(norms / np.median(norms, axis=token_in_norms, keepdims=True)))
    ratio = np.nan_to_num(ratio, nan=0.0, posinf=0.0)  # zero vectors: not evidence of a sink
    score = np.moveaxis(ratio, token_in_norms, -1).reshape(-1, norms.shape[token_in_norms]).mean(axis=0)
    candidates = np.argsort(-score, kind="stable")[:limit]
    return sorted(int(t) for t in candidates if score[t] > SINK_SCORE)


def _fit(sample: np.ndarray, layout: KVLayout) -> dict[str, np.ndarray]:
    """Rotation matrices and clip factors per half from a float32 ``sample`` block."""
    arrays: dict[str, np.ndarray] = {}
    axes = kvarray.half_axes(layout)
    for half, index in kvarray.halves(layout):
        x, _ = _heads_last(np.asarray(sample[index], dtype=np.float32), axes)  # (layer, head, tokens, dim)
        dim = x.shape[-1]
        moment = _rotate(np.swapaxes(x, -1, -2).copy(), x).astype(np.float64)
        with _SINGLE_THREADED_BLAS:  # LAPACK threads only stall on 64 x 64
            _, eigvec = np.linalg.eigh(moment)  # columns: eigenvectors, ascending eigenvalues
        rot = (eigvec[..., ::-1] @ _mixer(dim)).astype(np.float32)
        arrays[f"{half}_rot"] = rot
        arrays[f"{half}_clip"] = _best_clips(_rotate(x, rot))
    return arrays


def _best_clips(y: np.ndarray) -> np.ndarray:
    """Per layer, the clip factor from CLIP_GRID with the smallest squared error on rotated ``y``."""
    n_layer = y.shape[0]
    rows = y.reshape(-1, y.shape[-1])
    errors = np.empty((len(CLIP_GRID), n_layer))
    for i, clip in enumerate(CLIP_GRID):
        packed, scale, zero = quantize_rows(rows, BITS, clip)
        squared = np.square(dequantize_rows(packed, BITS, rows.shape[1], scale, zero) - rows)
        errors[i] = squared.reshape(n_layer, -1).sum(axis=1)
    return np.asarray(CLIP_GRID, dtype=np.float32)[np.argmin(errors, axis=0)]
