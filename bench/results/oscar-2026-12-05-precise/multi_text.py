"""Precise oscar layers ranked on calibration texts (summed perplexity cost), judged by the codec on held-out texts.

Usage: python multi_text.py CALIB1,CALIB2 HELD1,HELD2,... (files). Prototype run of 2026-12-05 (its output beside).
"""
import sys
import tempfile
from pathlib import Path

from lifeboatcache.bench.codecs import make_codec, rank_oscar_layers, run_codec, smollm2_scorer, split_blocks

calib, held = sys.argv[1].split(","), sys.argv[2].split(",")
total = {}
for text in calib:
    r = rank_oscar_layers(smollm2_scorer(Path(text), 2048, 256), 256, Path(tempfile.mkdtemp()))
    for row in r["ranking"]:
        total[row["unit"]] = total.get(row["unit"], 0.0) + row["ppl_gain"]
top = sorted(total, key=lambda u: -total[u])
print("calibrated on", [Path(t).name for t in calib], "top", top[:10], flush=True)
configs = [(4, 4), (3, 8), (3, 9)]
for text in held + calib:
    s = smollm2_scorer(Path(text), 2048, 256)
    p0 = s.perplexity(s.exact)
    line = [Path(text).name + (" (calibration)" if text in calib else "")]
    for bits, k in [(2, 0), *configs]:
        units = top[:k]
        opts = {"precise_k": sorted(int(u[1:]) for u in units if u[0] == "k"),
                "precise_v": sorted(int(u[1:]) for u in units if u[0] == "v"), "precise_bits": max(bits, 3)}
        codec = make_codec("oscar", {"rotation_dir": tempfile.mkdtemp(), **opts})
        run = run_codec(codec, split_blocks(s.exact, 256), 1)
        line.append(f"top{k}@{bits} {s.perplexity(run.decoded) / p0 - 1:+.2%} ({run.ratio:.2f}x)")
    print("  " + " | ".join(line), flush=True)
