"""Prototype: oscar's 2-bit rows with 8-bit coded (mid, half-range) instead of float16 (zero, scale).

python proto.py TEXT,TEXT,... [VARIANT,...]   prints per text and variant: ratio, ppl rise, KL

The numpy model of the log8 grid that came before the C kernel (its figures match the codec's to the
printed digit where both ran: c8-top24 here and `*-precise.json` beside it). Held-out texts: the ten of
run.sh, copied to /tmp/texts (ARCHITECTURE.md and vllm-README.md from 02f35e5); calibration texts: the
six of run.sh's ranking in /tmp/calib. proto-run1.out (ten held-out texts) ranked precise units by
oscar-2026-12-05-precise/r4/rank.json (RANK then read that file); the later runs by this folder's
rank.json. proto-run2.out: clip factors calibrated for the 3-bit rows too (c8-top24-clip3). run3/run4:
the first N units of the ranking at 4 bits, the rest of the 6x budget at 3 (fourN-topM), on four
held-out texts; run5-calib: the same on the six calibration texts, where N = 4 was chosen.
"""
import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from lifeboatcache_codec_lbq import oscar
from lifeboatcache_codec_lbq.groups import dequantize_rows, quantize_rows
from lifeboatcache_core.abc import KVLayout

from lifeboatcache.bench.codecs import AXES, smollm2_scorer, split_blocks

RANK = [x["unit"] for x in json.load(open("/work/main/bench/results/oscar-2026-12-07-log8/rank.json"))["ranking"]]


def fake_rows(rows, bits, clip, coded, group):
    """Quantize-dequantize rows (n, width) in groups of ``group`` values."""
    n, width = rows.shape
    g = rows.reshape(-1, group)
    clip = np.repeat(np.broadcast_to(np.asarray(clip, np.float32).reshape(-1), (n,)), width // group)
    if not coded:
        packed, scale, zero = quantize_rows(g, bits, clip)
        return dequantize_rows(packed, bits, group, scale, zero).reshape(n, width)
    L = (1 << bits) - 1
    lo, hi = g.min(axis=1), g.max(axis=1)
    mid = (hi + lo) * 0.5
    half = (hi - lo) * 0.5 * clip
    half = np.maximum(half, 1e-30)
    e = np.ceil(np.log2(half) * 16)
    h = np.exp2(e / 16)
    m = np.clip(np.rint(mid / (h / 32)), -127, 127)
    midq = m * h / 32
    lo2 = midq - h
    step = 2 * h / L
    codes = np.clip(np.rint((g - lo2[:, None]) / step[:, None]), 0, L)
    return (lo2[:, None] + codes * step[:, None]).reshape(n, width).astype(np.float32)


SINKS = []
CLIP3 = {}
FOUR = set()


def calibrate_clip3(block, rot, coded=True, group=64):
    """Per (half, layer): the clip factor with the least squared error at 3 bits, on the first block."""
    CLIP3.clear()
    x = block.astype(np.float32)
    for hi_, half in enumerate("kv"):
        heads, _ = oscar._heads_last(x[hi_], AXES[1:])
        r = oscar._rotate(heads, rot[f"{half}_rot"])
        for layer in range(r.shape[0]):
            rows = r[layer].reshape(-1, r.shape[-1])
            errs = [np.square(fake_rows(rows, 3, c, coded, group) - rows).sum() for c in oscar.CLIP_GRID]
            CLIP3[(half, layer)] = oscar.CLIP_GRID[int(np.argmin(errs))]


def encode_decode(blocks, units_precise, bits_precise, coded, group, rot):
    out = []
    for b in blocks:
        x = b.astype(np.float32)
        layout = KVLayout("bfloat16", b.shape, AXES)
        sinks = oscar.sink_tokens(x, layout, 2)
        y = x.copy()
        for hi_, half in enumerate("kv"):
            axes = AXES[1:]
            heads, perm = oscar._heads_last(x[hi_], axes)  # (layer, head, tokens, dim)
            r = oscar._rotate(heads, rot[f"{half}_rot"])
            clips = rot[f"{half}_clip"]
            dec = np.empty_like(r)
            for layer in range(r.shape[0]):
                unit = f"{half}{layer}"
                bits = (4 if unit in FOUR else bits_precise) if unit in units_precise else 2
                clip = float(clips[layer]) if bits == 2 else float(CLIP3.get((half, layer), 1.0))
                rows = r[layer].reshape(-1, r.shape[-1])
                dec[layer] = fake_rows(rows, bits, clip, coded, group).reshape(r[layer].shape)
            back = oscar._rotate(dec, np.swapaxes(rot[f"{half}_rot"], -1, -2))
            y[hi_] = oscar._restore(back, x[hi_].shape, perm)
        if sinks:
            y[:, :, sinks] = x[:, :, sinks]
        SINKS.append(len(sinks))
        out.append(y.astype(ml_dtypes.bfloat16))
    return np.concatenate(out, axis=2)


def ratio(n_units, units_precise, bits_precise, overhead_bits, group, tokens=256):
    sinks = sum(SINKS) / len(SINKS)
    per_value = sum(((4 if u in FOUR else bits_precise) if u in units_precise else 2) + overhead_bits / group
                    for u in n_units) / len(n_units)
    return 16 / (per_value * (tokens - sinks) / tokens + 16 * sinks / tokens)


VARIANTS = [
    ("four2-top22", True, 64, 16, 22, 3),
    ("four4-top20", True, 64, 16, 20, 3),
    ("four6-top18", True, 64, 16, 18, 3),
    ("four8-top16", True, 64, 16, 16, 3),
    ("four12-top12", True, 64, 16, 12, 3),
    ("c8-top24", True, 64, 16, 24, 3),
    ("c8-top24-clip3", True, 64, 16, 24, 3),
    # name, coded, group, overhead bits per group, n precise, precise bits
    ("fp16-g64-top9", False, 64, 32, 9, 3),
    ("fp16-g64-r4", False, 64, 32, -1, 3),
    ("c8-g64-top0", True, 64, 16, 0, 3),
    ("c8-g64-top9", True, 64, 16, 9, 3),
    ("c8-g64-top22", True, 64, 16, 22, 3),
    ("c8-g32-top8", True, 32, 16, 8, 3),
]
R4 = {"k8", "k17", "k18", "k20", "k22", "k23", "k24", "k26", "v18"}

if __name__ == "__main__":
    wanted = sys.argv[2].split(",") if len(sys.argv) > 2 else None
    for text in sys.argv[1].split(","):
        s = smollm2_scorer(Path(text), 2048, 256)
        p0 = s.perplexity(s.exact)
        blocks = split_blocks(s.exact, 256)
        rot = oscar._fit(blocks[0].astype(np.float32), KVLayout("bfloat16", blocks[0].shape, AXES))
        units = [f"{h}{n}" for h in "kv" for n in range(s.exact.shape[1])]
        line = [Path(text).name]
        for name, coded, group, ob, n, pb in VARIANTS:
            if wanted and name not in wanted:
                continue
            precise = R4 if n < 0 else set(RANK[:n])
            FOUR.clear()
            if name.startswith("four"):
                FOUR.update(RANK[:int(name[4:name.index("-")])])
            if name.endswith("clip3"):
                calibrate_clip3(blocks[0], rot)
            else:
                CLIP3.clear()
            dec = encode_decode(blocks, precise, pb, coded, group, rot)
            ppl, kl = s.fidelity(dec)
            line.append(f"{name} {ratio(units, precise, pb, ob, group):.2f}x {ppl / p0 - 1:+.2%} kl {kl:.4f}")
        print(" | ".join(line), flush=True)
