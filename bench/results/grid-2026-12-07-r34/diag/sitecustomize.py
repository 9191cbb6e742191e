"""Diagnostic only (r34): every victim a full tier's prefix guard judges, as a JSON line per call.

Put this folder on PYTHONPATH of a grid run with LBC_DIAG_DIR set; each process that judges a
victim appends to ``LBC_DIAG_DIR/guard-<pid>.jsonl``: the time, the victim's depth (None: no depth,
always evictable), the new block's depth, how long the victim has been unused, the guard's idle
limit then, and whether it protected the victim (True: the tier declines the new block, unless
the policy calls the victim abandoned; False: the victim is evicted). Nothing else changes.
"""

import json
import os
import time

_DIR = os.environ.get("LBC_DIAG_DIR")
if _DIR:
    try:
        from lifeboatcache_core import prefixes as _prefixes
    except ImportError:
        _prefixes = None
    if _prefixes is not None:
        _original = _prefixes.PrefixGuard.protects
        _out = []

        def protects(self, victim, depth, now):
            result = _original(self, victim, depth, now)
            if not _out:
                _out.append(open(os.path.join(_DIR, f"guard-{os.getpid()}.jsonl"), "a", buffering=1))
            used = self._used_at.get(victim)
            _out[0].write(json.dumps({"t": round(time.time(), 3), "victim_depth": self._depth.get(victim),
                                      "depth": depth, "unused_s": None if used is None else round(now - used, 1),
                                      "limit_s": round(self.idle_limit_s, 1), "protected": result}) + "\n")
            return result

        _prefixes.PrefixGuard.protects = protects
