"""Predictive staging (lifeboatcache_core.staging): behaviour, never timing.

Stacks are a small DRAM tier (``stage = true``) over a file tier. Sessions are the tags of
the blocks' hints, as the adapters set them. Every wait is on an event or a job, with a
generous timeout that only turns a hang into a failure.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lifeboatcache_backend_file.backend import FileBackend
from lifeboatcache_core.abc import BlockHint
from lifeboatcache_core.cache import TieredCache
from lifeboatcache_core.config import (
    GB,
    LifeboatConfig,
    StagingConfig,
    config_problems,
    load_config_dict,
    validation_problems,
)
from lifeboatcache_core.errors import ConfigError
from lifeboatcache_core.keys import BlockKey
from pydantic import ValidationError

from tests.core.helpers import blobs, file_tier, keys, open_cache

BLOCK = 4096
#: what the tier reserves per block beyond its payload while it writes (tier.BLOCK_OVERHEAD)
SLACK = 8000
TIMEOUT = 30.0


def dram_tier(blocks: int, **extra: Any) -> dict[str, Any]:
    """A DRAM tier that holds exactly ``blocks`` blocks of BLOCK bytes (plain policy order: no keep_prefixes)."""
    return {"name": "dram", "backend": "dram", "capacity_gb": (blocks * BLOCK + SLACK) / GB, "stage": True,
            "keep_prefixes": False, **extra}


def session(cache: TieredCache, tag: str, n: int, start: int,
            depth: int = 0) -> tuple[list[BlockKey], list[bytes]]:
    """Store ``n`` blocks of session ``tag`` (hints as an adapter sets them, the first at ``depth``)
    and return them."""
    ks, data = keys(n, start=start), blobs(n, BLOCK)
    for i in range(n):  # one by one: concurrent writes reserve their overhead too, and a tight tier evicts more
        hint = BlockHint(tag=tag, parent=ks[i - 1] if i else None, depth=depth + i)
        assert cache.put([ks[i]], [data[i]], hints=[hint]) == [True]
    return ks, data


def in_tier(cache: TieredCache, name: str, ks: list[BlockKey]) -> list[bool]:
    tier = next(t for t in cache.all_tiers if t.name == name)
    return [tier.presence(k) is True for k in ks]


def counters(cache: TieredCache) -> dict[str, int]:
    return cache.telemetry.counters()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Callable[..., TieredCache]]:
    opened: list[TieredCache] = []

    def make(dram_blocks: int = 64, write: str = "through", dram: dict[str, Any] | None = None,
             nvme: dict[str, Any] | None = None) -> TieredCache:
        cache = open_cache(tmp_path, dram_tier(dram_blocks, **(dram or {})),
                           file_tier(tmp_path / "nvme", write=write, **(nvme or {})))
        opened.append(cache)
        return cache
    yield make
    for cache in opened:
        cache.close()


def test_a_hinted_session_is_staged_into_the_top_tier(stack: Callable[..., TieredCache]) -> None:
    cache = stack()
    a, a_data = session(cache, "a", 8, start=0)
    b, _ = session(cache, "b", 8, start=100)
    cache.all_tiers[0].discard(a + b)  # both sessions now only in the file tier
    assert not any(in_tier(cache, "dram", a + b))

    assert cache.stage("a", 0.0) == 8
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", a)), "the hinted session is in the top tier"
    assert not any(in_tier(cache, "dram", b)), "a session without a hint stays where it was"
    assert counters(cache)["staged_bytes"] == 8 * BLOCK
    hits = cache.all_tiers[0].stats.hits
    out = [bytearray(BLOCK) for _ in a]
    assert all(cache.get(a, out))
    assert [bytes(o) for o in out] == a_data
    assert cache.all_tiers[0].stats.hits == hits + 8, "the returning session is served from DRAM"
    assert counters(cache)["staged_used_bytes"] == 8 * BLOCK


def test_handing_out_a_plans_blocks_costs_the_stager_no_pass_over_the_plan(
        stack: Callable[..., TieredCache], monkeypatch: pytest.MonkeyPatch) -> None:
    """The stager picks each block under the lock the engine's ``observe_*`` calls take: summing
    what is left of a plan on every block made staging a session of n blocks cost n^2 / 2 block
    lookups there (holding that lock 0.08-0.46 ms a block in bench staging with 12 sessions).
    Linear now: the plan's bytes once, then a lookup per block handed out or put back (busy
    source threads), ~3.5 n here; n^2 / 2 would be 1,800."""
    cache = stack(dram_blocks=128)
    n = 60
    a, _ = session(cache, "a", n, start=0)
    cache.all_tiers[0].discard(a)
    lookups = [0]
    block = cache.stager._block

    def counted(key: BlockKey) -> Any:
        lookups[0] += 1
        return block(key)
    monkeypatch.setattr(cache.stager, "_block", counted)
    assert cache.stage("a", 0.0) == n
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a))
    assert lookups[0] <= 8 * n, f"{lookups[0]} block lookups to stage {n} blocks"


def test_a_session_back_just_before_another_begins_staging_early_enough_for_both(
        stack: Callable[..., TieredCache]) -> None:
    """Staging works earliest return first, so a session must be done when the next one has to
    begin, not only by its own return: a, back in 3 s, and b, in 4 s, each need 2 s here (twice
    their bytes at the rate), so b begins at 2 s and a at once, and a begun plan runs to its end.
    Before, a began at 1 s, each only its own lead before its return, and a plan paused after
    every block until its start, recomputed from the bytes left, came again: sessions back close
    together were still being staged when the first arrived (bench staging: read from S3)."""
    cache = stack()
    a, _ = session(cache, "a", 8, start=0)
    b, _ = session(cache, "b", 8, start=100)
    cache.all_tiers[0].discard(a + b)
    stager = cache.stager
    now = stager.clock()
    stager.clock = lambda: now  # the schedule is judged at this instant
    stager.lead_s, stager.rate_bytes_s = 0.0, 8 * BLOCK  # 2 s a session; staging 8 blocks takes ~1 s
    assert cache.stage("b", 4.0) == 8
    assert cache.stage("a", 3.0) == 8
    assert stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a)), "a has to begin now for b to begin in time"
    assert not any(in_tier(cache, "dram", b)), "b is not due for 2 s"


def test_a_tier_without_stage_true_receives_nothing(tmp_path: Path) -> None:
    # DRAM (no stage) over nvme (stage) over a remote file tier: staging is on, but not into DRAM
    cache = open_cache(tmp_path, dram_tier(64, stage=False), file_tier(tmp_path / "nvme", stage=True),
                       {**file_tier(tmp_path / "remote"), "name": "remote"})
    try:
        a, _ = session(cache, "a", 4, start=0)
        cache.all_tiers[0].discard(a)
        cache.all_tiers[1].discard(a)  # only in the remote tier now
        assert cache.stage("a", 0.0) == 4
        assert cache.stager.wait_idle(TIMEOUT)
        assert not any(in_tier(cache, "dram", a))
        assert all(in_tier(cache, "nvme", a)), "the stage = true tier above the holder got them"
        assert counters(cache)["staged_bytes"] == 4 * BLOCK
    finally:
        cache.close()


def test_a_session_hinted_far_ahead_is_stocked_into_the_lower_stage_tier_before_its_start(tmp_path: Path) -> None:
    """Before, a plan did nothing until its top tier's lead before the return, also for blocks that
    had left every tier but the slowest: a session hinted 14 s ahead in bench staging began 0.8 s
    before its return and read 38 blocks from S3. Now the lower stage tiers are stocked meanwhile,
    the earliest returns that fit in half such a tier, and the top tier still waits for the start."""
    nvme_gb = 3 * 8 * BLOCK / GB  # half of it holds one session of 8 blocks, not two
    cache = open_cache(tmp_path, dram_tier(64), file_tier(tmp_path / "nvme", capacity_gb=nvme_gb, stage=True),
                       {**file_tier(tmp_path / "remote"), "name": "remote"})
    try:
        a, a_data = session(cache, "a", 8, start=0)
        b, _ = session(cache, "b", 8, start=100)
        for tier in cache.all_tiers[:2]:
            tier.discard(a + b)  # both only in the remote tier now
        assert cache.stage("a", 60.0) == 8
        assert cache.stage("b", 70.0) == 8
        assert cache.stager.wait_idle(TIMEOUT)

        assert all(in_tier(cache, "nvme", a)), "the earlier return was stocked into the near tier"
        assert not any(in_tier(cache, "nvme", b)), "the later one does not fit in half of it"
        assert not any(in_tier(cache, "dram", a + b)), "the top tier waits for each plan's start"
        assert counters(cache)["staged_bytes"] == 8 * BLOCK
        out = [bytearray(BLOCK) for _ in a]
        assert all(cache.get(a, out)) and [bytes(o) for o in out] == a_data
        assert counters(cache)["staged_used_bytes"] == 8 * BLOCK, "a stocked block read is a staged block used"
    finally:
        cache.close()


def test_a_block_still_being_stocked_when_its_plan_starts_reaches_the_top_tier(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stocking copy goes to the tiers below the top only; a plan that starts (here: a new hint)
    while it is in flight passes the block as queued. The block is looked at again when the copy
    lands: before, it stayed below the top tier (bench staging: 4-5 late arrivals a run)."""
    cache = open_cache(tmp_path, dram_tier(64), file_tier(tmp_path / "nvme", stage=True),
                       {**file_tier(tmp_path / "remote"), "name": "remote", "io_threads": 8})  # 4 for staging
    try:
        a, _ = session(cache, "a", 8, start=0)
        for tier in cache.all_tiers[:2]:
            tier.discard(a)
        remote = cache.all_tiers[2]
        fetch, gate, held = remote.fetch, threading.Event(), threading.Semaphore(0)

        def gated(key: BlockKey, dest: memoryview, **kw: Any) -> Any:
            if key in a[:2]:  # the first stocking reads: in flight until the gate opens
                held.release()
                assert gate.wait(TIMEOUT)
            return fetch(key, dest, **kw)
        monkeypatch.setattr(remote, "fetch", gated)

        assert cache.stage("a", 60.0) == 8  # stocking into nvme begins
        assert held.acquire(timeout=TIMEOUT)
        assert cache.stage("a", 0.0) == 8  # due now: the new plan starts and passes the queued blocks
        deadline = time.monotonic() + TIMEOUT
        while not all(in_tier(cache, "dram", a[2:])) and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.set()
        assert cache.stager.wait_idle(TIMEOUT)
        assert all(in_tier(cache, "dram", a)), "the blocks that were being stocked reached the top tier too"
    finally:
        cache.close()


def test_a_staged_blocks_copy_below_the_top_tier_is_kept_for_its_return(tmp_path: Path) -> None:
    """The stager reads a block it stages without a use, so its copy in the stage tier below aged
    as if nobody wanted it, and the engine's next stores evicted it first: when the top tier
    dropped the block before the session was back, the session read it from the slowest tier
    (bench staging, traces 31-40: 58 blocks of one session from S3). Every stage tier holding a
    block of a hinted plan now hears that it is expected (``Tier.expect``)."""
    cache = open_cache(tmp_path, dram_tier(64), file_tier(tmp_path / "nvme", stage=True, keep_prefixes=False),
                       {**file_tier(tmp_path / "remote"), "name": "remote"})
    try:
        a, _ = session(cache, "a", 8, start=0)
        c, _ = session(cache, "c", 8, start=100)
        nvme = cache.all_tiers[1]
        nvme.resize(nvme.used + BLOCK)  # full: each next store evicts one block (it reserves a block's overhead more)
        assert all(in_tier(cache, "nvme", a + c))
        cache.all_tiers[0].discard(a)
        assert cache.stage("a", 0.0) == 8
        assert cache.stager.wait_idle(TIMEOUT)
        assert all(in_tier(cache, "dram", a)), "staged from the tier below"

        session(cache, "d", 8, start=200)  # the engine's store: 8 blocks must leave the nvme tier
        assert all(in_tier(cache, "nvme", a)), "the expected session's copies below stayed"
        assert not any(in_tier(cache, "nvme", c)), "the policy took the blocks nobody expects"
    finally:
        cache.close()


def _two_tiers(tmp_path: Path, bottom_stage: object) -> dict[str, Any]:
    return {"tiers": [dram_tier(8), file_tier(tmp_path / "nvme", stage=bottom_stage)],
            "fallback_local": {"enabled": False, "path": str(tmp_path / "fb")}}


def test_stage_true_on_the_bottom_tier_is_a_config_error_by_key_path(tmp_path: Path) -> None:
    """Nothing is below the bottom tier to stage from: ``stage = true`` there is refused, not ignored."""
    with pytest.raises(ConfigError, match=r"tiers\.1\.stage: stage = true on the bottom tier 'nvme'"):
        load_config_dict(_two_tiers(tmp_path, True))
    assert config_problems(_two_tiers(tmp_path, "yes"))[0][0] == "tiers.1.stage"  # YAML's "yes" is true too
    assert config_problems(_two_tiers(tmp_path, False)) == []
    only = {"tiers": [{"backend": "dram", "capacity_gb": 1, "stage": True}]}
    assert [where for where, _ in config_problems(only)] == ["tiers.0.stage"]
    try:  # the dashboard's Configure form shows it under the same key
        LifeboatConfig.model_validate(_two_tiers(tmp_path, True))
    except ValidationError as exc:
        assert [where for where, _ in validation_problems(exc, LifeboatConfig)] == ["tiers.1.stage"]
    else:
        raise AssertionError("stage = true on the bottom tier was accepted")

    # `config validate` lists it with the other problems, also when the tier's own fields are bad
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[staging]\nrate_mb_s = 0\n\n[[tiers]]\nbackend = "dram"\ncapacity_gb = 1\nstage = true\n\n'
                   f'[[tiers]]\nname = "nvme"\nbackend = "file"\npath = "{tmp_path}"\ncapacity_gb = -1\n'
                   f'stage = true\n')
    result = subprocess.run([sys.executable, "-m", "lifeboatcache", "config", "validate", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].endswith("3 problems"), result.stderr
    where = {line.strip().split(": ", 1)[0]: line.split(": ", 1)[1] for line in lines[1:]}
    assert set(where) == {"staging.rate_mb_s", "tiers.1.capacity_gb", "tiers.1.stage"}, result.stderr
    assert "no tier below it to stage from" in where["tiers.1.stage"]


def test_staging_never_evicts_a_block_only_the_full_top_tier_holds(stack: Callable[..., TieredCache]) -> None:
    # write-back file tier: a DRAM block reaches the file tier only when DRAM evicts it
    cache = stack(dram_blocks=6, write="back")
    a, _ = session(cache, "a", 6, start=0)
    b, b_data = session(cache, "b", 6, start=100)  # fills DRAM: a is demoted to the file tier
    assert all(in_tier(cache, "dram", b)) and not any(in_tier(cache, "nvme", b))
    assert all(in_tier(cache, "nvme", a)) and not any(in_tier(cache, "dram", a))

    cache.stage("a", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", b)), "staging evicted a block that would have been a DRAM hit"
    out = [bytearray(BLOCK) for _ in b]
    hits = cache.all_tiers[0].stats.hits
    assert all(cache.get(b, out)) and [bytes(o) for o in out] == b_data
    assert cache.all_tiers[0].stats.hits == hits + 6
    assert counters(cache)["staged_bytes"] == 0


def test_staging_takes_the_policys_victims_when_a_lower_tier_still_holds_them(
        stack: Callable[..., TieredCache]) -> None:
    cache = stack(dram_blocks=6)  # write-through: every block is in the file tier too
    a, _ = session(cache, "a", 6, start=0)
    b, b_data = session(cache, "b", 6, start=100)  # DRAM holds b; a is in the file tier only
    assert not any(in_tier(cache, "dram", a))

    cache.stage("a", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", a))
    out = [bytearray(BLOCK) for _ in b]
    assert all(cache.get(b, out)) and [bytes(o) for o in out] == b_data, "b's evicted blocks still hit below"


def test_staging_spares_a_session_expected_back_sooner(stack: Callable[..., TieredCache]) -> None:
    cache = stack(dram_blocks=6)
    a, _ = session(cache, "a", 6, start=0)
    b, _ = session(cache, "b", 6, start=100)
    cache.stager.lead_s = 120.0  # a, back in a minute, is due for staging now
    cache.stage("b", 5.0)  # b is back in 5 s (and already in DRAM)
    cache.stage("a", 60.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", b)), "a later session displaced one expected back sooner"
    assert not any(in_tier(cache, "dram", a))


@pytest.mark.parametrize("kept_by", ["a session expected back sooner", "the prefix guard"])
def test_staging_looks_past_the_victims_it_may_not_take(stack: Callable[..., TieredCache], kept_by: str) -> None:
    """The policy's oldest blocks are kept (by a sooner return, or by the tier's prefix guard); its
    next ones are not: a staging store takes those rather than giving up its room at the first
    kept one (before, ``bench staging`` declined 732 of 1,711 staging stores into DRAM)."""
    guard = kept_by == "the prefix guard"
    cache = stack(dram_blocks=6, dram={"keep_prefixes": guard})
    # the guard keeps every live session's block (b's), not blocks stored without a depth (c's)
    a, _ = session(cache, "a", 3, start=0, depth=3)
    cache.all_tiers[0].discard(a)  # a is in the file tier only
    b, _ = session(cache, "b", 3, start=100)
    c = keys(3, start=200)
    for key, data in zip(c, blobs(3, BLOCK), strict=True):
        assert cache.put([key], [data]) == [True]
    assert in_tier(cache, "dram", b + c) == [True] * 6, "DRAM is full: b's blocks are the oldest"
    cache.stager.lead_s = 120.0  # a, back in a minute, is due for staging now
    if not guard:
        cache.stage("b", 5.0)  # b is back in 5 s: its blocks may not make room for a
    cache.stage("a", 60.0)
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", a)), "the room of blocks nobody keeps went unused"
    assert all(in_tier(cache, "dram", b)), "a kept block was evicted"
    assert all(in_tier(cache, "nvme", c)), "c's evicted blocks still hit below"


def test_a_plan_keeps_the_blocks_the_top_tier_holds_already(stack: Callable[..., TieredCache]) -> None:
    """A session whose blocks are still in DRAM has nothing to stage, but its blocks must last
    until it is back as staged copies would: stores before its arrival evict others first
    (``bench staging``: sessions found them gone and read them from S3)."""
    cache = stack(dram_blocks=6)
    a, _ = session(cache, "a", 3, start=0)
    b, _ = session(cache, "b", 3, start=100)  # DRAM is full; a's blocks are the oldest
    cache.stage("a", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert counters(cache)["staged_bytes"] == 0

    session(cache, "c", 3, start=200)  # the engine stores another session's blocks

    assert all(in_tier(cache, "dram", a)), "the returning session's blocks left before it came back"
    assert not any(in_tier(cache, "dram", b)) and all(in_tier(cache, "nvme", b))


def wait_until(check: Callable[[], bool]) -> bool:
    """Poll ``check`` until it holds or TIMEOUT passes (for what the stager does with no caller waiting)."""
    deadline = time.monotonic() + TIMEOUT
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_block_the_top_tier_drops_after_its_plan_passed_it_is_staged_again_at_once(
        stack: Callable[..., TieredCache]) -> None:
    """A plan passes the blocks the top tier holds already (nothing to stage). When that tier
    drops one before the session is back (an engine's store evicted it), the removal itself
    wakes the stager and the plan stages it again; no timed pass comes here (``poll_s`` an
    hour). Before, the plan's cursor had passed it for good (bench staging: sessions due back
    within a second read such blocks from S3)."""
    cache = stack()
    cache.stager.poll_s = 3600.0
    a, _ = session(cache, "a", 6, start=0)  # in DRAM and, write-through, in the file tier
    cache.stager.lead_s = 120.0  # a, back in a minute, is due for staging now
    cache.stage("a", 60.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a)) and counters(cache)["staged_bytes"] == 0

    cache.all_tiers[0].discard(a[2:4])

    assert wait_until(lambda: all(in_tier(cache, "dram", a))), "the dropped blocks stayed below"
    assert counters(cache)["staged_bytes"] == 2 * BLOCK


def test_the_stager_wakes_when_a_plan_must_start_not_at_its_next_timed_pass(
        stack: Callable[..., TieredCache]) -> None:
    """A plan begins ``lead_s`` before its return; the stager sleeps until then, not for a whole
    ``poll_s``, which ate most of the lead (bench staging: 250 ms of a 500 ms lead)."""
    cache = stack()
    cache.stager.poll_s = 3600.0
    a, _ = session(cache, "a", 4, start=0)
    cache.all_tiers[0].discard(a)
    cache.stager.lead_s = 0.5

    cache.stage("a", 1.0)  # its staging is due in half a second

    assert wait_until(lambda: all(in_tier(cache, "dram", a))), "the plan waited for a timed pass"


def test_a_staging_store_overrules_the_prefix_guard_for_sessions_back_later(
        stack: Callable[..., TieredCache]) -> None:
    """The prefix guard keeps the heads of active sessions from deeper blocks; it knows no return
    times. A hinted plan may take such a head when its session is back later than the plan's
    (a lower tier still holds it); a session with no plan stays the guard's
    (``test_staging_looks_past_the_victims_it_may_not_take``). Before, a file tier kept every
    head and sessions due back within a second found their deep blocks in S3 only."""
    cache = stack(dram_blocks=6, dram={"keep_prefixes": True})
    a, _ = session(cache, "a", 3, start=0, depth=3)
    cache.all_tiers[0].discard(a)  # a is in the file tier only
    b, _ = session(cache, "b", 3, start=100)  # heads: the guard keeps them from a's deeper blocks
    c, _ = session(cache, "c", 3, start=200)
    assert all(in_tier(cache, "dram", b + c))
    cache.stager.lead_s = 120.0
    cache.stage("b", 600.0)  # b and c are back in ten minutes (their staging not due yet)
    cache.stage("c", 600.0)

    cache.stage("a", 60.0)  # a in one
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", a)), "the guard kept the heads of sessions back later"
    assert all(in_tier(cache, "nvme", b + c)), "the heads taken still hit below"


def branch(cache: TieredCache, tag: str, head: list[BlockKey], n: int, start: int) -> list[BlockKey]:
    """A later prompt of ``tag`` that shares ``head`` and then goes its own way: ``n`` new blocks after it."""
    ks, data = keys(n, start=start), blobs(n, BLOCK)
    chain = head + ks
    for i, key in enumerate(ks):
        depth = len(head) + i
        hint = BlockHint(tag=tag, parent=chain[depth - 1] if depth else None, depth=depth)
        assert cache.put([key], [data[i]], hints=[hint]) == [True]
    return ks


def test_a_block_stored_again_does_not_end_the_sessions_latest_prompt(stack: Callable[..., TieredCache]) -> None:
    """An engine stores again blocks it had (a head it read back): the latest prompt still ends at
    the last *new* block. Before, the re-stored head became the plan's tip and its return read the
    rest from below (bench returning --stack: 40 of 58 blocks planned)."""
    cache = stack()
    a, a_data = session(cache, "a", 6, start=0)
    hints = [BlockHint(tag="a", parent=a[i - 1] if i else None, depth=i) for i in range(3)]
    cache.all_tiers[0].discard(a)
    assert cache.put(a[:3], a_data[:3], hints=hints) == [True] * 3  # the head, stored again

    assert cache.stage("a", 0.0) == 6
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a))


def test_a_prompts_tail_stored_before_its_head_still_ends_it(stack: Callable[..., TieredCache]) -> None:
    """An engine may store a prompt's tail before its head (vLLM with its CPU tier in front): the
    prompt still ends at its deepest block. Before, the head's last block became the tip and the
    plan staged the head only (bench returning --stack: 40 of 58 blocks)."""
    cache = stack()
    ks, data = keys(6), blobs(6, BLOCK)
    hints = [BlockHint(tag="a", parent=ks[i - 1] if i else None, depth=i) for i in range(6)]
    assert cache.put(ks[3:], data[3:], hints=hints[3:]) == [True] * 3  # the tail first
    assert cache.put(ks[:3], data[:3], hints=hints[:3]) == [True] * 3
    cache.all_tiers[0].discard(ks)

    assert cache.stage("a", 0.0) == 6
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", ks))


def test_a_plan_stages_the_latest_prompt_not_a_branch_it_left(stack: Callable[..., TieredCache]) -> None:
    """A returning turn extends the session's latest prompt: blocks of an earlier prompt that
    branched off it are not staged (they would be waste), a shared head is."""
    cache = stack()
    first, _ = session(cache, "a", 4, start=0)
    latest = branch(cache, "a", first[:2], 2, start=50)  # turn 2 kept 2 blocks of turn 1, then diverged
    cache.all_tiers[0].discard(first + latest)

    assert cache.stage("a", 0.0) == 4
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", first[:2] + latest)), "the latest prompt is in the top tier"
    assert not any(in_tier(cache, "dram", first[2:])), "the branch the session left was staged"
    assert counters(cache)["staged_bytes"] == 4 * BLOCK


def test_staging_may_evict_the_sessions_own_branch_it_left(stack: Callable[..., TieredCache]) -> None:
    """Blocks of a branch the session left are not expected back: its own staging may take their room
    (they stay in the file tier), where blocks its return will read are never evicted for it."""
    cache = stack(dram_blocks=4)  # write-through: every block is in the file tier too
    first, _ = session(cache, "a", 4, start=0)
    latest = branch(cache, "a", first[:2], 2, start=50)  # DRAM evicts first[:2] for them
    cache.all_tiers[0].discard(latest)
    assert in_tier(cache, "dram", first) == [False, False, True, True]

    assert cache.stage("a", 0.0) == 4
    assert cache.stager.wait_idle(TIMEOUT)

    assert all(in_tier(cache, "dram", first[:2] + latest)), "the session's own left branch kept its room"
    assert all(in_tier(cache, "nvme", first[2:]))


def test_a_block_refused_for_room_is_staged_once_the_sooner_session_is_back(
        stack: Callable[..., TieredCache]) -> None:
    """Room a session expected back sooner holds is refused to a later one, until that session
    arrives: then the later session's blocks are staged (before, they were dropped from its plan)."""
    cache = stack(dram_blocks=6)  # write-through: every block is in the file tier too
    a, _ = session(cache, "a", 6, start=0)
    b, _ = session(cache, "b", 6, start=100)  # DRAM holds b; a is in the file tier only
    cache.stager.lead_s = 120.0  # a, back in a minute, is due for staging now
    cache.stage("b", 5.0)
    cache.stage("a", 60.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", b)) and not any(in_tier(cache, "dram", a)), "b's room was protected"

    assert all(cache.get(b, [bytearray(BLOCK) for _ in b]))  # b is back: its plan ends
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a)), "a's refused blocks were not staged once b had arrived"
    assert all(in_tier(cache, "nvme", b)), "b's blocks it gave up are still in the file tier"


def test_a_block_the_top_tier_took_is_not_refused_for_a_lower_stage_tiers_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A staging copy goes to every stage tier above its source; a lower one without room is no
    reason to try the block again once the top tier has it. Before, each such block was put back
    in its plan's refused list, and a later pass found it in the top tier: a pass for nothing."""
    from lifeboatcache_core.staging import Stager

    refused: list[BlockKey] = []
    real = Stager._refused
    monkeypatch.setattr(Stager, "_refused", lambda self, key, plan: (refused.append(key), real(self, key, plan)))
    no_room = BLOCK / 2 / GB  # less than one block: every store declined
    cache = open_cache(tmp_path, dram_tier(64), file_tier(tmp_path / "nvme", capacity_gb=no_room, stage=True),
                       {**file_tier(tmp_path / "remote"), "name": "remote"})
    try:
        a, _ = session(cache, "a", 8, start=0)
        cache.all_tiers[0].discard(a)  # a is in the remote tier only
        assert not any(in_tier(cache, "dram", a) + in_tier(cache, "nvme", a))
        assert cache.stage("a", 0.0) == 8
        assert cache.stager.wait_idle(TIMEOUT)
        assert all(in_tier(cache, "dram", a)) and not any(in_tier(cache, "nvme", a))
        assert refused == [], "blocks the top tier holds were refused for the tier below"
    finally:
        cache.close()


def test_blocks_a_get_is_reading_are_no_staging_victims_until_it_is_done(
        stack: Callable[..., TieredCache]) -> None:
    """Between a get's lookup and its read, another session's staging must not evict what the get
    reads (it would read it from the tier below and promote it back: the CI run that found this
    left one of the staged session's blocks out, behind a promoted one)."""
    cache = stack(dram_blocks=6)  # write-through: every block is in the file tier too
    a, _ = session(cache, "a", 6, start=0)
    b, _ = session(cache, "b", 6, start=100)  # DRAM holds b; a is in the file tier only
    cache.stager.lead_s = 0.0
    cache.stage("a", 60.0)  # a plan, not due yet
    protected = cache.stager.observe_get(b)  # as submit_get_into does before its reads
    cache.stager.lead_s = 120.0  # now a is due: its stores would evict b
    cache.stager.wake()
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", b)) and not any(in_tier(cache, "dram", a)), "b's blocks were evicted mid-read"
    assert protected, "the caller was not told to release the keys"

    cache.stager.observe_read_done(b)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a)), "a was not staged once b's read was done"


def test_a_plan_from_the_policys_estimate_keeps_no_claim_on_refused_room(stack: Callable[..., TieredCache]) -> None:
    """Only a hinted plan keeps the blocks it was refused room for: an estimate is too often wrong
    (bench staging --estimate: retrying them staged 26 MB for 11 without, and evicted sessions that came back)."""
    cache = stack(dram_blocks=6)
    a, _ = session(cache, "a", 6, start=0)
    b, _ = session(cache, "b", 6, start=100)  # DRAM holds b; a is in the file tier only
    cache.stager.lead_s = 120.0
    later = cache.stager.clock() + 60.0
    policy = cache.all_tiers[1].policy
    policy.expected_return = lambda tag: later if tag == "a" else None  # type: ignore[attr-defined]
    cache.stage("b", 5.0)
    cache.stager.wake()
    assert cache.stager.wait_idle(TIMEOUT)
    assert cache.stager.sessions()["a"]["hinted"] is False and not any(in_tier(cache, "dram", a))

    assert all(cache.get(b, [bytearray(BLOCK) for _ in b]))  # b is back: its room is free
    assert cache.stager.wait_idle(TIMEOUT)
    assert not any(in_tier(cache, "dram", a)), "an estimated plan retried the blocks it was refused"
    assert all(in_tier(cache, "dram", b))


def test_a_plan_from_the_policys_estimate_takes_free_room_only(stack: Callable[..., TieredCache]) -> None:
    """A hint may displace the policy's victims (held below); a policy's estimate may not: it misses
    by about as much as staging leads a return (bench staging --estimate: displacing for it cost
    the top tier points of returning sessions' blocks against no staging)."""
    cache = stack(dram_blocks=6)  # write-through: every block is in the file tier too
    a, _ = session(cache, "a", 6, start=0)
    b, _ = session(cache, "b", 6, start=100)  # DRAM holds b; a is in the file tier only
    soon = cache.stager.clock() + 0.5
    policy = cache.all_tiers[1].policy
    policy.expected_return = lambda tag: soon if tag == "a" else None  # type: ignore[attr-defined]
    reads = cache.all_tiers[1].stats.hits
    cache.stager.wake()
    assert cache.stager.wait_idle(TIMEOUT)
    assert cache.stager.sessions()["a"]["hinted"] is False
    assert all(in_tier(cache, "dram", b)), "an estimated plan displaced blocks from the top tier"
    assert not any(in_tier(cache, "dram", a))
    assert counters(cache)["staged_bytes"] == 0
    assert cache.all_tiers[1].stats.hits == reads, "read blocks that no tier had room for"


def test_a_plan_from_the_policys_estimate_makes_no_tier_keep_its_blocks(stack: Callable[..., TieredCache]) -> None:
    """A hinted plan has the stage tier keep the blocks it holds already (``Tier.expect``) until the
    session is back; a plan from an estimate may not: keeping them displaces other blocks."""
    cache = stack()
    a, _ = session(cache, "a", 4, start=0)  # in DRAM already (and in the file tier)
    dram = cache.all_tiers[0]
    kept: list[BlockKey] = []
    expect = dram.expect
    dram.expect = lambda ks: (kept.extend(ks), expect(ks))[1]  # type: ignore[method-assign]
    soon = cache.stager.clock() + 0.5
    policy = cache.all_tiers[1].policy
    policy.expected_return = lambda tag: soon if tag == "a" else None  # type: ignore[attr-defined]
    cache.stager.wake()
    assert cache.stager.wait_idle(TIMEOUT)
    assert cache.stager.sessions()["a"]["hinted"] is False
    assert not kept, "an estimated plan had the tier keep its blocks"
    cache.stage("a", 0.5)
    assert cache.stager.wait_idle(TIMEOUT)
    assert sorted(kept) == sorted(a)


def test_a_staging_read_is_no_use_of_the_block_where_it_was_read(stack: Callable[..., TieredCache]) -> None:
    """The stager's copy up is not the engine's read: the source tier counts no hit and its policy
    no use (EpiCache learns a session's rhythm from uses: a staging read would be a visit that
    never happened, and move the session's next expected return)."""
    cache = stack()
    a, _ = session(cache, "a", 4, start=0)
    cache.all_tiers[0].discard(a)  # a is in the file tier only
    nvme = cache.all_tiers[1]
    used: list[BlockKey] = []
    touch = nvme.policy.touch
    nvme.policy.touch = lambda key: (used.append(key), touch(key))[1]  # type: ignore[method-assign]
    hits = nvme.stats.hits
    cache.stage("a", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a))
    assert nvme.stats.hits == hits and not used, "the stager's reads counted as the engine's"
    assert nvme.stats.bytes_read > 0
    assert all(cache.get(a, [bytearray(BLOCK) for _ in a]))  # the engine's read of the staged copies: DRAM
    assert nvme.stats.hits == hits


@pytest.fixture
def slow_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[set[BlockKey], threading.Event, threading.Event]]:
    """File-tier reads of the keys in ``slow`` block until ``go`` is set; ``entered`` says one is waiting."""
    slow: set[BlockKey] = set()
    entered, go = threading.Event(), threading.Event()
    read = FileBackend.read

    def blocked(self: FileBackend, key: BlockKey, dest: memoryview | None = None) -> Any:
        if key in slow:
            entered.set()
            go.wait(TIMEOUT)
        return read(self, key, dest)
    monkeypatch.setattr(FileBackend, "read", blocked)
    yield slow, entered, go
    go.set()


def test_engine_calls_never_wait_on_a_stager_stuck_on_a_slow_tier(
        stack: Callable[..., TieredCache], slow_reads: tuple[set[BlockKey], threading.Event, threading.Event]) -> None:
    slow, entered, go = slow_reads
    cache = stack(dram_blocks=64)
    a, _ = session(cache, "a", 8, start=0)
    hot, hot_data = session(cache, "hot", 4, start=100)  # in DRAM
    cold, cold_data = session(cache, "cold", 4, start=200)
    cache.all_tiers[0].discard(a + cold)
    slow.update(a)
    cache.stage("a", 0.0)
    assert entered.wait(TIMEOUT), "the stager is reading a's blocks from the stuck tier"

    results: dict[str, Any] = {}

    def engine() -> None:
        new = keys(3, start=300)
        job = cache.submit_put(new, blobs(3, BLOCK), hints=[BlockHint(tag="new", depth=i) for i in range(3)])
        results["put"] = cache.wait(job, TIMEOUT).ok
        hot_out = [bytearray(BLOCK) for _ in hot]
        results["get_hot"] = cache.wait(cache.submit_get_into(hot, hot_out), TIMEOUT).ok
        results["hot_bytes"] = [bytes(o) for o in hot_out]
        cold_out = [bytearray(BLOCK) for _ in cold]  # from the stuck tier, other keys: free threads left
        results["get_cold"] = cache.wait(cache.submit_get_into(cold, cold_out), TIMEOUT).ok
        results["cold_bytes"] = [bytes(o) for o in cold_out]
        results["presence"] = cache.presence(hot + a)
        results["exists"] = cache.exists(hot, blocking=False)

    worker = threading.Thread(target=engine)
    worker.start()
    worker.join(TIMEOUT)
    stuck = not go.is_set()
    go.set()
    assert not worker.is_alive(), "an engine-facing call waited on the stager"
    assert stuck
    assert results["put"] == [True] * 3
    assert results["get_hot"] == [True] * 4 and results["hot_bytes"] == hot_data
    assert results["get_cold"] == [True] * 4 and results["cold_bytes"] == cold_data
    assert results["presence"] == [True] * 12 and results["exists"] == [True] * 4
    assert cache.stager.wait_idle(TIMEOUT)


def test_a_get_never_has_the_stager_work_beside_its_read(
        stack: Callable[..., TieredCache], slow_reads: tuple[set[BlockKey], threading.Event, threading.Event]) -> None:
    """An arriving session ends its plan, but the stager is not woken until the get's read is done
    (and then only for blocks it was refused room for): a pass woken at the lookup ran beside
    nearly every read in bench staging (104 of 108 loads) and took the GIL from it, doubling the
    loads' time per block (44 against 23 us)."""
    slow, entered, go = slow_reads
    cache = stack(dram_blocks=64)
    a, data = session(cache, "a", 4, start=0)
    cache.all_tiers[0].discard(a)  # in the file tier only, whose reads of a block until told
    stager = cache.stager
    stager.lead_s, stager.poll_s = 0.0, 3600.0  # a's plan is not due; no timed pass
    cache.stage("a", 600.0)
    assert stager.wait_idle(TIMEOUT)
    passes = threading.Event()
    real_pass = stager._pass

    def counted() -> tuple[bool, float]:
        passes.set()
        return real_pass()
    stager._pass = counted  # type: ignore[method-assign]
    slow.update(a)
    out = [bytearray(BLOCK) for _ in a]
    job = cache.submit_get_into(a, out)  # a arrives: its plan ends
    assert entered.wait(TIMEOUT), "the get is reading"
    woken = passes.wait(0.5)
    go.set()
    assert cache.wait(job, TIMEOUT).ok == [True] * 4 and [bytes(o) for o in out] == data
    assert not woken, "the stager ran beside the get's read"
    assert "a" not in stager.sessions(), "the arrival ended a's plan"


def test_an_arrival_before_its_blocks_are_staged_is_late(
        stack: Callable[..., TieredCache], slow_reads: tuple[set[BlockKey], threading.Event, threading.Event]) -> None:
    slow, entered, go = slow_reads
    cache = stack()
    a, _ = session(cache, "a", 8, start=0)
    b, _ = session(cache, "b", 8, start=100)
    cache.all_tiers[0].discard(a + b)
    slow.update(a)
    cache.stage("a", 0.0)
    assert entered.wait(TIMEOUT)
    job = cache.submit_get_into(a, [bytearray(BLOCK) for _ in a])  # a arrives while staging is stuck
    go.set()
    assert all(cache.wait(job, TIMEOUT).ok)
    assert counters(cache)["staged_late_arrivals"] == 1

    cache.stage("b", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(cache.get(b, [bytearray(BLOCK) for _ in b]))
    assert counters(cache)["staged_late_arrivals"] == 1, "b arrived after its blocks were staged: on time"


def test_staged_blocks_nobody_used_are_taken_back_and_counted_as_waste(stack: Callable[..., TieredCache]) -> None:
    cache = stack()
    a, a_data = session(cache, "a", 8, start=0)
    b, _ = session(cache, "b", 4, start=100)
    cache.all_tiers[0].discard(a + b)
    cache.stage("a", 0.0)
    cache.stage("b", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert counters(cache)["staged_bytes"] == 12 * BLOCK

    # a is released: its staged copies go at once; b is not used by its deadline
    assert cache.release("a") == 8 * BLOCK
    assert cache.stager.wait_idle(TIMEOUT)
    assert not any(in_tier(cache, "dram", a))
    assert counters(cache)["staged_wasted_bytes"] == 8 * BLOCK

    real = cache.stager.clock
    cache.stager.clock = lambda: real() + 3600.0
    assert cache.stager.wait_idle(TIMEOUT)
    assert not any(in_tier(cache, "dram", b))
    assert counters(cache)["staged_wasted_bytes"] == 12 * BLOCK
    assert counters(cache)["staged_used_bytes"] == 0

    out = [bytearray(BLOCK) for _ in a]  # taken back from DRAM, never lost: the file tier holds them
    assert all(cache.get(a, out)) and [bytes(o) for o in out] == a_data


def test_the_policys_estimate_stages_a_session_without_a_hint(stack: Callable[..., TieredCache]) -> None:
    cache = stack()
    a, _ = session(cache, "a", 4, start=0)
    b, _ = session(cache, "b", 4, start=100)
    cache.all_tiers[0].discard(a + b)
    soon = cache.stager.clock() + 0.5
    policy = cache.all_tiers[1].policy
    policy.expected_return = lambda tag: soon if tag == "a" else None  # type: ignore[attr-defined]
    cache.stager.wake()
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a))
    assert not any(in_tier(cache, "dram", b))


def test_hints_validate_and_report_unknown_sessions(stack: Callable[..., TieredCache]) -> None:
    cache = stack()
    session(cache, "a", 2, start=0)
    assert cache.stage("nobody", 1.0) == 0
    assert cache.release("nobody") == 0
    with pytest.raises(ValueError):
        cache.stage("a", -1.0)


def test_staging_settings_come_from_the_config_and_change_live(
        stack: Callable[..., TieredCache], tmp_path: Path) -> None:
    cache = stack()
    config = cache.config.model_copy(update={"staging": StagingConfig(enabled=False, rate_mb_s=25, lead_s=3,
                                                                      grace_s=7, thread_share=0.25)})
    cache.apply_config(config)
    assert (cache.stager.rate_bytes_s, cache.stager.lead_s, cache.stager.grace_s,
            cache.stager.thread_share) == (25e6, 3.0, 7.0, 0.25)
    assert any(line.startswith("staging: enabled True -> False") for line in cache.last_reconfiguration.applied)

    a, _ = session(cache, "a", 4, start=0)
    cache.all_tiers[0].discard(a)
    assert cache.stage("a", 0.0) == 0, "switched off: the hint is ignored"
    assert cache.stager.wait_idle(TIMEOUT)
    assert not any(in_tier(cache, "dram", a))
    assert counters(cache)["staged_bytes"] == 0

    cache.apply_config(config.model_copy(update={"staging": StagingConfig()}))
    assert cache.stage("a", 0.0) == 4
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a)), "switched on again, live"


def test_a_tiers_stage_switch_changes_live(stack: Callable[..., TieredCache]) -> None:
    cache = stack(dram={"stage": False})
    a, _ = session(cache, "a", 4, start=0)
    cache.all_tiers[0].discard(a)
    tiers = [tc.model_copy(update={"stage": tc.label == "dram"}) for tc in cache.config.tiers]
    restart = cache.apply_config(cache.config.model_copy(update={"tiers": tiers}))
    assert restart == [] and "tier dram: stage False -> True" in cache.last_reconfiguration.applied
    cache.stage("a", 0.0)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a))


def test_from_policy_false_stages_on_hints_only(tmp_path: Path) -> None:
    cache = open_cache(tmp_path, dram_tier(64), file_tier(tmp_path / "nvme"), staging={"from_policy": False})
    try:
        a, _ = session(cache, "a", 4, start=0)
        b, _ = session(cache, "b", 4, start=100)
        cache.all_tiers[0].discard(a + b)
        soon = cache.stager.clock() + 0.5
        policy = cache.all_tiers[1].policy
        policy.expected_return = lambda tag: soon  # type: ignore[attr-defined]
        cache.stager.wake()
        assert cache.stager.wait_idle(TIMEOUT)
        assert not any(in_tier(cache, "dram", a + b)), "the policy's estimate was used"
        cache.stage("b", 0.0)
        assert cache.stager.wait_idle(TIMEOUT)
        assert all(in_tier(cache, "dram", b)) and not any(in_tier(cache, "dram", a))
    finally:
        cache.close()


def test_a_session_that_came_back_keeps_its_other_staged_copies_for_its_visit(
        stack: Callable[..., TieredCache]) -> None:
    """The take-back must not remove what a session that is back is about to ask for."""
    cache = stack()
    a, a_data = session(cache, "a", 8, start=0)
    cache.all_tiers[0].discard(a)
    real, offset = cache.stager.clock, [0.0]
    cache.stager.clock = lambda: real() + offset[0]
    assert cache.stage("a", 0.0) == 8  # deadline: now + grace_s (10 s)
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a))

    offset[0] = 9.0  # back just before the deadline: its turn's first request reads the head
    assert all(cache.get(a[:4], [bytearray(BLOCK) for _ in range(4)]))
    offset[0] = 15.0  # past the deadline, 6 s into the visit
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a[4:])), "taken back after the session came back"
    hits = cache.all_tiers[0].stats.hits
    out = [bytearray(BLOCK) for _ in range(2)]
    assert all(cache.get(a[4:6], out)) and [bytes(o) for o in out] == a_data[4:6]
    assert cache.all_tiers[0].stats.hits == hits + 2, "the turn's next request is served from DRAM"

    offset[0] = 30.0  # grace_s after its last request: what it never asked for is waste
    assert cache.stager.wait_idle(TIMEOUT)
    assert not any(in_tier(cache, "dram", a[6:])) and all(in_tier(cache, "dram", a[:6]))
    assert (counters(cache)["staged_used_bytes"], counters(cache)["staged_wasted_bytes"]) == (6 * BLOCK, 2 * BLOCK)


def staged_back(cache: TieredCache, n: int) -> tuple[list[BlockKey], list[bytes]]:
    """Session "a" of ``n`` blocks, gone from the top tier and staged back into it from the one below."""
    a, a_data = session(cache, "a", n, start=0)
    cache.all_tiers[0].discard(a)
    assert cache.stage("a", 0.0) == n
    assert cache.stager.wait_idle(TIMEOUT)
    return a, a_data


@contextlib.contextmanager
def write_pool_held(tier: Any) -> Iterator[None]:
    """The tier's one write-pool thread is busy (a store of the engine's, say) for the ``with`` body:
    jobs queued meanwhile (a take-back) run only after it."""
    gate, busy = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        gate.wait(TIMEOUT)
    held = tier.write_pool.submit(hold)
    assert busy.wait(TIMEOUT)
    try:
        yield
    finally:
        gate.set()
    held.result(TIMEOUT)


def test_a_copy_the_engine_reads_before_its_take_back_runs_is_kept_and_counted_used(
        stack: Callable[..., TieredCache]) -> None:
    """A take-back is queued on the tier's write pool; an engine read of the copy before it runs claims it."""
    cache = stack(dram={"io_threads": 1})
    a, a_data = staged_back(cache, 4)
    dram = cache.all_tiers[0]
    with write_pool_held(dram):
        assert cache.release("a") == 4 * BLOCK  # the take-back is queued behind it
        hits = dram.stats.hits
        out = [bytearray(BLOCK) for _ in a]
        assert all(cache.get(a, out)) and [bytes(o) for o in out] == a_data  # the session is back anyway
        assert dram.stats.hits == hits + 4
    assert cache.stager.wait_idle(TIMEOUT)
    assert all(in_tier(cache, "dram", a)), "the take-back removed copies the engine had just read"
    assert (counters(cache)["staged_used_bytes"], counters(cache)["staged_wasted_bytes"]) == (4 * BLOCK, 0)


def test_a_take_back_keeps_a_copy_whose_block_the_lower_tier_evicted_meanwhile(
        stack: Callable[..., TieredCache]) -> None:
    """Whether a lower tier still holds the block is asked when the take-back runs, not when it was queued."""
    cache = stack(dram={"io_threads": 1})
    a, a_data = staged_back(cache, 4)
    dram, nvme = cache.all_tiers
    with write_pool_held(dram):
        assert cache.release("a") == 4 * BLOCK
        nvme.discard(a[:2])  # the file tier evicts two of them before the take-back runs
    assert cache.stager.wait_idle(TIMEOUT)
    assert in_tier(cache, "dram", a) == [True, True, False, False], "the only copy left was taken back"
    out = [bytearray(BLOCK) for _ in a]
    assert all(cache.get(a, out)) and [bytes(o) for o in out] == a_data, "a hit became a miss"
    assert counters(cache)["staged_wasted_bytes"] == 4 * BLOCK


def test_a_copy_taken_back_while_the_engine_reads_it_leaves_no_ghost_in_the_index(
        stack: Callable[..., TieredCache]) -> None:
    """The take-back's discard lands between the engine's lookup of a copy and the end of its read.

    The read has the bytes and is a hit; the tier must not then put the key back into its index
    (its bytes are deleted), or the tier claims a block it does not hold: lookups say hit where a
    load misses, and the stager takes the ghost for a staged copy and never stages it again.
    """
    cache = stack()
    a, a_data = session(cache, "a", 2, start=0)
    cache.all_tiers[0].discard(a)
    assert cache.stage("a", 0.0) == 2
    assert cache.stager.wait_idle(TIMEOUT)
    dram = cache.all_tiers[0]
    in_discard, go_discard, discarded = threading.Event(), threading.Event(), threading.Event()
    in_read, go_read = threading.Event(), threading.Event()
    discard, read = dram.discard, dram.backend.read

    def slow_discard(keys: Any, **kw: Any) -> int:
        in_discard.set()
        go_discard.wait(TIMEOUT)
        try:
            return discard(keys, **kw)
        finally:
            discarded.set()

    def slow_read(key: BlockKey, dest: memoryview | None = None) -> Any:
        found = read(key, dest)  # the bytes are copied out before the discard deletes them
        in_read.set()
        go_read.wait(TIMEOUT)
        return found
    dram.discard, dram.backend.read = slow_discard, slow_read  # type: ignore[method-assign]
    try:
        cache.release("a")
        assert in_discard.wait(TIMEOUT), "the take-back job is about to discard"
        out = [bytearray(BLOCK)]
        job = cache.submit_get_into(a[:1], out)  # the session is back: its lookup finds the DRAM copy
        assert in_read.wait(TIMEOUT)
        go_discard.set()
        assert discarded.wait(TIMEOUT)
        go_read.set()
        assert cache.wait(job, TIMEOUT).ok == [True] and bytes(out[0]) == a_data[0]
    finally:
        go_discard.set()
        go_read.set()
    assert cache.stager.wait_idle(TIMEOUT)
    assert in_tier(cache, "dram", a) == [False, False], "the tier's index holds a block its backend deleted"
    assert dram.used == 0
    out = [bytearray(BLOCK) for _ in a]
    assert all(cache.get(a, out)) and [bytes(o) for o in out] == a_data


def test_the_stager_remembers_at_most_max_blocks_forgetting_the_least_recent_sessions(
        stack: Callable[..., TieredCache]) -> None:
    """The stager learns every stored block (before any tier stages, too); a long-running server
    must not grow with every block it ever stored. Past ``max_blocks`` the least recently active
    sessions are forgotten whole, and the session being stored to is kept even when it alone is
    larger."""
    cache = stack(dram={"stage": False})
    cache.stager.max_blocks = 6
    session(cache, "a", 3, start=0)
    session(cache, "b", 3, start=100)
    session(cache, "c", 3, start=200)  # 9 > 6: a, the least recently active, is forgotten
    assert [cache.stage(tag, 60.0) for tag in ("a", "b", "c")] == [0, 3, 3]
    session(cache, "d", 8, start=300)  # alone more than max_blocks: b and c go, d stays whole
    assert [cache.stage(tag, 60.0) for tag in ("b", "c", "d")] == [0, 0, 8]
