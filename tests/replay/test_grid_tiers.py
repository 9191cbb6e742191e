"""The grid's tier features on the fake server: config-file columns, a bounded disk, restarts,
``from cache`` split by source, and a failed cell's root cause and exit status."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from lifeboatcache.grid import disk
from lifeboatcache.grid.configs import EngineSettings, parse_config, parse_configs, server_spec
from lifeboatcache.grid.driver import CellResult, GridPlan, run_grid
from lifeboatcache.grid.server import root_cause
from lifeboatcache.grid.tables import markdown_table
from lifeboatcache.replay.client import parse_prometheus_counters
from lifeboatcache.replay.report import cache_sources
from lifeboatcache.replay.runner import SERVER_COUNTER_SPLITS, SERVER_COUNTERS, ReplayResult
from lifeboatcache.replay.sessions import Session, Spawn, TokenMap, Turn
from lifeboatcache.replay.synthetic import SyntheticSpec, generate_sessions
from tests.process_groups import group_members, wait_group_gone

from .conftest import FAKE_SERVER

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="--disk-gb mounts a tmpfs: needs root (CI runs as root)")
BLOCK_SIZE_CAUSE = "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."


def _settings(tmp_path: Path, *extra: str) -> EngineSettings:
    log = tmp_path / "requests.jsonl"
    return EngineSettings(model="fake", served_name="fake-model",
                          program=(sys.executable, str(FAKE_SERVER), "--log", str(log), *extra))


def _sessions(count: int = 2, turns: int = 3) -> list[Session]:
    return generate_sessions(SyntheticSpec(sessions=count, turns=turns, shared_prefix_tokens=128,
                                           first_user_tokens=64, growth_tokens=64))


def _plan(tmp_path: Path, configs: list, settings: EngineSettings, **kwargs: object) -> GridPlan:
    from lifeboatcache.replay.runner import ReplayOptions

    return GridPlan(configs, [0.1], [2], settings, ReplayOptions(max_tokens=2, token_map=TokenMap(tokens_per_block=2)),
                    tmp_path / "out", start_timeout_s=60, **kwargs)


def _by_config(results: list[CellResult]) -> dict[str, CellResult]:
    return {r.config: r for r in results}


# -- lifeboatcache:PATH.toml columns -------------------------------------------------------------------------------


def test_a_config_file_is_a_column_with_its_stack_in_the_cell_directory(tmp_path: Path) -> None:
    config = tmp_path / "lossless.toml"
    config.write_text('[[tiers]]\nname = "ram"\nbackend = "dram"\ncapacity_gb = 1\n\n[[tiers]]\nname = "nvme"\n'
                      'backend = "file"\npath = "nvme"\ncapacity_gb = 2\ncodec = "lossless"\n')
    column = parse_config(f"lifeboatcache:{config}")
    assert (column.label, column.kind) == ("lifeboatcache:lossless", "lifeboatcache")
    results = run_grid(_plan(tmp_path, ["vllm", column], _settings(tmp_path)), {2: _sessions()}, Console(quiet=True))
    cell = _by_config(results)["lifeboatcache:lossless"]
    assert cell.error is None and cell.summary["requests"] == 6
    assert Path(cell.tier_dir).parent.name == "lifeboatcache-lossless_dram0.1_agents2"
    args = json.loads(Path(str(tmp_path / "requests.jsonl") + ".args").read_text())
    ours = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]["lifeboatcache"]
    assert [(t["name"], t["codec"], t.get("path")) for t in ours["tiers"]] == [
        ("ram", "none", None), ("nvme", "lossless", str(Path(cell.tier_dir) / "nvme"))]
    assert ours["engine"]["vllm"]["native_cpu_gb"] == 0.1 and ours["fallback_local"]["path"].startswith(cell.tier_dir)
    assert ours["dashboard"]["enabled"] and cell.extra["tier"]["lifeboat"]["tiers"]["nvme"]["puts"] == 6
    assert "| lifeboatcache:lossless | 0.1 | 2 |" in markdown_table(results)


def test_config_files_are_checked_before_any_cell_runs(tmp_path: Path) -> None:
    shipped = parse_config(f"lifeboatcache:{REPO / 'bench' / 'configs' / 'lossless.toml'}")
    assert shipped.label == "lifeboatcache:lossless"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "x"\ncodek = "lossless"\n')
    with pytest.raises(ValueError, match="codek"):
        parse_config(f"lifeboatcache:{bad}")
    with pytest.raises(ValueError, match="two columns named lifeboatcache:lossless"):
        parse_configs(f"lifeboatcache:{shipped.source},lifeboatcache:{shipped.source}")
    escape = tmp_path / "escape.toml"
    escape.write_text('[[tiers]]\nbackend = "file"\ncapacity_gb = 1\npath = "../../elsewhere"\n')
    with pytest.raises(ValueError, match="leaves the cell's tier directory"):
        server_spec(parse_config(f"lifeboatcache:{escape}"), EngineSettings(model="m"), 0.1, tmp_path / "tiers")


# -- --disk-gb --------------------------------------------------------------------------------------------------------


@needs_root
def test_each_cell_gets_its_own_small_disk_that_fills_up_and_is_unmounted(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "--kv-bytes-per-token", "32768")  # ~2.5 MiB of prompts on a 1 MiB disk
    plan = _plan(tmp_path, ["vllm-fs", "lifeboatcache"], settings, disk_gb=1 / 1024)
    results = _by_config(run_grid(plan, {2: _sessions(2, 4)}, Console(quiet=True)))
    for cell in results.values():
        assert cell.error is None, cell.error
        assert not os.path.ismount(cell.tier_dir) and Path(cell.tier_dir).is_dir()
        assert cell.extra["disk"]["total_bytes"] == 2**20 and cell.extra["disk"]["used_bytes"] > 2**19
        assert cell.extra["tier"]["kept_serving"] and cell.extra["tier"]["store_errors"] > 0
    assert results["vllm-fs"].extra["tier"]["evictions"] == 0  # vLLM's fs tier never evicts
    assert results["lifeboatcache"].extra["tier"]["stores_refused"] == results["lifeboatcache"].extra["tier"][
        "store_errors"]
    table = markdown_table(list(results.values()))
    assert "| vllm-fs | 0.1 | 2 | 0.000976562 | " in table and table.count("| yes |") == 2


@needs_root
def test_the_disk_is_unmounted_when_the_cell_fails(tmp_path: Path) -> None:
    plan = _plan(tmp_path, ["vllm-fs"], _settings(tmp_path, "--fail-start", BLOCK_SIZE_CAUSE), disk_gb=1 / 1024)
    (cell,) = run_grid(plan, {2: _sessions()}, Console(quiet=True))
    assert cell.error and not os.path.ismount(cell.tier_dir)
    assert cell.extra["disk"]["total_bytes"] == 2**20


@needs_root
def test_a_mount_left_by_a_killed_grid_is_released_before_the_cell_reruns(tmp_path: Path) -> None:
    plan = _plan(tmp_path, ["vllm-fs"], _settings(tmp_path), disk_gb=1 / 1024)
    stale = tmp_path / "out" / "cells" / "vllm-fs_dram0.1_agents2" / "tiers"
    disk.mount_tmpfs(stale, 1 / 1024)
    (cell,) = run_grid(plan, {2: _sessions()}, Console(quiet=True))
    assert cell.error is None and not stale.is_mount()


@needs_root
def test_ctrl_c_inside_a_cell_still_unmounts(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        with disk.cell_disk(tmp_path / "tiers", 1 / 1024) as tiers:
            assert os.path.ismount(tiers) and disk.disk_usage(tiers)["total_bytes"] == 2**20
            raise KeyboardInterrupt
    assert not os.path.ismount(tmp_path / "tiers")


def test_a_mount_that_is_not_permitted_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    def refuse(command: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 32, "", "mount: only root can use \"--types\" option")

    monkeypatch.setattr(disk, "_run", refuse)
    with pytest.raises(disk.DiskError, match=r"cannot mount a 0.5 GiB tmpfs on .*only root"):
        with disk.cell_disk(tmp_path / "tiers", 0.5):
            pass


# -- --restart-after-round ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signal_name", ["TERM", "KILL"])
def test_a_restart_continues_the_same_sessions_on_a_fresh_server(tmp_path: Path, signal_name: str) -> None:
    plan = _plan(tmp_path, ["vllm", "vllm-fs"], _settings(tmp_path), restart_after_round=2,
                 restart_signal=signal_name)
    results = _by_config(run_grid(plan, {2: _sessions(2, 3)}, Console(quiet=True)))
    for cell in results.values():
        assert cell.error is None and cell.summary["requests"] == 6
        assert sorted(int(k) for k in cell.summary["ttft_mean_s_per_round"]) == [0, 1, 2]
        first, second = (Path(p).read_text() for p in cell.extra["server_logs"])
        assert ("graceful shutdown" in first) == (signal_name == "TERM") and "graceful shutdown" in second
        after = cell.extra["after_restart"]
        assert (after["round"], after["signal"], after["requests"], after["failed"]) == (2, signal_name, 2, 0)
        # every request of each server, beside its log: which one of a round was slow, and why
        per_server = [[json.loads(line) for line in Path(p).with_name(Path(p).stem + "-requests.jsonl").open()]
                      for p in cell.extra["server_logs"]]
        assert [sorted(r["turn"] for r in records) for records in per_server] == [[0, 0, 1, 1], [2, 2]]
        assert all(r["ttft_s"] > 0 and r["prompt_tokens"] > 0 for records in per_server for r in records)
    # the fresh vLLM server remembers nothing; vLLM's fs tier serves the returning sessions from disk
    fs, plain = results["vllm-fs"].extra["after_restart"], results["vllm"].extra["after_restart"]
    assert fs["cache_served_share"] > plain["cache_served_share"]
    assert fs["fresh_server_cached_tokens_by_source"]["below"] > 0 == plain["fresh_server_cached_tokens_by_source"][
        "below"]
    assert results["vllm-fs"].summary["last_third_rounds"] == [2]
    assert results["vllm-fs"].summary["cache_served_share_last_third"] > 0.5
    assert "after round 2 (" + signal_name + ")" in markdown_table(list(results.values()))


def test_a_session_splits_at_a_round_and_keeps_its_turn_numbers() -> None:
    child = Session("child", (Turn(max_tokens=1),))
    session = Session("s", (Turn(max_tokens=1), Spawn((child,)), Turn(max_tokens=2), Turn(max_tokens=3),
                            Spawn((child,))))
    head, tail = session.split_at_round(1)
    assert [type(s).__name__ for s in head.steps] == ["Turn"]
    assert [type(s).__name__ for s in tail.steps] == ["Spawn", "Turn", "Turn", "Spawn"] and tail.first_turn == 1
    head, tail = session.split_at_round(3)
    assert len(head.steps) == 5 and not tail.steps  # a trailing spawn stays with the last turn


# -- from cache, split by source -------------------------------------------------------------------------------------

VLLM_METRICS = """\
# HELP vllm:prompt_tokens_cached_by_source_total Prefix-cache hit tokens by the cache tier that supplied them
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 120.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 64.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="disk"} 32.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="p2p"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="external_unspecified"} 8.0
vllm:prompt_tokens_cached_by_source_created{engine="0",model_name="m",source="device"} 1.7e9
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 120.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="m"} 104.0
"""


def test_cached_tokens_are_split_by_the_tier_that_served_them() -> None:
    after = parse_prometheus_counters(VLLM_METRICS, SERVER_COUNTERS, SERVER_COUNTER_SPLITS)
    assert after['vllm:prompt_tokens_cached_by_source{source="disk"}'] == 32.0
    assert after["vllm:prompt_tokens_cached_by_source"] == 224.0  # the _created sample is not a count
    result = ReplayResult([], 1.0, {}, after)
    assert cache_sources(result) == {"device": 120.0, "cpu": 64.0, "below": 32.0, "unattributed": 8.0}
    older = parse_prometheus_counters("\n".join(VLLM_METRICS.splitlines()[-2:]), SERVER_COUNTERS)
    assert cache_sources(ReplayResult([], 1.0, {}, older)) == {"device": 120.0, "cpu": 0.0, "below": 104.0,
                                                                "unattributed": 0.0, "fallback": 1.0}


# -- failed cells: root cause and exit status --------------------------------------------------------------------------

VLLM_FAILURE_LOG = """\
(APIServer pid=5788) WARNING 12-01 08:41:28 [system_utils.py:255] Found ulimit of 20000 ... `OSError: [Errno 24]`
(Worker pid=5944) ERROR 12-01 08:42:04 [multiproc_executor.py:1063]     raise ValueError(
(Worker pid=5944) ERROR 12-01 08:42:04 [multiproc_executor.py:1063] ValueError: No common block size for 16 \
(CPU_ATTN: [MultipleOf(32)]).
(EngineCore pid=5871) ERROR 12-01 08:42:04 [core.py:1510] RuntimeError: Worker failed with error 'No common \
block size for 16 (CPU_ATTN: [MultipleOf(32)]).', please check the stack trace above for the root cause
    raise RuntimeError(
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}
/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: leaked
"""


def test_the_root_cause_is_the_engines_own_exception_not_the_wrapper() -> None:
    assert root_cause(VLLM_FAILURE_LOG) == BLOCK_SIZE_CAUSE
    assert root_cause("RuntimeError: Engine core initialization failed. See root cause above.") == (
        "RuntimeError: Engine core initialization failed. See root cause above.")
    assert root_cause("INFO started\nall good\n") is None


def test_the_grid_exits_non_zero_and_names_the_root_cause(tmp_path: Path) -> None:
    from lifeboatcache.cli import app

    program = shlex.join([sys.executable, str(FAKE_SERVER), "--log", str(tmp_path / "r.jsonl"),
                          "--fail-start", BLOCK_SIZE_CAUSE])
    result = CliRunner().invoke(app, ["grid", "--model", "fake", "--synthetic", "--configs", "vllm", "--agents", "1",
                                      "--rounds", "1", "--max-tokens", "2", "--out", str(tmp_path / "out"),
                                      "--server-program", program], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    assert "No common block size for 16" in result.output.replace("\n", " ")
    cell = json.loads((tmp_path / "out" / "grid.json").read_text())["cells"][0]
    assert cell["root_cause"] == BLOCK_SIZE_CAUSE and "exited with status 1 while starting" in cell["error"]
    assert f"failed: {BLOCK_SIZE_CAUSE}" in (tmp_path / "out" / "grid.md").read_text()


def _process_with(text: str, besides: int) -> int | None:
    """The PID of a live process other than ``besides`` whose command line contains ``text``, else None."""
    for entry in Path("/proc").iterdir():
        try:
            pid = int(entry.name) if entry.name.isdigit() else besides
            if pid != besides and text.encode() in (entry / "cmdline").read_bytes():
                return pid
        except OSError:
            continue
    return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_grid_that_is_killed_stops_its_server_and_removes_its_temp_folder(tmp_path: Path,
                                                                             sig: signal.Signals) -> None:
    """``kill`` or a closed terminal unwinds the grid as Ctrl-C does; by default Python died at once and
    left the server (a process group of its own) serving, and its temporary folder on disk."""
    log = tmp_path / "r.jsonl"  # unique to this test: finds the fake server among the box's processes
    program = shlex.join([sys.executable, str(FAKE_SERVER), "--log", str(log), "--token-delay", "5"])
    grid = subprocess.Popen([sys.executable, "-m", "lifeboatcache", "grid", "--model", "fake", "--synthetic",
                             "--configs", "vllm", "--agents", "1", "--rounds", "2", "--max-tokens", "4",
                             "--out", str(tmp_path / "out"), "--server-program", program],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    server = None
    try:
        deadline = time.monotonic() + 60
        while server is None or not (tmp_path / "out").exists():  # the server runs, the replay began
            assert time.monotonic() < deadline and grid.poll() is None, grid.stdout.read().decode()
            time.sleep(0.2)
            server = _process_with(str(log), besides=grid.pid)  # the grid's own names it too
        environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{server}/environ").read_bytes().split(b"\0")
                       if b"=" in item)
        temp = Path(environ[b"TMPDIR"].decode())
        assert temp.is_dir()
        time.sleep(2)  # a request in flight (each takes 20 s)
        grid.send_signal(sig)
        assert grid.wait(timeout=60) == 128 + sig, grid.stdout.read().decode()
        assert wait_group_gone(server, timeout=30)
        assert not temp.exists()
    finally:
        grid.kill()
        if server is not None and group_members(server):
            os.killpg(server, signal.SIGKILL)


# -- --repeat: interleaved runs and medians --------------------------------------------------------------------------


def test_repeated_runs_interleave_the_columns_and_report_medians_against_vllm_fs(tmp_path: Path) -> None:
    plan = _plan(tmp_path, ["vllm-fs", "lifeboatcache"], _settings(tmp_path), repeat=3)
    results = run_grid(plan, {2: _sessions()}, Console(quiet=True))
    assert [(r.config, r.run) for r in results] == [  # A B, B A, A B: drift spreads over both columns
        ("vllm-fs", 1), ("lifeboatcache", 1), ("lifeboatcache", 2), ("vllm-fs", 2), ("vllm-fs", 3),
        ("lifeboatcache", 3)]
    assert len({r.tier_dir for r in results}) == 6 and not any(r.failed for r in results)
    from lifeboatcache.grid.tables import median_summary

    medians = {row["config"]: row for row in median_summary(results)}
    ours = [r.summary["ttft_mean_s"] for r in results if r.config == "lifeboatcache"]
    fs = [r.summary["ttft_mean_s"] for r in results if r.config == "vllm-fs"]
    assert medians["lifeboatcache"]["runs"] == 3 and medians["lifeboatcache"]["ttft_mean_s"] == sorted(ours)[1]
    assert medians["lifeboatcache"]["ttft_vs_vllm_fs"] == pytest.approx(sorted(fs)[1] / sorted(ours)[1])
    assert medians["vllm-fs"]["ttft_vs_vllm_fs"] == pytest.approx(1.0)
    table = markdown_table(results)
    assert table.startswith("| config | DRAM GiB | agents | runs |") and "| lifeboatcache #3 |" in table
    saved = json.loads((tmp_path / "out" / "grid.json").read_text())
    assert saved["repeat"] == 3 and [c["run"] for c in saved["cells"]] == [1, 1, 2, 2, 3, 3]


# -- --sessions-per-agent: sessions end and new ones start while the tiers fill -------------------------------------


def test_agents_run_their_sessions_one_after_another(tmp_path: Path) -> None:
    from lifeboatcache.cli import app

    log = tmp_path / "r.jsonl"
    program = shlex.join([sys.executable, str(FAKE_SERVER), "--log", str(log)])
    args = ["grid", "--model", "fake", "--synthetic", "--configs", "vllm", "--agents", "2", "--rounds", "2",
            "--max-tokens", "2", "--out", str(tmp_path / "out"), "--server-program", program]
    result = CliRunner().invoke(app, [*args, "--sessions-per-agent", "3"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "out" / "grid.json").read_text())
    assert saved["sessions_per_agent"] == 3
    assert saved["cells"][0]["summary"]["requests"] == 2 * 3 * 2  # agents x sessions each x rounds
    refused = CliRunner().invoke(app, [*args, "--sessions-per-agent", "2", "--restart-after-round", "1"],
                                 env={"COLUMNS": "400"})
    assert refused.exit_code == 2 and "one session per agent" in refused.output


def test_sessions_per_agent_loads_that_many_sessions_per_agent_count() -> None:
    from lifeboatcache.grid.setup import sessions_per_agent_count
    from lifeboatcache.replay.sources import SourceChoice

    choice = SourceChoice("synthetic", None, 1, 2)
    got, _ = sessions_per_agent_count(choice, [1, 2], TokenMap(), 100_000, 8, per_agent=3)
    assert [len(got[1]), len(got[2])] == [3, 6]
    assert len({s.session_id for s in got[2]}) == 6 and got[1] == got[2][:3]
    with pytest.raises(ValueError, match="must be >= 1"):
        sessions_per_agent_count(choice, [1], TokenMap(), 100_000, 8, per_agent=0)
