"""The codec benchmark's machinery end to end, on a tiny random Llama (seconds, no download).

The real run (SmolLM2-135M over 2,048 tokens) is ``lifeboatcache bench codecs``; this keeps its
code paths — KV extraction, blocks, every codec through the registry, cache write-back,
teacher-forced scoring, the JSON document — from rotting.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

import lifeboatcache.bench.codecs as bench_codecs
from lifeboatcache.bench.codecs import BENCH_CODECS, KVScorer, _timed, rank_oscar_layers, run_benchmark
from lifeboatcache.cli import app


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def tiny_scorer(model: LlamaForCausalLM, seed: int) -> KVScorer:
    ids = torch.randint(0, 128, (1, 200), generator=torch.Generator().manual_seed(seed))
    return KVScorer(model, ids, context=128, score=32)


@pytest.fixture(scope="module")
def scorer(model: LlamaForCausalLM) -> KVScorer:
    return tiny_scorer(model, 1)


def test_exact_kv_is_bf16_in_block_layout(scorer: KVScorer) -> None:
    assert scorer.exact.shape == (2, 2, 128, 2, 16) and scorer.exact.dtype.name == "bfloat16"
    # writing the exact cache back reproduces the model's own continuation scores (one forward pass,
    # float32 cache): they differ by the bf16 rounding of the cache alone, while the same cache
    # written back with K and V swapped or its layers in the wrong order scores far from them
    exact, recomputed = scorer.perplexity(scorer.exact), scorer.recomputed_perplexity()
    gap = abs(exact / recomputed - 1)
    assert gap < 1e-3
    for misplaced in (scorer.exact[::-1], scorer.exact[:, ::-1]):
        assert abs(scorer.perplexity(misplaced) / recomputed - 1) > 10 * max(gap, 1e-4)


def test_every_codec_reports_every_figure(scorer: KVScorer, tmp_path: Path) -> None:
    doc = run_benchmark(scorer, list(BENCH_CODECS), block_tokens=32, repeats=1, rotation_dir=tmp_path)
    assert doc["ppl_exact"] > 1 and set(doc["codecs"]) == set(BENCH_CODECS)
    for name, row in doc["codecs"].items():
        figures = {"ratio", "encode_GBps", "decode_GBps", "k_rel_err", "v_rel_err", "ppl", "ppl_rel", "kl"}
        assert figures <= set(row), name
        assert row["kl"] >= 0, name
        assert row["encode_GBps"] > 0 and row["decode_GBps"] > 0 and np.isfinite(row["ppl"])
        assert row["ppl_rel"] == pytest.approx(row["ppl"] / doc["ppl_exact"] - 1, abs=1e-3)
    lossless = doc["codecs"]["lossless"]
    assert lossless["k_rel_err"] == 0 and lossless["v_rel_err"] == 0 and lossless["ppl_rel"] == 0
    assert lossless["kl"] == 0 and doc["ppl_recomputed"] > 1
    assert doc["codecs"]["lossless_fp8"]["k_rel_err"] == 0  # exact on its (fp8) input
    for name in ("fp8", "lbq4", "lbq3", "lbq2", "oscar", "int2", "lossless_fp8"):
        # KL from the exact (bf16) cache's predictions: lossless_fp8 is exact only on its fp8 input
        assert doc["codecs"][name]["kl"] > 0 and (name == "lossless_fp8" or doc["codecs"][name]["k_rel_err"] > 0), name
    # fewer bits, more error: the figures are measured, not copied
    assert doc["codecs"]["lbq4"]["v_rel_err"] < doc["codecs"]["lbq3"]["v_rel_err"] < doc["codecs"]["lbq2"]["v_rel_err"]
    assert doc["codecs"]["lbq2"]["ratio"] > doc["codecs"]["lbq3"]["ratio"] > doc["codecs"]["lbq4"]["ratio"] > 2.5


def test_zipnn_is_a_reference_column_of_the_same_run(scorer: KVScorer, tmp_path: Path) -> None:
    doc = run_benchmark(scorer, ["lossless"], block_tokens=32, repeats=1, rotation_dir=tmp_path,
                        references=("zipnn",))
    zipnn, ours = doc["codecs"]["zipnn"], doc["codecs"]["lossless"]
    assert zipnn["reference"] is True and zipnn["codec"].startswith("zipnn ")
    assert zipnn["k_rel_err"] == 0 and zipnn["v_rel_err"] == 0  # lossless (the bytes are also compared)
    for row in (zipnn, ours):
        assert row["ratio"] > 1
        assert min(row[f"{d}_GBps{w}"] for d in ("encode", "decode") for w in ("", "_wall", "_wall_threads")) > 0


def test_speeds_count_the_cpu_time_of_every_thread() -> None:
    """A library computing in a thread of its own is not free: its CPU time is counted."""
    spent: list[float] = []

    def busy() -> None:
        start = time.thread_time()
        while time.thread_time() - start < 0.2:
            pass
        spent.append(time.thread_time() - start)

    def in_a_thread() -> None:
        worker = threading.Thread(target=busy)
        worker.start()
        worker.join()

    cpu, _ = _timed(in_a_thread)
    assert cpu >= 0.5 * spent[0]


def test_oscar_layers_are_ranked_by_the_perplexity_they_cost_and_the_costliest_kept_precise(
        scorer: KVScorer, tmp_path: Path) -> None:
    """Every (K/V, layer) is ranked by what storing it at 2 bits costs the model, measured; the
    precise ones are the head of that ranking, as many as the ratio allows, and oscar run with
    them (through bench codecs' options) stores them at more bits."""
    ranked = rank_oscar_layers([scorer], block_tokens=32, rotation_dir=tmp_path, precise_bits=4, min_ratio=3.8)
    units = [row["unit"] for row in ranked["ranking"]]
    gains = [row["ppl_gain"] for row in ranked["ranking"]]
    assert sorted(units) == ["k0", "k1", "v0", "v1"] and gains == sorted(gains, reverse=True)
    options = ranked["codec_options"]
    chosen = {f"k{n}" for n in options["precise_k"]} | {f"v{n}" for n in options["precise_v"]}
    # head dim 16: 2 bits + 1 of the row's log8 grid, 5.3x; each precise unit adds 2 bits to a
    # quarter of the values: two fit above 3.8x (4.0x), a third would not (3.6x)
    assert chosen == set(units[:2])
    [measured] = ranked["calibration"]
    assert measured["plain"]["ratio"] == pytest.approx(16 / 3, abs=0.05)
    assert measured["precise"]["ratio"] == pytest.approx(4.0, abs=0.05)
    doc = run_benchmark(scorer, ["oscar"], block_tokens=32, repeats=1, rotation_dir=tmp_path / "again",
                        oscar_options=options)
    assert doc["codecs"]["oscar"]["ratio"] == pytest.approx(measured["precise"]["ratio"], abs=1e-3)
    assert doc["codecs"]["oscar"]["options"] == options  # the record says what was run


def test_the_head_of_the_ranking_is_kept_at_4_bits_and_the_rest_of_the_choice_at_3(
        scorer: KVScorer, tmp_path: Path) -> None:
    """--four-bit 1: the costliest unit at 4 bits, then as many at 3 as the ratio allows."""
    ranked = rank_oscar_layers([scorer], block_tokens=32, rotation_dir=tmp_path, min_ratio=4.2, four_bit=1)
    units = [row["unit"] for row in ranked["ranking"]]
    options = ranked["codec_options"]
    # head dim 16: 3 bits plain (5.3x); each unit is a quarter of the values: the 4-bit one adds 0.5
    # bits (4.6x), a 3-bit one 0.25 (4.3x); a third would give 4.0x
    wide = {f"k{n}" for n in options["four_bit_k"]} | {f"v{n}" for n in options["four_bit_v"]}
    rest = {f"k{n}" for n in options["precise_k"]} | {f"v{n}" for n in options["precise_v"]}
    assert wide == {units[0]} and rest == {units[1]} and options["precise_bits"] == 3
    assert ranked["calibration"][0]["precise"]["ratio"] == pytest.approx(16 / 3.75, abs=0.05)


def test_the_command_ranks_over_every_calibration_text_and_judges_options_on_another(
        scorer: KVScorer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench codecs --rank-oscar-layers --calibrate-on A --calibrate-on B` ranks over both texts;
    `--oscar-options` reaches the oscar codec (the tiny model stands in for SmolLM2)."""
    texts = []
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name)
        texts.append(tmp_path / name)
    read: list[Path] = []
    monkeypatch.setattr(bench_codecs, "smollm2_scorer", lambda path, context, score: read.append(path) or scorer)
    result = CliRunner().invoke(app, ["bench", "codecs", "--rank-oscar-layers", "--block-tokens", "32",
                                      "--calibrate-on", str(texts[0]), "--calibrate-on", str(texts[1]),
                                      "--text", str(texts[0])])
    assert result.exit_code == 0, result.output
    ranked = json.loads(result.output)
    assert ranked["texts"] == [str(t) for t in texts] and read == texts and len(ranked["calibration"]) == 2
    assert len(ranked["ranking"]) == 4
    options = json.dumps({"precise_k": [0, 1], "precise_bits": 4})
    result = CliRunner().invoke(app, ["bench", "codecs", "--codecs", "oscar", "--reference", "", "--json",
                                      "--repeats", "1", "--block-tokens", "32", "--text", str(texts[1]),
                                      "--oscar-options", options])
    assert result.exit_code == 0, result.output
    # 2 bits + 1 of the row's grid, and 2 more on half the values (keys of both layers)
    assert json.loads(result.output)["codecs"]["oscar"]["ratio"] == pytest.approx(16 / 4, abs=0.05)
    result = CliRunner().invoke(app, ["bench", "codecs", "--oscar-options", "[1]", "--text", str(texts[1])])
    assert result.exit_code != 0 and "JSON object" in result.output


def test_each_calibration_text_is_ranked_under_a_rotation_of_its_own(model: LlamaForCausalLM, tmp_path: Path) -> None:
    """A second text is encoded as bench codecs (or a fresh tier) would encode it, with a rotation
    calibrated on its own KV, not on the first text's."""
    texts = [tiny_scorer(model, 1), tiny_scorer(model, 2)]
    ranked = rank_oscar_layers(texts, block_tokens=32, rotation_dir=tmp_path, precise_bits=4, min_ratio=3.0)
    rotations = [sorted(p.name for p in (tmp_path / f"text-{i}").glob("oscar-*.npz")) for i in range(2)]
    assert len(rotations[0]) == len(rotations[1]) == 1 and rotations[0] != rotations[1]
    for text, measured in zip(texts, ranked["calibration"], strict=True):
        alone = rank_oscar_layers([text], block_tokens=32, rotation_dir=tmp_path / "alone" / str(id(text)),
                                  precise_bits=4, min_ratio=3.0)["calibration"][0]
        assert measured["plain"] == alone["plain"]
