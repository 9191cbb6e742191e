"""The grid: server command lines per configuration, and the driver on a fake server process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from lifeboatcache.grid.configs import EngineSettings, server_spec
from lifeboatcache.grid.driver import GridPlan, run_grid
from lifeboatcache.grid.plots import write_plots
from lifeboatcache.grid.tables import markdown_table
from lifeboatcache.replay.runner import ReplayOptions
from lifeboatcache.replay.sessions import TokenMap
from lifeboatcache.replay.synthetic import SyntheticSpec, generate_sessions

from .conftest import FAKE_SERVER


def _transfer(args: tuple[str, ...] | list[str]) -> dict | None:
    args = list(args)
    return json.loads(args[args.index("--kv-transfer-config") + 1]) if "--kv-transfer-config" in args else None


def test_configurations_differ_only_in_the_tier_below(tmp_path: Path) -> None:
    cpu = EngineSettings(model="m", device="cpu", device_kv_blocks=20, block_size=128)
    specs = {c: server_spec(c, cpu, 0.5, tmp_path / c) for c in ("vllm", "vllm-native-cpu", "vllm-fs", "lifeboatcache")}
    assert _transfer(specs["vllm"].args) is None
    for spec in specs.values():
        assert spec.env["PYTHONHASHSEED"] == "0" and spec.env["LIFEBOAT_CACHE"] == "0"
        assert "--num-gpu-blocks-override" in spec.args and "--enable-prompt-tokens-details" in spec.args
    native, fs, ours = (_transfer(specs[c].args)["kv_connector_extra_config"]
                        for c in ("vllm-native-cpu", "vllm-fs", "lifeboatcache"))
    assert native["spec_name"] == fs["spec_name"] == ours["spec_name"] == "LifeboatOffloadingSpec"  # CPU worker
    assert "secondary_tiers" not in native
    assert fs["secondary_tiers"] == [{"type": "fs", "root_dir": str(tmp_path / "vllm-fs" / "vllm-fs")}]
    assert [t["type"] for t in ours["secondary_tiers"]] == ["LifeboatTier"]
    assert ours["lifeboatcache"]["tiers"][0]["path"] == str(tmp_path / "lifeboatcache" / "lifeboat")
    assert native["cpu_bytes_to_use"] == fs["cpu_bytes_to_use"] == ours["cpu_bytes_to_use"] == 2**29

    cuda = EngineSettings(model="m", device="cuda")
    native_cuda = _transfer(server_spec("vllm-native-cpu", cuda, 1, tmp_path).args)["kv_connector_extra_config"]
    assert native_cuda["spec_name"] == "CPUOffloadingSpec" and "spec_module_path" not in native_cuda
    fs_cuda = _transfer(server_spec("vllm-fs", cuda, 1, tmp_path).args)["kv_connector_extra_config"]
    assert fs_cuda["spec_name"] == "TieringOffloadingSpec"
    assert "block_size" not in native_cuda and "block_size" not in fs_cuda  # one engine block, vLLM's default
    assert ours["lifeboatcache"]["engine"]["vllm"]["native_block_tokens"] == "auto"  # one engine block too
    assert "--enforce-eager" not in server_spec("vllm", cuda, 1, tmp_path).args


def test_every_column_moves_the_chunk_size_asked_for(tmp_path: Path) -> None:
    """``--chunk-tokens``: vLLM's own tiers and ours offload chunks of the same size."""
    cpu = EngineSettings(model="m", device="cpu", block_size=32, chunk_tokens=64)
    native, fs, ours = (_transfer(server_spec(c, cpu, 0.5, tmp_path / c).args)["kv_connector_extra_config"]
                        for c in ("vllm-native-cpu", "vllm-fs", "lifeboatcache"))
    assert native["block_size"] == fs["block_size"] == 64
    assert ours["lifeboatcache"]["engine"]["vllm"]["native_block_tokens"] == 64


def test_grid_runs_fresh_servers_per_cell_and_writes_results(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    settings = EngineSettings(model="fake", served_name="fake-model",
                              program=(sys.executable, str(FAKE_SERVER), "--log", str(log)))
    sessions = generate_sessions(SyntheticSpec(sessions=2, turns=3, shared_prefix_tokens=128, first_user_tokens=64,
                                               growth_tokens=64))
    plan = GridPlan(["vllm", "lifeboatcache"], [0.1, 0.2], [1, 2], settings,
                    ReplayOptions(max_tokens=3, token_map=TokenMap(tokens_per_block=2)), tmp_path / "out",
                    start_timeout_s=60)
    results = run_grid(plan, {1: sessions[:1], 2: sessions}, Console(quiet=True))
    # plain vLLM has no DRAM tier: once per agent count; lifeboatcache once per DRAM size.
    assert [(r.config, r.dram_gb, r.agents) for r in results] == [
        ("vllm", None, 1), ("lifeboatcache", 0.1, 1), ("lifeboatcache", 0.2, 1),
        ("vllm", None, 2), ("lifeboatcache", 0.1, 2), ("lifeboatcache", 0.2, 2)]
    assert all(r.error is None for r in results)
    assert [r.summary["requests"] for r in results] == [3, 3, 3, 6, 6, 6]
    assert len({r.tier_dir for r in results}) == 6
    saved = json.loads((tmp_path / "out" / "grid.json").read_text())
    assert len(saved["cells"]) == 6 and saved["cells"][1]["summary"]["output_tokens"] == 9
    table = markdown_table(results)
    main_table = table.split("\n\n")[0]
    assert main_table.count("\n| lifeboatcache |") == 4 and "unequal work" not in table
    args = json.loads(Path(str(log) + ".args").read_text())  # the last cell's server flags
    assert _transfer(args)["kv_connector_extra_config"]["cpu_bytes_to_use"] == int(0.2 * 2**30)
    plots = write_plots(results, tmp_path / "plots")
    assert [p.name for p in plots] == ["ttft_per_round.png", "throughput.png", "cache_served.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)


def test_a_server_that_cannot_start_fails_its_cell_only(tmp_path: Path) -> None:
    exits = (sys.executable, "-c", "import sys; print('no GPU'); sys.exit(3)")
    settings = EngineSettings(model="broken", program=exits)
    sessions = generate_sessions(SyntheticSpec(sessions=1, turns=1))
    plan = GridPlan(["vllm", "lifeboatcache"], [0.1], [1], settings, ReplayOptions(), tmp_path, start_timeout_s=30)
    results = run_grid(plan, {1: sessions}, Console(quiet=True))
    assert len(results) == 2
    assert all("exited with status 3" in (r.error or "") and "no GPU" in r.error for r in results)
    assert "failed: ServerFailed" in markdown_table(results)


def test_demo_verdict_stands_against_each_baseline_on_ttft_and_throughput() -> None:
    from lifeboatcache.grid.demo import COMPARED, verdict

    assert list(COMPARED) == ["vllm", "vllm-fs", "lifeboatcache"]  # plain, vLLM's own offloading, ours
    plain = {"requests": 24, "output_tokens": 384, "ttft_mean_s": 3.0, "output_tokens_per_s": 10.0}
    ahead = verdict("plain vLLM", plain, {**plain, "ttft_mean_s": 2.0, "output_tokens_per_s": 12.0})
    assert ahead.startswith("lifeboatcache vs plain vLLM: [green]ahead[/] on mean TTFT (1.50x: 2.000 s vs 3.000 s)")
    assert "[green]ahead[/] on output tok/s (1.20x: 12.0 vs 10.0); identical work: 24 requests, 384 output" in ahead
    behind = verdict("vLLM's offloading", plain, {**plain, "ttft_mean_s": 4.0, "output_tokens": 380,
                                                  "output_tokens_per_s": 8.0})
    assert "[yellow]NOT ahead[/] on mean TTFT (0.75x" in behind and "NOT ahead[/] on output tok/s (0.80x" in behind
    assert "UNEQUAL work" in behind


#: the first lines of /proc/cpuinfo's flags on three CPUs (shortened to what matters and some neighbours)
EPYC_ROME_FLAGS = "flags\t\t: fpu vme sse4_2 movbe popcnt aes xsave avx f16c rdrand fma avx2 bmi2 sha_ni clzero"
SAPPHIRE_RAPIDS_FLAGS = "flags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8"
COOPER_LAKE_FLAGS = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni avx512_bf16"
NEOVERSE_V1 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd evtstrm aes sha2 crc32 atomics bf16 i8mm"
NEOVERSE_N1 = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics"


def test_bfloat16_only_where_the_cpu_computes_it() -> None:
    from lifeboatcache.grid.setup import cpu_computes_bfloat16, detect_dtype

    assert not cpu_computes_bfloat16(f"processor\t: 0\n{EPYC_ROME_FLAGS}\nbugs\t\t: sysret_ss_attrs\n")
    assert cpu_computes_bfloat16(SAPPHIRE_RAPIDS_FLAGS)
    assert cpu_computes_bfloat16(COOPER_LAKE_FLAGS)
    assert cpu_computes_bfloat16(NEOVERSE_V1)
    assert not cpu_computes_bfloat16(NEOVERSE_N1)
    assert cpu_computes_bfloat16("")  # nothing known: vLLM's own choice stands
    assert detect_dtype("cuda") == "bfloat16"
    assert detect_dtype("cpu") == ("bfloat16" if cpu_computes_bfloat16() else "float32")
