"""The row kernel alone: float16 grids against log8 on one real-sized block's rows (46,080 rows of 64: 30 layers x
3 heads x 256 tokens x K/V), 2 bits, clip 0.85, one thread, CPU ms per call (median of 7), rounds interleaved."""
import time

import numpy as np
from lifeboatcache_codec_lbq.groups import dequantize_rows, dequantize_rows_log8, quantize_rows, quantize_rows_log8

x = np.random.default_rng(0).standard_normal((46080, 64)).astype(np.float32)
clip = np.full(len(x), 0.85, np.float32)


def cpu_ms(call) -> float:
    times = []
    for _ in range(7):
        start = time.process_time()
        call()
        times.append(time.process_time() - start)
    return float(np.median(times)) * 1e3


packed, scale, zero = quantize_rows(x, 2, clip)
packed8, e, m, base = quantize_rows_log8(x, 2, clip)
for round_ in range(3):
    print(f"round {round_}: encode float16 {cpu_ms(lambda: quantize_rows(x, 2, clip)):.2f} ms, "
          f"log8 {cpu_ms(lambda: quantize_rows_log8(x, 2, clip)):.2f} ms; "
          f"decode float16 {cpu_ms(lambda: dequantize_rows(packed, 2, 64, scale, zero)):.2f} ms, "
          f"log8 {cpu_ms(lambda: dequantize_rows_log8(packed8, 2, 64, e, m, base)):.2f} ms", flush=True)
