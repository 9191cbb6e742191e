"""Run a scripted sequence of requests on an in-process vLLM engine; print one JSON result.

Used by the engine tests and ``lifeboatcache bench returning``, each run in a fresh process
(``python -m lifeboatcache_vllm.offline < plan.json``) so that "a restart" is a real new
process. The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: ~3 s start
instead of ~20 s) with ``PYTHONHASHSEED=0`` so block hashes match across processes.

Plan keys: ``model``, ``dtype``, ``max_model_len``, ``block_size``, ``num_gpu_blocks``
(device-KV budget, small so sessions evict each other), ``connector``: "none" |
"lifeboat" (explicit config: ``lifeboat_config``) | "env" (``LIFEBOAT_CACHE=1`` path) |
"vllm_fs" (vLLM's own fs tier at ``fs_dir``), ``tier_type``/``tier_module`` (another
tier class for "lifeboat"), ``cpu_gb`` (vLLM's CPU tier), and ``steps``:
``{"prompts": [[token ids], ...], "max_tokens": n, "one_by_one": bool, "reset": bool,
"settle_s": seconds, "session": name, "cache": [cache steps]}`` (``reset``: drop the engine's
prefix cache and vLLM's CPU tier first, keeping the secondary tier; ``settle_s``: sleep first,
so that stores still cascading from earlier steps finish and do not share the CPU with the
timed step; ``session``: the requests name their session, ``kv_transfer_params
{"lifeboat_session": name}``; ``cache``: steps on the engine's lifeboatcache run before the
sleep, ``lifeboatcache_vllm.cache_steps``). Result: per step the generated token ids,
``num_cached_tokens`` and seconds per request (time to first token when ``max_tokens`` is 1),
and what its cache steps did; ``lifeboat`` counters per tier; ``lifeboat_codecs``: per tier the
codec, the layout of the last block it encoded and the compression ratio, as our ``/metrics``
show them; ``offload``: what vLLM's
offloading connector chose for this model (``offload_geometry``: chunk size and, per KV group,
its kind and the window it loads), None without a connector.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "PYTHONHASHSEED": "0",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "TOKENIZERS_PARALLELISM": "false",
}
GIB = 1024**3


def engine_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for an engine process (in-process engine core, stable block hashes)."""
    env = dict(os.environ if base is None else base)
    env.update(ENGINE_ENV)
    return env


def kv_transfer_config(plan: dict[str, Any]) -> dict[str, Any] | None:
    """The connector config a plan asks for (None: no connector, or the env plugin decides)."""
    connector = plan.get("connector", "none")
    cpu_bytes = int(float(plan.get("cpu_gb", 0.5)) * GIB)
    if connector == "lifeboat":
        from lifeboatcache_vllm.autoenable import kv_transfer_config_dict

        config = kv_transfer_config_dict(plan["lifeboat_config"])
        extra = config["kv_connector_extra_config"]
        extra["cpu_bytes_to_use"] = cpu_bytes
        if plan.get("tier_module"):  # a LifeboatTier subclass (tests' negative control)
            extra["secondary_tiers"] = [{"type": plan["tier_type"], "module_path": plan["tier_module"]}]
        return config
    if connector == "vllm_fs":
        from lifeboatcache_vllm.autoenable import SPEC_MODULE, SPEC_NAME

        # Our spec only for its CPU-backend worker and chunk default; the tier is vLLM's own.
        return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": {
            "spec_name": SPEC_NAME, "spec_module_path": SPEC_MODULE, "cpu_bytes_to_use": cpu_bytes,
            "offload_prompt_only": False, "block_size": int(plan.get("chunk_tokens", 256)),
            "secondary_tiers": [{"type": "fs", "root_dir": plan["fs_dir"]}]}}
    if connector in ("none", "env"):
        return None
    raise ValueError(f"unknown connector {connector!r}; use none, lifeboat, env or vllm_fs")


def lifeboat_counters() -> dict[str, dict[str, float]]:
    """lifeboatcache's Prometheus counters in this process, per tier."""
    from prometheus_client import REGISTRY

    out: dict[str, dict[str, float]] = {}
    for family in REGISTRY.collect():
        if not family.name.startswith("lifeboatcache_"):
            continue
        for sample in family.samples:
            tier = sample.labels.get("tier")
            if tier is not None and sample.name.endswith("_total"):
                name = sample.name.removeprefix("lifeboatcache_").removesuffix("_total")
                out.setdefault(tier, {})[name] = out.get(tier, {}).get(name, 0) + sample.value
    return out


def lifeboat_codec_info() -> dict[str, dict[str, Any]]:
    """Per tier what lifeboatcache's ``/metrics`` say of its codec in this process.

    ``codec`` and ``layout`` from ``lifeboatcache_tier_codec_info`` (the layout of the last
    block the tier encoded, as the engine handed it), ``compression_ratio`` (raw / stored
    bytes) from ``lifeboatcache_compression_ratio``: read from the same registry a scrape
    reads, so a test sees on the real engine what an operator sees on the dashboard.
    """
    from prometheus_client import REGISTRY

    out: dict[str, dict[str, Any]] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            tier = sample.labels.get("tier")
            if tier is None:
                continue
            if sample.name == "lifeboatcache_tier_codec_info":
                out.setdefault(tier, {}).update(codec=sample.labels["codec"], layout=sample.labels["layout"])
            elif sample.name == "lifeboatcache_compression_ratio":
                out.setdefault(tier, {})["compression_ratio"] = sample.value
    return out


def offload_geometry(llm: Any) -> dict[str, Any] | None:
    """vLLM's offloading geometry for this engine: blocks per chunk and, per KV group, its kind.

    Read from the scheduler side of the in-process engine's OffloadingConnector (vLLM
    0.32/0.33 attribute names), so that a test of a hybrid model can see what "auto" chose
    and how the connector treats each group. Per group: ``spec`` (vLLM's KV cache spec class,
    e.g. ``SlidingWindowSpec``), ``tokens_per_block``, ``tokens_per_chunk``, ``sliding_window``
    (tokens, None for full attention) and ``window_chunks`` (the chunks a load of that group
    needs, None: the whole prefix). None where that path does not exist (no connector, another
    vLLM, a multiprocess engine).
    """
    try:
        connector = llm.llm_engine.engine_core.engine_core.scheduler.connector
        config = connector.connector_scheduler.config
    except AttributeError:
        return None
    groups = []
    for group in config.kv_group_configs:
        spec = group.kv_cache_spec
        groups.append({"group": int(group.group_idx), "spec": type(spec).__name__,
                       "tokens_per_block": int(group.tokens_per_block), "tokens_per_chunk": int(group.tokens_per_chunk),
                       "sliding_window": getattr(spec, "sliding_window", None),
                       "window_chunks": group.sliding_window_size_in_chunks})
    return {"blocks_per_chunk": int(config.blocks_per_chunk), "groups": groups}


def run(plan: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    started = time.perf_counter()
    llm = LLM(
        model=plan["model"],
        dtype=plan.get("dtype", "float32"),
        max_model_len=int(plan.get("max_model_len", 4096)),
        block_size=int(plan.get("block_size", 32)),
        enable_prefix_caching=True,
        num_gpu_blocks_override=plan.get("num_gpu_blocks"),
        kv_cache_memory_bytes=int(plan.get("kv_cache_bytes", GIB)),
        enforce_eager=True,
        seed=0,
        kv_transfer_config=kv_transfer_config(plan),
        disable_log_stats=True,
    )
    result: dict[str, Any] = {"engine_start_s": time.perf_counter() - started, "steps": []}
    for step in plan["steps"]:
        cache_steps = []
        if step.get("cache"):
            from lifeboatcache_vllm.cache_steps import run_step

            cache_steps = [run_step(op) for op in step["cache"]]
        time.sleep(float(step.get("settle_s", 0)))
        if step.get("reset"):
            llm.reset_prefix_cache(reset_connector=True)
        extra = {"kv_transfer_params": {"lifeboat_session": step["session"]}} if step.get("session") else None
        params = SamplingParams(temperature=0.0, max_tokens=int(step.get("max_tokens", 8)), ignore_eos=True,
                                extra_args=extra)
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in step["prompts"]]
        outputs, seconds = [], []
        batches = [[p] for p in prompts] if step.get("one_by_one") else [prompts]
        for batch in batches:
            t0 = time.perf_counter()
            outputs += llm.generate(batch, params, use_tqdm=False)
            seconds += [time.perf_counter() - t0] * len(batch)
        result["steps"].append({
            "tokens": [list(o.outputs[0].token_ids) for o in outputs],
            "cached": [int(o.num_cached_tokens or 0) for o in outputs],
            "seconds": seconds,
            **({"cache": cache_steps} if cache_steps else {}),
        })
    # Stores are submitted at the start of the engine's next step and cascade to secondary
    # tiers a step later: two tiny requests push the last session's chunks all the way down.
    for _ in range(2):
        llm.generate([TokensPrompt(prompt_token_ids=[1, 2, 3])], SamplingParams(max_tokens=1), use_tqdm=False)
    result["lifeboat"] = lifeboat_counters()
    result["lifeboat_codecs"] = lifeboat_codec_info()
    result["offload"] = offload_geometry(llm)
    llm.llm_engine.engine_core.shutdown()  # closes the tiers: queued writes finish first
    return result


def main() -> None:
    plan = json.load(sys.stdin)
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)
    # what vLLM and torch leave in the temporary folder goes in one of this run's own, removed
    # below: the os._exit skips every clean-up at exit (launch.private_temp_dir says what they leave)
    from lifeboatcache_vllm.launch import private_temp_dir

    temp = private_temp_dir()
    os.environ["TMPDIR"] = tempfile.tempdir = str(temp)
    try:
        result = run(plan)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    sys.stdout.flush()
    print("LIFEBOAT-RESULT " + json.dumps(result), flush=True)
    os._exit(0)  # vLLM's in-process engine may hold non-daemon threads at exit


if __name__ == "__main__":
    main()
