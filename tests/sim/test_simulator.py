"""The simulator: GPU prefix cache, a policy-run tier, Bélády, and the two commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from lifeboatcache.cli import app
from lifeboatcache.sim.belady import next_use, simulate_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.replay import ReplaySetup, simulate
from lifeboatcache.sim.sweep import make_policy, run_option_sets, run_sweep, unlimited_hit_frac
from lifeboatcache.sim.workload import Workload, load_workload


def workload(prompts: list[list[int]]) -> Workload:
    distinct = {b for p in prompts for b in p}
    return Workload(blocks=prompts, input_tokens=[64 * len(p) + 10 for p in prompts],
                    streams=[f"s{i}" for i in range(len(prompts))], times=[10.0 * i for i in range(len(prompts))],
                    block_tokens=64, working_set=len(distinct))


def test_hits_are_leading_runs_split_between_gpu_and_tier() -> None:
    # GPU holds 2 blocks; the tier (LRU, 3 blocks) holds what the GPU lost
    wl = workload([[1, 2, 3], [1, 2, 3, 4], [9, 8], [1, 2, 3, 4, 5]])
    gpu = gpu_prefix_hits(wl, 2)
    assert gpu == [0, 0, 0, 0]  # 2 blocks never hold a whole leading run here: LRU evicted 1
    result = simulate(wl, gpu, make_policy("lru"), capacity_blocks=3)
    # request 1 hits [1,2,3] in the tier; storing 4 evicts 1, so request 3 misses at its first block
    assert result.tokens_from_engine == 0
    assert result.tokens_total == sum(wl.input_tokens)
    assert result.tokens_from_tiers == 64 * 3  # only request 1 hits [1,2,3]


def test_request_ends_touch_the_held_blocks_tail_first_at_the_responses_end() -> None:
    """``request_ends``: what vLLM's tier does when a request finishes, each use at the end's time (applied, as
    a tier does, when the next new block is given room)."""
    from dataclasses import replace

    from lifeboatcache_core.builtin.lru import LRUPolicy

    class Recording(LRUPolicy):
        def __init__(self) -> None:
            super().__init__()
            self.clock = lambda: 0.0  # the replay sets it
            self.done: list[tuple[float, int]] = []

        def request_done(self, key):  # type: ignore[no-untyped-def]
            self.done.append((self.clock(), key))
            super().request_done(key)

    # request 0 [1,2,3] at 0 s ends at 15 s; request 1 [7] at 10 s ends at 12 s; request 2 at 20 s
    wl = replace(workload([[1, 2, 3], [7], [1, 2, 3, 4]]), ends=[15.0, 12.0, 29.0])
    policy = Recording()
    simulate(wl, [0, 0, 0], policy, capacity_blocks=3, setup=ReplaySetup(request_ends=True))
    # 7 evicted 1 (LRU): request 0's end touches the held 3, 2; request 2's end (29 s) never comes
    assert policy.done == [(12.0, 7), (15.0, 3), (15.0, 2)]
    policy = Recording()
    simulate(wl, [0, 0, 0], policy, capacity_blocks=3)
    assert policy.done == []


def test_gpu_cache_serves_a_returning_prefix() -> None:
    wl = workload([[1, 2, 3], [1, 2, 3, 4]])
    assert gpu_prefix_hits(wl, 8) == [0, 3]
    assert gpu_prefix_hits(wl, 0) == [0, 0]


def test_next_use_positions() -> None:
    nxt = next_use(np.array([5, 6, 5, 7, 6, 5]))
    never = 1 << 62
    assert nxt.tolist() == [2, 4, 5, never, never, never]


def test_belady_is_an_upper_bound_on_real_traces(traces_dir: Path) -> None:
    wl = load_workload(traces_dir, limit=6)
    gpu = gpu_prefix_hits(wl, 256)
    ceiling = unlimited_hit_frac(wl, gpu)
    for fraction in (0.02, 0.1):
        cap = wl.capacity_blocks(fraction)
        best = simulate_belady(wl, gpu, cap, fraction).hit_frac
        for name in ("lru", "arc", "score", "epicache"):
            rate = simulate(wl, gpu, make_policy(name), cap, fraction).hit_frac
            assert 0 < rate <= best + 1e-9 <= ceiling + 1e-9, (name, fraction, rate, best, ceiling)


def test_sweep_rows_and_curve_grow_with_capacity(traces_dir: Path) -> None:
    wl = load_workload(traces_dir, limit=4)
    rows = run_sweep(wl, ["lru", "belady"], [0.01, 0.05, 0.5], gpu_blocks=128)
    lru = [r.hit_frac for r in rows if r.policy == "lru"]
    assert lru == sorted(lru) and lru[0] < lru[-1]


def test_option_sets_each_run_with_its_own_options_beside_lru_and_belady(traces_dir: Path) -> None:
    wl = load_workload(traces_dir, limit=4)
    sets = [{"warm_order": "lru", "bypass": "off"}, {"warm_order": "farthest"}]
    rows = run_option_sets(wl, "epicache", sets, [0.05], gpu_blocks=128)
    assert [(r["policy"], r["options"]) for r in rows] == [("lru", None), ("belady", None),
                                                            ("epicache", sets[0]), ("epicache", sets[1])]
    assert rows[0]["gap_closed"] == 0.0 and rows[1]["gap_closed"] == 1.0
    gpu = gpu_prefix_hits(wl, 128)
    alone = simulate(wl, gpu, make_policy("epicache", 0, sets[1]), wl.capacity_blocks(0.05), 0.05)
    assert rows[3]["hit_frac"] == round(alone.hit_frac, 4)  # the options reached the policy
    assert rows[2]["hit_frac"] != rows[3]["hit_frac"]


def cli_json(*args: str) -> dict[str, Any]:
    """Run the command line with ``args`` (and ``--json``); its exit status 0 and its JSON report."""
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_bench_traces_json(traces_dir: Path) -> None:
    report = cli_json("bench", "traces", "--traces", str(traces_dir), "--limit", "3", "--capacity-frac", "0.05",
                      "--capacity-frac", "0.2", "--gpu-blocks", "64", "--folds", "1")
    rows = report["results"]
    assert {r["policy"] for r in rows} == {"lru", "arc", "score", "epicache", "belady"}
    assert {r["capacity_frac"] for r in rows} == {0.05, 0.2}
    for r in rows:
        total = r["tokens_from_engine"] + r["tokens_from_tiers"] + r["tokens_recomputed"]
        assert total == report["prompt_tokens"]
        assert abs(r["hit_frac"] - (total - r["tokens_recomputed"]) / total) < 1e-4


def test_bench_traces_request_ends_replays_vllms_touch_at_each_responses_end(traces_dir: Path) -> None:
    def lru(*flag: str) -> dict[str, Any]:
        return cli_json("bench", "traces", "--traces", str(traces_dir), "--limit", "3", "--capacity-frac", "0.05",
                        "--gpu-blocks", "64", "--folds", "1", "--policy", "lru", *flag)

    with_ends, without = lru("--request-ends"), lru()
    assert with_ends["request_ends"] is True and without["request_ends"] is False
    # the ends reorder LRU's recency, and the traces' response times reach the replay
    assert with_ends["results"][0]["hit_frac"] != without["results"][0]["hit_frac"]


def test_bench_traces_keep_prefixes_replays_the_tiers_guard(traces_dir: Path) -> None:
    def lru(*flag: str) -> dict[str, Any]:
        return cli_json("bench", "traces", "--traces", str(traces_dir), "--limit", "3", "--capacity-frac", "0.05",
                        "--gpu-blocks", "64", "--folds", "1", "--policy", "lru", "--policy", "belady", *flag)

    guarded, plain = lru("--keep-prefixes"), lru()
    assert guarded["keep_prefixes"] is True and plain["keep_prefixes"] is False
    hit = {name: next(r["hit_frac"] for r in report["results"] if r["policy"] == "lru")
           for name, report in (("guarded", guarded), ("plain", plain))}
    # the guard keeps sessions' heads that LRU would give up: more hits on these traces
    assert hit["guarded"] > hit["plain"]


def test_epicaches_request_done_option_matters_only_where_requests_end(traces_dir: Path) -> None:
    """Without ends (SGLang, LMCache, the default replay) both settings are the same policy."""
    wl = load_workload(traces_dir, limit=3)
    gpu = gpu_prefix_hits(wl, 64)

    def hit_frac(request_done: str, request_ends: bool) -> float:
        policy = make_policy("epicache", options={"request_done": request_done})
        return simulate(wl, gpu, policy, wl.capacity_blocks(0.05),
                        setup=ReplaySetup(request_ends=request_ends)).hit_frac

    assert hit_frac("idle", False) == hit_frac("visit", False)
    assert hit_frac("idle", True) != hit_frac("visit", True)


def test_bench_traces_unknown_policy_names_the_choices(traces_dir: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "traces", "--traces", str(traces_dir), "--limit", "1",
                                      "--policy", "lfu", "--folds", "1", "--json"])
    assert result.exit_code != 0
    assert "lfu" in str(result.exception) or "lfu" in result.output


def test_advise_json(traces_dir: Path) -> None:
    report = cli_json("advise", "--traces", str(traces_dir), "--limit", "3", "--policy", "lru", "--grid", "0.05",
                      "--grid", "0.2", "--grid", "1.0", "--gpu-blocks", "64", "--dram-gib", "1")
    rows = report["advice"]
    assert [r["target"] for r in rows] == [0.8, 0.9, 0.95]
    sizes = [r["capacity_blocks"] for r in rows]
    assert all(s is not None for s in sizes) and sizes == sorted(sizes)  # a higher goal needs more room
    for r in rows:
        assert abs(r["dram_gib"] + r["nvme_gib"] - r["gib"]) < 0.02 and r["dram_gib"] <= 1.0
    assert report["curves"]["lru"][-1][1] >= 0.95 * report["optimum_hit_frac"]


def test_advise_replays_the_tiers_keep_prefixes_guard_by_default(traces_dir: Path) -> None:
    """A tier config keeps prefixes unless told not to, so the advice sizes that tier."""
    def curve(*flag: str) -> dict[str, Any]:
        return cli_json("advise", "--traces", str(traces_dir), "--limit", "3", "--policy", "lru", "--grid", "0.05",
                        "--gpu-blocks", "64", *flag)

    default, unguarded = curve(), curve("--no-keep-prefixes")
    assert default["keep_prefixes"] is True and unguarded["keep_prefixes"] is False
    assert default["curves"]["lru"] != unguarded["curves"]["lru"]
