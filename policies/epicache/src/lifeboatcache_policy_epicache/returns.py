"""Who comes back within the tier's horizon: an online model of sessions' return gaps.

Bélády evicts the block needed farthest in the future; a session's blocks are all needed at its
next request, so the question per session is *will it be back before its blocks would leave the
tier anyway*. The model answers it as ``P(gap <= age + H | gap > age, class)``: the chance that a
session idle for ``age`` seconds returns within the next ``H`` seconds, ``H`` being the tier's
turnover time (its blocks over its insert rate, times ``horizon``), from the gaps seen so far.

* Gaps are counted in log-spaced bins (half an octave wide, 0.5 s to ~25 h), per *class* of the
  session's previous gap (none yet, < 16 s, 16-64 s, >= 64 s: an agent in a run of tool calls is
  back in seconds, one waiting for its user takes minutes). A class with few gaps leans on the
  pooled counts (a prior of ``PRIOR`` pseudo-gaps shaped like all gaps together).
* The age enters through the survival function, which is what makes a session that has been
  away for most of a tool call's usual gap likely to return soon and one idle for far longer
  than any gap seen (the session ended) unlikely ever to: no per-session deadline to tune.
* Sessions that ended are never observed returning; their gaps never enter the counts, so an
  age past every observed gap scores 0 and goes first.

Everything is learnt online from the policy's own calls; nothing is tuned per trace at run
time. Cost: ``observe`` is O(1); ``table`` (the score of every class and age bin) is
O(classes x bins) and is recomputed only every ``REFRESH`` gaps or when ``H`` moves by a fifth.
"""

from __future__ import annotations

import math

#: lowest bin edge (seconds) and bins per octave
FIRST_EDGE_S = 0.5
PER_OCTAVE = 2
BINS = 36  # edges 0.5 s .. 2^16.5 s (~25 h); age bin i holds ages in [edge(i-1), edge(i))
#: previous-gap class boundaries (seconds); class 0 = no previous gap yet
CLASS_EDGES_S = (16.0, 64.0)
CLASSES = len(CLASS_EDGES_S) + 2
PRIOR = 20.0
REFRESH = 64
_LOG_FIRST = math.log2(FIRST_EDGE_S)


def edge(i: int) -> float:
    return 2.0 ** (_LOG_FIRST + i / PER_OCTAVE)


EDGES = [edge(i) for i in range(BINS)]


def age_bin(age: float) -> int:
    """0 for age < 0.5 s, then one bin per half octave, ``BINS`` for ages past the last edge."""
    if age < FIRST_EDGE_S:
        return 0
    return min(BINS, 1 + int((math.log2(age) - _LOG_FIRST) * PER_OCTAVE))


def gap_class(gap: float | None) -> int:
    if gap is None:
        return 0
    for c, bound in enumerate(CLASS_EDGES_S):
        if gap < bound:
            return c + 1
    return CLASSES - 1


class ReturnModel:
    """Counts of observed return gaps per class, and the score table derived from them."""

    def __init__(self) -> None:
        self.counts = [[0.0] * (BINS + 1) for _ in range(CLASSES)]
        self.pooled = [0.0] * (BINS + 1)
        self.seen = 0
        self._since_table = 0
        self._table_h = -1.0
        self._table: list[list[float]] | None = None

    def observe(self, klass: int, gap: float) -> None:
        b = age_bin(gap)
        self.counts[klass][b] += 1.0
        self.pooled[b] += 1.0
        self.seen += 1
        self._since_table += 1

    def _survival(self, pdf: list[float], total: float) -> list[float]:
        """S at each edge: the share of gaps longer than ``edge(i)`` (index ``i``)."""
        above = total
        out = []
        for i in range(BINS):
            above -= pdf[i]  # bin i holds gaps below edge(i)
            out.append(max(above, 0.0) / total)
        return out

    @staticmethod
    def _at(surv: list[float], t: float) -> float:
        """S(t), log-linear between edges; 1 below the first edge's bin, 0 past the last edge."""
        if t <= 0.0:
            return 1.0
        if t >= EDGES[-1]:
            return 0.0
        if t < FIRST_EDGE_S:
            lo_t, lo_s, hi_t, hi_s = FIRST_EDGE_S / 2, 1.0, FIRST_EDGE_S, surv[0]
        else:
            i = int((math.log2(t) - _LOG_FIRST) * PER_OCTAVE)
            lo_t, lo_s, hi_t, hi_s = EDGES[i], surv[i], EDGES[i + 1], surv[i + 1]
        if t <= lo_t:
            return lo_s
        w = (math.log2(t) - math.log2(lo_t)) / (math.log2(hi_t) - math.log2(lo_t))
        return lo_s + w * (hi_s - lo_s)

    def table(self, horizon_s: float) -> list[list[float]] | None:
        """``[class][age bin]`` → P(back within ``horizon_s`` | away that long); None until gaps are seen."""
        if self.seen < REFRESH:
            return None
        fresh = self._table is not None and self._since_table < REFRESH
        if fresh and abs(horizon_s - self._table_h) <= 0.2 * self._table_h:
            return self._table
        total = sum(self.pooled)
        prior = [PRIOR * p / total for p in self.pooled]
        table = []
        for klass in range(CLASSES):
            pdf = [c + p for c, p in zip(self.counts[klass], prior, strict=True)]
            surv = self._survival(pdf, sum(pdf))
            row = []
            for b in range(BINS + 1):
                age = FIRST_EDGE_S / 2 if b == 0 else (EDGES[b - 1] * (EDGES[b] if b < BINS else 2 * EDGES[-1])) ** 0.5
                s = self._at(surv, age)
                row.append((s - self._at(surv, age + horizon_s)) / s if s > 1e-12 else 0.0)
            table.append(row)
        self._table, self._table_h, self._since_table = table, horizon_s, 0
        return table
