"""Prototype: squared error of oscar's 2-bit min-max+clip groups (2.5 bits/value) against a symmetric Lloyd-Max
quantizer with a per-row fp16 RMS scale (2.25 bits/value), in the rotated domain of real SmolLM2 KV (first four
256-token blocks of the GPL-3 text, the rotation fitted on the first). Run: .venv/bin/python lloyd_max.py; output in
lloyd_max.out."""
import numpy as np
from lifeboatcache_codec_lbq import kvarray
from lifeboatcache_codec_lbq import oscar as O
from lifeboatcache_codec_lbq.groups import dequantize_rows, quantize_rows
from lifeboatcache_core.abc import KVLayout

from lifeboatcache.bench.codecs import AXES, _default_text, smollm2_scorer, split_blocks

exact = smollm2_scorer(_default_text(), 2048, 1).exact
blocks = split_blocks(exact, 256)
b = np.asarray(blocks[0]).astype(np.float32)
layout = KVLayout("bfloat16", tuple(b.shape), AXES)
arr = O._fit(b, layout)
# Lloyd-Max levels for a unit Gaussian
LM = {2: (np.array([-1.5104, -0.4528, 0.4528, 1.5104]), np.array([-0.9816, 0.0, 0.9816])),
      3: (np.array([-2.1519, -1.3439, -0.7560, -0.2451, 0.2451, 0.7560, 1.3439, 2.1519]),
          np.array([-1.7479, -1.0500, -0.5005, 0.0, 0.5005, 1.0500, 1.7479]))}
def lloyd(rows, bits, gain=1.0):
    s = np.sqrt(np.mean(rows**2, axis=1, keepdims=True)).astype(np.float16).astype(np.float32) * gain
    s[s == 0] = 1
    levels, edges = LM[bits]
    q = np.digitize(rows / s, edges)
    return levels[q] * s
tot = {}
for blk in blocks[:4]:
    x = np.asarray(blk).astype(np.float32)
    for half, index in kvarray.halves(layout):
        xh, _ = O._heads_last(np.asarray(x[index], dtype=np.float32), kvarray.half_axes(layout))
        y = O._rotate(xh, arr[f"{half}_rot"])
        n_layer = y.shape[0]
        rows = y.reshape(-1, y.shape[-1])
        clips = np.repeat(arr[f"{half}_clip"], rows.shape[0] // n_layer)
        p, sc, ze = quantize_rows(rows, 2, clips)
        e_mm = np.square(dequantize_rows(p, 2, rows.shape[1], sc, ze) - rows).sum()
        p1, sc1, ze1 = quantize_rows(rows, 2, 1.0)
        e_mm1 = np.square(dequantize_rows(p1, 2, rows.shape[1], sc1, ze1) - rows).sum()
        p3, sc3, ze3 = quantize_rows(rows, 3, 1.0)
        e_mm3 = np.square(dequantize_rows(p3, 3, rows.shape[1], sc3, ze3) - rows).sum()
        e_lm = np.square(lloyd(rows, 2) - rows).sum()
        e_lm3 = np.square(lloyd(rows, 3) - rows).sum()
        energy = np.square(rows).sum()
        errors = (("minmax2+clip", e_mm), ("minmax2", e_mm1), ("minmax3", e_mm3), ("lloyd2", e_lm), ("lloyd3", e_lm3))
        for k, v in errors:
            tot.setdefault((half, k), [0.0, 0.0])
            tot[(half, k)][0] += v
            tot[(half, k)][1] += energy
for (half, k), (e, en) in sorted(tot.items()):
    print(half, k, "relative squared error", round(e / en, 4))
