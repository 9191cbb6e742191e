"""How far a rotated row's midpoint lies from zero, in half-ranges (log8 widens a grid only beyond 127/32).

python midstat.py TEXT   per half: rows, and the fractions beyond 127/32, 2 and 1 half-ranges.
"""
import sys
from pathlib import Path

import numpy as np
from lifeboatcache_codec_lbq import oscar
from lifeboatcache_core.abc import KVLayout

from lifeboatcache.bench.codecs import AXES, smollm2_scorer, split_blocks

s = smollm2_scorer(Path(sys.argv[1]), 2048, 256)
blocks = split_blocks(s.exact, 256)
rot = oscar._fit(blocks[0].astype(np.float32), KVLayout("bfloat16", blocks[0].shape, AXES))
for hi_, half in enumerate("kv"):
    ratios = []
    for b in blocks:
        heads, _ = oscar._heads_last(b.astype(np.float32)[hi_], AXES[1:])
        r = oscar._rotate(heads, rot[f"{half}_rot"]).reshape(-1, 64)
        lo, hi = r.min(1), r.max(1)
        ratios.append(np.abs(hi + lo) / (hi - lo))
    q = np.concatenate(ratios)
    print(half, "rows", q.size, "beyond 127/32:", (q > 127 / 32).mean(), "beyond 2:", (q > 2).mean(),
          "beyond 1:", (q > 1).mean(), "p99.9", np.quantile(q, 0.999))
