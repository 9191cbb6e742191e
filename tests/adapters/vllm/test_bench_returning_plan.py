"""`bench returning` compares tiers, so both engine runs must offload the same chunk.

Without an engine: the chunk each run offloads is read from the kv-transfer configs the bench's
plans produce, as vLLM's spec would read them (``chunk_blocks`` for ours, ``block_size`` for
vLLM's fs tier).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from lifeboatcache_vllm.offline import kv_transfer_config
from lifeboatcache_vllm.settings import EXTRA_KEY, resolve_config, vllm_settings
from lifeboatcache_vllm.spec import chunk_blocks

import lifeboatcache.models
from lifeboatcache.bench import returning
from lifeboatcache.bench.returning import CHUNK_TOKENS, engine_settings


def test_both_tiers_offload_the_same_chunk(tmp_path: Path) -> None:
    base, lifeboat = engine_settings("model", 7430, tmp_path, io_threads=8, codec="none")
    ours_extra = kv_transfer_config({**base, "connector": "lifeboat",
                                     "lifeboat_config": lifeboat})["kv_connector_extra_config"]
    fs_extra = kv_transfer_config({**base, "connector": "vllm_fs",
                                   "fs_dir": str(tmp_path / "fs")})["kv_connector_extra_config"]

    block = base["block_size"]
    engine_groups = SimpleNamespace(groups=(SimpleNamespace(tokens_per_block=block),))
    ours = chunk_blocks(engine_groups, vllm_settings(resolve_config(ours_extra[EXTRA_KEY])).native_block_tokens) * block
    assert ours == fs_extra["block_size"] == CHUNK_TOKENS


def test_o_direct_reaches_our_tier_only_when_asked(tmp_path: Path) -> None:
    """``bench returning --o-direct`` measures our tier with O_DIRECT block I/O: the flag must reach
    the file tier's options through the engine's kv-transfer config, and stay off without it."""

    def tier_options(o_direct: bool) -> dict[str, object]:
        base, lifeboat = engine_settings("model", 7430, tmp_path, io_threads=8, codec="none", o_direct=o_direct)
        extra = kv_transfer_config({**base, "connector": "lifeboat",
                                    "lifeboat_config": lifeboat})["kv_connector_extra_config"]
        (tier,) = resolve_config(extra[EXTRA_KEY]).tiers
        return tier.model_extra or {}

    assert tier_options(True)["o_direct"] is True
    assert tier_options(False).get("o_direct", False) is False


EngineRun = Callable[[dict[str, object], Path], dict[str, object]]


def _fake_engine(fail_on_call: int | None = None) -> EngineRun:
    """An ``engine_run`` that writes its log and a tier file into the run's folder, as the engine would."""
    calls: list[str] = []

    def run(plan: dict[str, object], log: Path) -> dict[str, object]:
        calls.append(log.name)
        log.write_text("engine log\n")
        (log.parent / "lifeboat-tier").mkdir(exist_ok=True)
        (log.parent / "lifeboat-tier" / "block").write_bytes(b"\0" * 4096)
        if len(calls) == fail_on_call:
            raise RuntimeError(f"engine run failed (exit 1); see {log}")
        steps = plan["steps"]
        assert isinstance(steps, list)
        return {"steps": [{"seconds": [0.1 * (i + 1)], "cached": [i]} for i in range(len(steps))],
                "lifeboat": {"nvme": {"bytes_written": 10, "raw_bytes_written": 10}}}
    return run


@pytest.fixture
def temp_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The benches' temporary folders made in ``tmp_path`` (returned), and no model looked up."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(lifeboatcache.models, "smollm2_hf_dir", lambda: Path("model"))
    return tmp_path


def test_a_run_without_workdir_removes_its_temporary_folder(temp_in_tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run wrote about a gigabyte of tier files into a temporary folder it never removed."""
    tmp_path = temp_in_tmp_path
    monkeypatch.setattr(returning, "engine_run", _fake_engine())
    result = returning.run_returning(tokens=600, reps=2)
    assert result["ttft_tier_s"] > 0 and result["workdir"] is None
    assert list(tmp_path.iterdir()) == []

    kept = tmp_path / "kept"
    result = returning.run_returning(tokens=600, reps=2, workdir=kept)
    assert result["workdir"] == str(kept)
    assert sorted(p.name for p in kept.iterdir()) == ["lifeboat-tier", "ours.log", "restart.log", "vllm_fs.log"]


def test_a_failed_run_keeps_its_folder_and_names_it(temp_in_tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path = temp_in_tmp_path
    monkeypatch.setattr(returning, "engine_run", _fake_engine(fail_on_call=2))
    with pytest.raises(RuntimeError, match=r"restart\.log"):
        returning.run_returning(tokens=600, reps=2)
    (work,) = tmp_path.iterdir()
    assert (work / "restart.log").read_text() == "engine log\n"
    assert f"kept {work}" in capsys.readouterr().err


def test_engine_codecs_removes_its_temporary_folder_too(temp_in_tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench engine-codecs`` shares the helper: its folder goes after a successful run, stays after a failed one."""
    from lifeboatcache.bench import engine_codecs

    def run_codec(codec: str, sessions: list[list[int]], prompt_tokens: int, gen_tokens: int, work: Path,
                  cpu_gb: float, io_threads: int) -> dict[str, object]:
        (work / f"{codec}.log").write_text("engine log\n")
        if codec == "fp8":
            raise RuntimeError(f"engine run failed; see {work / 'fp8.log'}")
        return {"codec": codec, "tokens": [[1, 2, 3]] * len(sessions)}

    tmp_path = temp_in_tmp_path
    monkeypatch.setattr(engine_codecs, "text_sessions", lambda n, *_: [[7] * 80] * n)
    monkeypatch.setattr(engine_codecs, "run_codec", run_codec)
    result = engine_codecs.run_engine_codecs(["none", "lossless"], prompts=2, prompt_tokens=64)
    assert [r["codec"] for r in result["runs"]] == ["none", "lossless"] and result["workdir"] is None
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="engine run failed"):
        engine_codecs.run_engine_codecs(["none", "fp8"], prompts=2, prompt_tokens=64)
    (work,) = tmp_path.iterdir()
    assert sorted(p.name for p in work.iterdir()) == ["fp8.log", "none.log"]
