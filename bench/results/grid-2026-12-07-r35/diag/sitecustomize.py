"""Diagnostic only (r35, r36): when requests arrive, are first asked for, finish, and which blocks a full tier evicts.

Put this folder on PYTHONPATH of a grid run with LBC_DIAG_DIR set; each process appends JSON lines
to ``LBC_DIAG_DIR/events-<pid>.jsonl``: ``arrive`` (vLLM's on_new_request), ``ask`` (the first
lookup of a request, with its chain's digests, 12 hex digits each, head to tail), ``end``
(on_request_finished), and ``judge`` (every victim the prefix guard judges: its digest, depth,
time unused, the limit, whether it was protected, and the newcomer's depth where the guard
took one). Nothing else changes.
"""

import json
import os
import time

_DIR = os.environ.get("LBC_DIAG_DIR")
_out: list = []


def _write(row: dict) -> None:
    if not _out:
        _out.append(open(os.path.join(_DIR, f"events-{os.getpid()}.jsonl"), "a", buffering=1))
    row["t"] = round(time.time(), 3)
    _out[0].write(json.dumps(row) + "\n")


if _DIR:
    try:
        from lifeboatcache_core import prefixes as _prefixes
    except ImportError:
        _prefixes = None
    if _prefixes is not None:
        _protects = _prefixes.PrefixGuard.protects

        def protects(self, victim, *depth_now):  # (victim, depth, now) until 1ed8fe2, (victim, now) since
            result = _protects(self, victim, *depth_now)
            used, now = self._used_at.get(victim), depth_now[-1]
            row = {"ev": "judge", "victim": victim.digest.hex()[:12], "victim_depth": self._depth.get(victim),
                   "unused_s": None if used is None else round(now - used, 1),
                   "limit_s": round(self.idle_limit_s, 1), "protected": result}
            if len(depth_now) == 2:
                row["depth"] = depth_now[0]
            _write(row)
            return result

        _prefixes.PrefixGuard.protects = protects

    import importlib.abc
    import sys

    class _PatchTier(importlib.abc.MetaPathFinder):
        """Patch lifeboatcache_vllm.tier once it is imported (vLLM imports it late, in the engine core)."""

        def find_spec(self, name, path, target=None):
            if name != "lifeboatcache_vllm.tier":
                return None
            sys.meta_path.remove(self)
            import importlib.util
            spec = importlib.util.find_spec(name)
            loader = spec.loader
            exec_module = loader.exec_module

            def patched(module):
                exec_module(module)
                tier = module.LifeboatTier
                asked: set = set()
                lookup, new, finished = tier.lookup, tier.on_new_request, tier.on_request_finished

                def on_new_request(self, req_context):
                    _write({"ev": "arrive", "req": req_context.req_id})
                    return new(self, req_context)

                def on_lookup(self, key, req_context):
                    if req_context.req_id not in asked:
                        asked.add(req_context.req_id)
                        chain = module.request_chain(req_context)
                        _write({"ev": "ask", "req": req_context.req_id, "chain": [bytes(k).hex()[:12] for k in chain]})
                    return lookup(self, key, req_context)

                def on_request_finished(self, req_context):
                    asked.discard(req_context.req_id)
                    _write({"ev": "end", "req": req_context.req_id})
                    return finished(self, req_context)

                tier.lookup, tier.on_new_request = on_lookup, on_new_request
                tier.on_request_finished = on_request_finished

            loader.exec_module = patched
            return spec

    sys.meta_path.insert(0, _PatchTier())
