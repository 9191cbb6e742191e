"""Prototype (2026-12-05): units (K/V x layer) ranked by the perplexity oscar costs on ONE calibration text (argv[1]),
the top k stored by oscar at 3 or 4 bits (its module BITS patched: rotated, its own clips), judged on argv[2:].
Numpy over decoded KV, before the codec had precise layers; output beside (one_text.out).
"""
import sys
import tempfile
from pathlib import Path

import lifeboatcache_codec_lbq.oscar as oscar_mod

from lifeboatcache.bench.codecs import make_codec, run_codec, smollm2_scorer, split_blocks

calib = Path(sys.argv[1])
others = [Path(p) for p in sys.argv[2:]]



def decoded_all(sc):
    d = {}
    for bits in (2, 3, 4):
        oscar_mod.BITS = bits
        run = run_codec(make_codec("oscar", {"rotation_dir": tempfile.mkdtemp()}), split_blocks(sc.exact, 256), 1)
        d[bits] = (run.decoded, run.ratio)
    oscar_mod.BITS = 2
    return d
sc = smollm2_scorer(calib, 2048, 256)
d = decoded_all(sc)
osc = d[2][0]
po = sc.perplexity(osc)
gain = {}
for kv in range(2):
    for layer in range(sc.exact.shape[1]):
        mix = osc.copy()
        mix[kv, layer] = sc.exact[kv, layer]
        gain[(kv, layer)] = po - sc.perplexity(mix)
top = sorted(gain, key=lambda u: -gain[u])
print("calibrated on", calib.name, "top", [("KV"[k] + str(n)) for k, n in top[:12]], flush=True)
units = 2 * sc.exact.shape[1]
for text in [calib, *others]:
    s = sc if text == calib else smollm2_scorer(text, 2048, 256)
    dd = d if text == calib else decoded_all(s)
    p0 = s.perplexity(s.exact)
    line = [f"{text.name}: oscar {s.perplexity(dd[2][0]) / p0 - 1:+.2%} ({dd[2][1]:.2f}x) "
            f"r3 {dd[3][1]:.2f}x r4 {dd[4][1]:.2f}x"]
    for bits, k in ((4, 4), (3, 6), (3, 8), (3, 9)):
        mix = dd[2][0].copy()
        for kv, layer in top[:k]:
            mix[kv, layer] = dd[bits][0][kv, layer]
        ratio = units / ((units - k) / dd[2][1] + k / dd[bits][1])
        line.append(f"top{k}@{bits} {s.perplexity(mix) / p0 - 1:+.2%} ({ratio:.2f}x)")
    print("  " + " | ".join(line), flush=True)
