"""ARC (Megiddo & Modha, FAST '03) mapped onto the tier's insert/touch/victim/remove calls.

ARC keeps two LRU lists of resident blocks, T1 (seen once) and T2 (seen again), and two ghost
lists of recently evicted keys, B1 and B2. A re-insert of a key found in a ghost list tells
which list was evicted too eagerly and moves the target size ``p`` of T1 toward it, so the
policy adapts between recency (scans, new sessions) and frequency (a hot system prompt).

The tier owns capacity in bytes, so ARC's ``c`` (blocks) is the high-water mark of resident
blocks. The tier calls ``victim`` (or ``victims``, to look past picks a stager may not take)
and then ``remove`` for one of the keys offered: only such a removal makes a ghost; a plain
delete or a corrupt block leaves no ghost. Every operation is O(1) (``victims``: O(limit)).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from lifeboatcache_core.abc import BlockHint, EvictionPolicy, PluginConfig
from lifeboatcache_core.keys import BlockKey


class ARCPolicy(EvictionPolicy):
    name = "arc"

    def __init__(self, config: PluginConfig | None = None, *, seed: int = 0) -> None:
        super().__init__(config, seed=seed)
        self._t1: OrderedDict[Hashable, None] = OrderedDict()
        self._t2: OrderedDict[Hashable, None] = OrderedDict()
        self._b1: OrderedDict[Hashable, None] = OrderedDict()
        self._b2: OrderedDict[Hashable, None] = OrderedDict()
        self._p = 0.0  # target size of T1
        self._c = 0  # capacity in blocks, learnt as the high-water mark of resident blocks
        self._proposed: Hashable | None = None
        #: the picks ``victims`` offered last: a tier that removes one of them evicted it (a ghost)
        self._offered: frozenset[Hashable] = frozenset()

    # -------------------------------------------------------------------- tier calls

    def insert(self, key: BlockKey, size: int, hint: BlockHint | None = None) -> None:
        if key in self._t1 or key in self._t2:
            self.touch(key)
            return
        if key in self._b1:  # evicted from T1 too early: favour recency
            self._p = min(float(self._c), self._p + max(1.0, len(self._b2) / len(self._b1)))
            del self._b1[key]
            self._t2[key] = None
        elif key in self._b2:  # evicted from T2 too early: favour frequency
            self._p = max(0.0, self._p - max(1.0, len(self._b1) / len(self._b2)))
            del self._b2[key]
            self._t2[key] = None
        else:
            self._t1[key] = None
        resident = len(self._t1) + len(self._t2)
        if resident > self._c:
            self._c = resident

    def touch(self, key: BlockKey) -> None:
        if key in self._t1:
            del self._t1[key]
            self._t2[key] = None
        elif key in self._t2:
            self._t2.move_to_end(key)

    def remove(self, key: BlockKey) -> None:
        evicted = key == self._proposed or key in self._offered
        self._proposed = None
        self._offered = frozenset()
        if key in self._t1:
            del self._t1[key]
            if evicted:
                self._b1[key] = None
        elif key in self._t2:
            del self._t2[key]
            if evicted:
                self._b2[key] = None
        else:
            return
        self._trim_ghosts()

    def victim(self, incoming: BlockKey | None = None) -> BlockKey | None:
        t1, t2 = self._t1, self._t2
        if t1 and (len(t1) > self._p or (incoming in self._b2 and len(t1) >= int(self._p)) or not t2):
            self._proposed = next(iter(t1))
        elif t2:
            self._proposed = next(iter(t2))
        else:
            return None
        return self._proposed  # type: ignore[return-value]

    def victims(self, incoming: BlockKey | None, limit: int) -> list[BlockKey]:
        """The next ``limit`` victims in order, state unchanged: ``victim``'s rule applied as T1 and
        T2 shrink (removals do not move ``p``). The tier may evict any of them; each is then a
        ghost, as the proposed victim is."""
        t1, t2, p = self._t1, self._t2, self._p
        left1, left2 = len(t1), len(t2)
        from_t1, from_t2 = iter(t1), iter(t2)
        hot = incoming in self._b2
        out: list[BlockKey] = []
        while len(out) < limit:
            if left1 and (left1 > p or (hot and left1 >= int(p)) or not left2):
                out.append(next(from_t1))  # type: ignore[arg-type]
                left1 -= 1
            elif left2:
                out.append(next(from_t2))  # type: ignore[arg-type]
                left2 -= 1
            else:
                break
        if out:
            self._proposed = out[0]
        self._offered = frozenset(out)
        return out

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, key: object) -> bool:
        return key in self._t1 or key in self._t2

    # -------------------------------------------------------------------- ghosts

    def _trim_ghosts(self) -> None:
        """|T1|+|B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c: ghosts never outgrow the cache."""
        c = self._c
        while self._b1 and len(self._t1) + len(self._b1) > c:
            self._b1.popitem(last=False)
        while self._b2 and len(self) + len(self._b1) + len(self._b2) > 2 * c:
            self._b2.popitem(last=False)

    @property
    def target_t1(self) -> float:
        """ARC's adaptive target size of the recency list (for tests and dashboards)."""
        return self._p
