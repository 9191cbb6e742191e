"""K folds of whole conversations: the split, the per-fold replays and ``bench traces --folds``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lifeboatcache_core.plugins import get_registry
from typer.testing import CliRunner

from lifeboatcache.cli import app
from lifeboatcache.sim.folds import TUNABLES, fold_workloads, pooled_gap, split_folds, stream_folds
from lifeboatcache.sim.replay import SimResult
from lifeboatcache.traces import Conversation, TraceRequest, TraceStream, load_traces


def conversation(i: int, sub_agents: int, requests: int) -> Conversation:
    """A conversation whose main stream launched ``sub_agents`` sub-agents (streams of the same file)."""
    def reqs(n: int, base: int) -> tuple[TraceRequest, ...]:
        return tuple(TraceRequest(t=10.0 * r, input_tokens=64 * (r + 1), output_tokens=1,
                                  hash_ids=np.arange(base, base + r + 1, dtype=np.int64)) for r in range(n))

    cid = f"trace_{i:04d}"
    streams = [TraceStream(cid, None, 0.0, reqs(requests, 0))]
    streams += [TraceStream(f"{cid}/agent_{a:03d}", cid, 5.0 * a, reqs(2, 1000 * (a + 1))) for a in range(sub_agents)]
    return Conversation(cid, Path(f"{cid}.json.gz"), 64, "local", tuple(streams))


def check_split(conversations: list[Conversation], k: int, seed: int) -> None:
    folds = split_folds(conversations, k, seed)
    placed = sorted(i for fold in folds for i in fold)
    assert placed == list(range(len(conversations)))  # each conversation in exactly one fold
    assert all(folds)
    of_stream = stream_folds(conversations, folds)
    for f, fold in enumerate(folds):
        for i in fold:
            assert {of_stream[s.stream_id] for s in conversations[i].streams} == {f}  # sub-agents with their parent
    for fold, built in zip(folds, fold_workloads(conversations, k, seed=seed, gpu_blocks=64), strict=True):
        roots = {s.split("/")[0] for s in built.workload.streams}
        assert roots == {conversations[i].id for i in fold}  # a fold's replay holds its conversations only


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_the_fold_split_never_puts_one_conversation_in_two_folds(seed: int) -> None:
    conversations = [conversation(i, sub_agents=i % 4, requests=1 + (7 * i) % 9) for i in range(23)]
    for k in (2, 3, 5):
        check_split(conversations, k, seed)
    assert split_folds(conversations, 5, seed) == split_folds(conversations, 5, seed)  # seeded, repeatable


def test_the_fold_split_of_real_traces_keeps_conversations_whole_and_balanced(traces_dir: Path) -> None:
    conversations = load_traces(traces_dir, limit=20)
    check_split(conversations, 5, 0)
    loads = [sum(conversations[i].input_tokens for i in fold) for fold in split_folds(conversations, 5, 0)]
    assert max(loads) < 2.5 * min(loads)


def test_too_few_conversations_for_the_folds_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot fill"):
        split_folds([conversation(0, 0, 2)], 2)
    with pytest.raises(ValueError, match="at least 2"):
        split_folds([conversation(0, 0, 2), conversation(1, 0, 2)], 1)


def test_pooled_gap_sums_tokens_over_folds_before_dividing() -> None:
    def run(hit: int, total: int = 100) -> SimResult:
        return SimResult("p", 0.05, 10, 0, hit, total - hit, 0.0)

    # fold A: policy closes all of a small gap; fold B: none of a large one -> pooled 2 / 12
    rows = [(run(12), run(10), run(12)), (run(20), run(20), run(30))]
    assert pooled_gap(rows) == pytest.approx(2 / 12)


def test_bench_traces_folds_json(traces_dir: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "traces", "--traces", str(traces_dir), "--limit", "4", "--folds", "2",
                                      "--capacity-frac", "0.05", "--gpu-blocks", "64", "--policy", "lru",
                                      "--policy", "epicache", "--policy", "belady", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["folds"] == 2 and len(report["per_fold"]) == 2
    ids = [c for fold in report["per_fold"] for c in fold["conversations"]]
    assert len(ids) == len(set(ids)) == 4
    pick = report["selection"]["epicache"]
    assert len(pick["chosen_per_held_fold"]) == 2 and set(pick["chosen_per_held_fold"]) <= set(pick["candidates"])
    held = report["held_out"]["0.05"]
    assert len(held["epicache"]["per_fold_gap_closed"]) == 2
    assert held["lru"]["pooled_hit_frac"] <= held["belady"]["pooled_hit_frac"]
    assert isinstance(pick["installed_default_is_chosen"], bool)


def test_each_tunable_policys_first_candidate_is_its_installed_default() -> None:
    """The folds keep the first candidate on a tie and report whether the installed default is the
    pick: both mean something only while the first candidate is what a user gets with no options."""
    for name, candidates in TUNABLES.items():
        model = get_registry().load("policy", name).config_model
        assert model(**candidates[0]) == model(), (name, candidates[0], model().model_dump())
