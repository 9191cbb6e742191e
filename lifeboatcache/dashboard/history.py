"""What the page shows besides the current numbers: a short history and recent events.

A sampler thread reads the node sample once per ``interval_s``, keeps the last ``keep`` points
(so a freshly opened page has charts at once) and turns changes into events an operator cares
about: a tier going down or up (with the reason), corrupt blocks, I/O errors, config changes.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from lifeboatcache_core.metrics import Sample, derived

Event = dict[str, Any]


class History:
    """Ring buffers of points and events, filled by a daemon thread until ``stop()``."""

    def __init__(self, read_sample: Callable[[], Sample], *, interval_s: float = 1.0, keep: int = 600,
                 keep_events: int = 200) -> None:
        self._read_sample = read_sample
        self.interval_s = interval_s
        self.points: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self.events: collections.deque[Event] = collections.deque(maxlen=keep_events)
        self._lock = threading.Lock()
        self._last: Sample | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lifeboat-dashboard-history", daemon=True)

    def start(self) -> History:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def add_event(self, level: str, message: str) -> None:
        with self._lock:
            self.events.append({"t": time.time(), "level": level, "message": message})

    def recent_events(self, n: int = 50) -> list[Event]:
        with self._lock:
            return list(self.events)[-n:]

    def recent_points(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.points)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.observe(self._read_sample())
            except Exception as exc:  # a scrape problem must not end the history
                self.add_event("warning", f"dashboard could not read metrics: {exc}")
            self._stop.wait(self.interval_s)

    def observe(self, sample: Sample) -> None:
        """Record one point and the events that differ from the previous sample."""
        ratios = derived(sample)
        point = {
            "t": time.time(),
            "lookup_blocks": sample["cache"]["lookup_blocks"],
            "lookup_hit_blocks": sample["cache"]["lookup_hit_blocks"],
            "bytes_served": sample["cache"]["bytes_served"],
            "hit_rate_blocks": ratios["hit_rate_blocks"],
            "staged_bytes": ratios["staging"]["staged_bytes"],
            "staged_used_bytes": ratios["staging"]["used_bytes"],
            "staged_wasted_bytes": ratios["staging"]["wasted_bytes"],
            "tiers": {name: {"bytes_used": t["bytes_used"], "capacity_bytes": t["capacity_bytes"]}
                      for name, t in sample["tiers"].items()},
        }
        with self._lock:
            self.points.append(point)
        last, self._last = self._last, sample
        if last is None:
            return
        for name, tier in sample["tiers"].items():
            before = last["tiers"].get(name)
            if before is None:
                self.add_event("info", f"tier {name} appeared ({tier['backend']})")
                continue
            if before["tier_up"] and not tier["tier_up"]:
                self.add_event("error", f"tier {name} is down: {tier['reason']}")
            elif not before["tier_up"] and tier["tier_up"]:
                self.add_event("info", f"tier {name} is up again")
            for counter, level, what in (("corrupt_blocks", "warning", "corrupt block(s) set aside"),
                                         ("errors", "warning", "I/O error(s)")):
                grew = tier[counter] - before[counter]
                if grew > 0:
                    self.add_event(level, f"tier {name}: {grew} {what}")
            if before["index_loading"] and not tier["index_loading"]:
                self.add_event("info", f"tier {name}: index rebuilt, {tier['blocks']} blocks")
        for name in last["tiers"].keys() - sample["tiers"].keys():
            self.add_event("info", f"tier {name} removed")
