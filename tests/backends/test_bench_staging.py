"""`lifeboatcache bench staging`: the schedule it builds from the traces, and one short real run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lifeboatcache.bench.staging import Turn, build_turns, session_chunks, think_times
from lifeboatcache.bench.traces import DEFAULT_TRACES
from lifeboatcache.cli import app

needs_traces = pytest.mark.skipif(not DEFAULT_TRACES.is_dir(), reason="the kv-cache-tester traces are not here")


@needs_traces
def test_turns_follow_the_traces_scaled_to_the_duration() -> None:
    turns = build_turns(DEFAULT_TRACES, limit=3, requests=30, chunk_blocks=32, duration_s=20.0, max_gap_s=300.0,
                        seed=0)
    assert len(turns) == 30
    assert turns[0].at == 0.0 and turns[-1].at == pytest.approx(20.0)
    assert [t.at for t in turns] == sorted(t.at for t in turns)
    for i, turn in enumerate(turns):  # next_at is the same session's next turn, None after its last
        later = [t.at for t in turns[i + 1:] if t.session == turn.session]
        assert turn.next_at == (later[0] if later else None)
    # a session's turns extend its earlier prompt: the chunks are prefix-chained ids
    by_session: dict[str, list[Turn]] = {}
    for turn in turns:
        by_session.setdefault(turn.session, []).append(turn)
    assert any(len(ts) > 1 and ts[1].chunks[:len(ts[0].chunks)] == ts[0].chunks for ts in by_session.values())
    assert session_chunks(turns) > 1 and all(gap >= 0 for gap in think_times(turns))


@needs_traces
@pytest.mark.usefixtures("aws_env")
def test_a_short_run_reports_staging_off_and_on(tmp_path: Path) -> None:
    out = tmp_path / "staging.json"
    result = CliRunner().invoke(app, ["bench", "staging", "--limit", "3", "--requests", "24", "--duration-s", "6",
                                      "--block-kib", "4", "--latency-ms", "2", "--dram-sessions", "0.5",
                                      "--file-sessions", "1", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    off, on = report["off"], report["on"]
    assert off["staging"] is False and on["staging"] is True
    assert off["staged_bytes"] == 0 and off["late_arrivals"] == 0
    assert on["staged_bytes"] > 0, "the hints staged something"
    assert 0 <= on["staged_used_bytes"] <= on["staged_bytes"]
    assert on["staged_never_used_bytes"] == on["staged_bytes"] - on["staged_used_bytes"]
    for run in (off, on):
        assert run["turns"] == 24 and run["loads"] > 0
        assert 0.0 <= run["top_share"] <= 1.0
        assert run["load_p50_s"] <= run["load_p99_s"]
        if run["dram_loads"]:  # both ratios of the p99 to an all-DRAM load, the and like for like
            assert run["load_p99_vs_dram_p99"] == round(run["load_p99_s"] / run["dram_load_p99_s"], 2)
        assert run["tiers"]["s3"]["blocks"] > 0, "every chunk went down to S3 (write-through)"


@needs_traces
@pytest.mark.usefixtures("aws_env")
def test_the_estimate_mode_stages_from_epicache_without_hints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lifeboatcache_core.cache import TieredCache

    hinted: list[str] = []
    monkeypatch.setattr(TieredCache, "stage", lambda self, session, eta_s: hinted.append(session) or 0)
    monkeypatch.setattr(TieredCache, "release", lambda self, session: hinted.append(session) or 0)
    out = tmp_path / "estimate.json"
    result = CliRunner().invoke(app, ["bench", "staging", "--estimate", "--limit", "3", "--requests", "24",
                                      "--duration-s", "6", "--block-kib", "4", "--latency-ms", "2",
                                      "--dram-sessions", "0.5", "--file-sessions", "1", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["mode"] == "estimate (epicache, no hints)" and report["on"]["hints"] is False
    assert hinted == [], "no hint was sent"
    assert report["off"]["staged_bytes"] == 0
    for run in (report["off"], report["on"]):  # both runs evict by the same policy: only staging differs
        assert {tier["policy"] for tier in run["tiers"].values()} == {"epicache"}
    # whether EpiCache's first estimates (a 1 s gap until it learns one) stage anything in a 6 s run
    # depends on timing; that a tier with EpiCache stages from its estimate is
    # tests/policies/test_epicache_staging.py's
