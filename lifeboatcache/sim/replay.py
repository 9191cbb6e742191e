"""Replay a workload through the GPU prefix cache and one tier run by an ``EvictionPolicy``.

The tier is driven exactly as ``lifeboatcache_core.tier.Tier`` drives its policy (one policy
implementation, the same calls in the same order; ``tests/sim/test_tier_parity.py`` runs a real
``Tier`` beside it and compares the calls): a lookup reads the leading run of the prompt's
blocks that the tier holds (``Tier.fetch``: ``touch`` each), the engine recomputes the rest and
stores them in prompt order (``Tier.store``): a block the tier already holds is only
``touch``-ed; a new one is first offered to ``admit`` (refused: not stored, nothing evicted),
then a full tier evicts ``victim(incoming)`` and calls ``remove`` until it fits, and the block is
``insert``-ed with a ``BlockHint`` of session, parent and depth (a tier whose policy offers no
victim does not store it). Blocks the GPU cache served never reach the tier, as with vLLM's
offloading connector. With ``keep_prefixes`` (a tier's default) the tier's own veto on victims
runs too, the same ``PrefixGuard`` on the replay's clock.

A policy sees only the past: its calls carry the current request's blocks, and a policy with a
``clock`` attribute reads the current request's time through it
(``tests/sim/test_only_the_past.py`` checks that decisions up to any request do not depend on
the requests after it, and that a planted policy reading the future is caught).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import asdict, dataclass

from lifeboatcache_core.abc import BlockHint, EvictionPolicy
from lifeboatcache_core.prefixes import PrefixGuard

from lifeboatcache.sim.workload import Workload


@dataclass(frozen=True)
class ReplaySetup:
    """What the replay does around the policy, each as an adapter and a real ``Tier`` can be set up
    (``replay_policy`` says how each is replayed)."""

    #: hints name the session, as an adapter that knows the conversation gives (else prefix chains only)
    session_tags: bool = True
    #: vLLM's tier reports each finished request's chain (``EvictionPolicy.request_done``)
    request_ends: bool = False
    #: the tier's own veto on victims (``keep_prefixes``, on by default in a tier config)
    keep_prefixes: bool = False


#: the policy alone: session hints, no request ends, no prefix guard
PLAIN = ReplaySetup()


@dataclass(frozen=True)
class SimResult:
    """Prompt tokens of one run, split by where they came from."""

    policy: str
    capacity_frac: float | None
    capacity_blocks: int
    tokens_from_engine: int
    tokens_from_tiers: int
    tokens_recomputed: int
    seconds: float

    @property
    def tokens_total(self) -> int:
        return self.tokens_from_engine + self.tokens_from_tiers + self.tokens_recomputed

    @property
    def hit_frac(self) -> float:
        """Prompt tokens not recomputed ÷ all prompt tokens."""
        total = self.tokens_total
        return (self.tokens_from_engine + self.tokens_from_tiers) / total if total else 0.0

    def row(self) -> dict[str, object]:
        row = asdict(self)
        row["hit_frac"] = round(self.hit_frac, 4)
        row["seconds"] = round(self.seconds, 2)
        return row


def split_tokens(workload: Workload, gpu_hits: list[int], tier_hits: list[int]) -> tuple[int, int, int]:
    """(from engine, from tiers, recomputed) prompt tokens, given per-request hit blocks."""
    bt = workload.block_tokens
    engine = tiers = recomputed = 0
    for tokens, g, t in zip(workload.input_tokens, gpu_hits, tier_hits, strict=True):
        from_engine = min(g * bt, tokens)
        from_tiers = min(t * bt, tokens - from_engine)
        engine += from_engine
        tiers += from_tiers
        recomputed += tokens - from_engine - from_tiers
    return engine, tiers, recomputed


def replay_policy(workload: Workload, gpu_hits: list[int], policy: EvictionPolicy,
                  capacity_blocks: int, setup: ReplaySetup = PLAIN) -> list[int]:
    """Run the tier; return each request's tier hit (leading run of blocks after the GPU hit).

    With ``setup.session_tags`` each stored block's hint names its session (as an adapter that knows
    the conversation does); without, policies see only the prefix chain (parent, depth). Every
    block counts as one unit of ``capacity_blocks`` and as size 1 in the policy calls.

    With ``setup.request_ends`` the replay also does what vLLM's tier does when a request finishes
    (``LifeboatTier.on_request_finished``): at the response's end (``workload.ends``) the
    prompt's chain is handed over, tail first, to be marked used by
    ``EvictionPolicy.request_done``; and when a request comes in, vLLM's tier marks its chain
    used (``LifeboatTier._mark_asked``: ``touch``, tail first). As in a real tier
    (``Tier.touch``), those uses are kept and applied when the next new block is admitted and
    room is made for it (``Tier._reserve``), each at its own time on the policy's clock, for the
    blocks the tier holds then: after the reads of the requests that came in meanwhile, not
    before them.

    With ``setup.keep_prefixes`` the tier guards sessions' leading blocks as a tier with
    ``keep_prefixes = true`` (the default) does (``Tier._reserve``): a victim stored with a depth,
    used more recently than the learnt idle limit and not one its session left
    (``EvictionPolicy.abandoned``) declines the incoming block (victims taken before it stay
    evicted). The guard learns return gaps from reads and kept uses on the replay's clock, as the
    tier's does on its own (``PrefixGuard``).
    """
    if capacity_blocks < 1:
        raise ValueError(f"capacity_blocks must be >= 1, got {capacity_blocks}")
    request_ends = setup.request_ends
    if request_ends and workload.ends is None:
        raise ValueError("request_ends needs the workload's response end times (Workload.ends)")
    present: set[int] = set()
    admit, insert, touch = policy.admit, policy.insert, policy.touch
    remove, victim, done = policy.remove, policy.victim, policy.request_done
    guard = PrefixGuard() if setup.keep_prefixes else None
    add, discard = present.add, present.discard
    tier_hits: list[int] = []
    tags = workload.streams if setup.session_tags else [None] * len(workload.blocks)
    ends: list[tuple[float, int]] = []  # (end time, request index) of requests not ended yet
    # (time, request index, ended: else asked for) of uses kept until the next reservation (Tier.touch)
    ended: list[tuple[float, int, bool]] = []
    now = [0.0]
    if getattr(policy, "clock", None) is not None:  # policies that reason about time see the replay's clock
        policy.clock = lambda: now[0]

    def apply_ends() -> None:  # Tier._apply_uses: each kept use at its own time
        current = now[0]
        for at, n, finished in ended:
            now[0] = at
            use = done if finished else touch
            for block in reversed(workload.blocks[n]):
                if block in present:
                    use(block)  # type: ignore[arg-type]
                    if guard is not None:
                        guard.used(block, at, request_done=finished)  # type: ignore[arg-type]
        ended.clear()
        now[0] = current

    for n, (blocks, g, tag, t) in enumerate(zip(workload.blocks, gpu_hits, tags, workload.times, strict=True)):
        while ends and ends[0][0] <= t:  # LifeboatTier.on_request_finished of each ended request
            ended.append((*heapq.heappop(ends), True))
        if request_ends:
            heapq.heappush(ends, (workload.ends[n], n))  # type: ignore[index]
            ended.append((t, n, False))  # LifeboatTier._mark_asked
        now[0] = t
        end = len(blocks)
        pos = g
        while pos < end and blocks[pos] in present:  # Tier.fetch of the leading run
            touch(blocks[pos])  # type: ignore[arg-type]
            if guard is not None:
                guard.used(blocks[pos], t)  # type: ignore[arg-type]
            pos += 1
        tier_hits.append(pos - g)
        parent = blocks[pos - 1] if pos else None
        for depth in range(pos, end):  # Tier.store of each recomputed block, in prompt order
            block = blocks[depth]
            if block in present:  # content-addressed: already held, only touched
                touch(block)  # type: ignore[arg-type]
            else:
                hint = BlockHint(tag, parent, depth)  # type: ignore[arg-type]
                if admit(block, 1, hint):  # type: ignore[arg-type]
                    if ended:
                        apply_ends()
                    while len(present) >= capacity_blocks:  # Tier._reserve
                        evicted = victim(block)  # type: ignore[arg-type]
                        if evicted is None:
                            break
                        if guard is not None:
                            if guard.protects(evicted, t) and not policy.abandoned(evicted):
                                break  # declined: the block is not stored
                            guard.forget(evicted)
                        remove(evicted)
                        discard(evicted)  # type: ignore[arg-type]
                    if len(present) < capacity_blocks:
                        add(block)
                        if guard is not None:
                            guard.stored(block, depth, t)  # type: ignore[arg-type]
                        insert(block, 1, hint)  # type: ignore[arg-type]
            parent = block
    return tier_hits


def simulate(workload: Workload, gpu_hits: list[int], policy: EvictionPolicy, capacity_blocks: int,
             capacity_frac: float | None = None, label: str | None = None,
             setup: ReplaySetup = PLAIN) -> SimResult:
    """One policy at one size: token split and CPU seconds (one core, immune to other load)."""
    started = time.process_time()
    tier_hits = replay_policy(workload, gpu_hits, policy, capacity_blocks, setup)
    engine, tiers, recomputed = split_tokens(workload, gpu_hits, tier_hits)
    return SimResult(label or policy.name, capacity_frac, capacity_blocks, engine, tiers, recomputed,
                     time.process_time() - started)
