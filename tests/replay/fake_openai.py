"""A small OpenAI-compatible streaming server for the replay tests (run as its own process).

``python fake_openai.py --port P --log FILE [--fail-status 500] [--max-context N]``

- ``/v1/completions`` and ``/v1/chat/completions`` stream ``max_tokens`` one-token chunks,
  then a usage chunk whose ``cached_tokens`` is the longest prefix shared with any earlier
  prompt (a toy prefix cache), then ``[DONE]``.
- ``--fail-status`` answers every generation request with that HTTP status (4xx/5xx tests).
- ``--max-context`` answers 400 with vLLM's wording when prompt + max_tokens does not fit.
- Each request body is appended to ``--log`` (one JSON line) with its arrival/finish times.
- ``/metrics`` speaks vLLM's names: ``prefix_cache_hits`` (device), ``external_prefix_cache_hits``
  and ``prompt_tokens_cached_by_source{source=device|disk}``.
- ``--fail-start TEXT`` prints a vLLM-shaped start-up traceback ending in TEXT (in a worker),
  then the API server's wrapper ``RuntimeError``, and exits 1 (root-cause tests).

A tier below: given vLLM's ``--kv-transfer-config`` (the grid's vllm-fs or lifeboatcache
column), every prompt is stored as one file of ``--kv-bytes-per-token`` x its length in the
tier's directory, so a small ``--disk-gb`` fills up. A write that fails is one vLLM-fs style
``Job N block I/O failed`` line on stdout (the server log) or one lifeboatcache error, counted
on a second ``/metrics`` at the config's dashboard port. A server started on the same
directory reads the stored prompts back: after a restart, hits come from "disk".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from aiohttp import web


class Tier:
    """The toy tier below: prompts as files, read back at start."""

    def __init__(self, root: Path, kind: str, name: str, bytes_per_token: int) -> None:
        self.root, self.kind, self.name, self.bytes_per_token = root, kind, name, bytes_per_token
        root.mkdir(parents=True, exist_ok=True)
        self.prompts = [json.loads(p.read_bytes().split(b"\n", 1)[0]) for p in sorted(root.glob("*.blk"))]
        self.counters = {"puts": 0, "errors": 0, "put_blocks": 0}

    def store(self, prompt: list[int]) -> None:
        self.counters["put_blocks"] += 1
        path = self.root / f"{time.time_ns()}.blk"
        head = json.dumps(prompt).encode() + b"\n"
        try:
            with open(path, "wb") as out:
                out.write(head + b"\0" * max(0, len(prompt) * self.bytes_per_token - len(head)))
        except OSError as exc:
            path.unlink(missing_ok=True)
            self.counters["errors"] += 1
            if self.kind == "fs":
                print(f"(EngineCore pid={os.getpid()}) ERROR 12-01 08:42:04 [thread_pool.py:181] "
                      f"Job {self.counters['put_blocks']} block I/O failed: {exc}", flush=True)
            return
        self.counters["puts"] += 1
        self.prompts.append(prompt)

    def metrics(self) -> str:
        tier = f'{{tier="{self.name}"}}'
        used = sum(p.stat().st_size for p in self.root.glob("*.blk"))
        return (f"lifeboatcache_puts_total{tier} {self.counters['puts']}\n"
                f"lifeboatcache_errors_total{tier} {self.counters['errors']}\n"
                f"lifeboatcache_evictions_total{tier} 0\n"
                f"lifeboatcache_bytes_used{tier} {used}\n"
                f"lifeboatcache_put_blocks_total {self.counters['put_blocks']}\n")


def tier_from_args(vllm_args: list[str], bytes_per_token: int) -> tuple[Tier | None, int | None]:
    """The tier (and our dashboard port) a grid's ``--kv-transfer-config`` describes."""
    if "--kv-transfer-config" not in vllm_args:
        return None, None
    extra = json.loads(vllm_args[vllm_args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    ours = extra.get("lifeboatcache")
    if ours:
        tier = next((t for t in ours["tiers"] if t.get("path")), None)
        dashboard = ours.get("dashboard") or {}
        port = dashboard.get("port") if dashboard.get("enabled") else None
        if tier is None:
            return None, port
        return Tier(Path(tier["path"]), "lifeboatcache", tier.get("name") or "tier0", bytes_per_token), port
    fs = [t for t in extra.get("secondary_tiers") or [] if t.get("type") == "fs"]
    return (Tier(Path(fs[0]["root_dir"]), "fs", "fs", bytes_per_token) if fs else None), None


def fail_start(cause: str) -> None:
    """What vLLM prints when a worker fails at start: the cause in the child, wrappers in the parents."""
    print(f"(Worker pid=12) ERROR 12-01 08:42:04 [multiproc_executor.py:1063]     raise {cause.split(':')[0]}(\n"
          f"(Worker pid=12) ERROR 12-01 08:42:04 [multiproc_executor.py:1063] {cause}\n"
          "(EngineCore pid=11) ERROR 12-01 08:42:04 [core.py:1510] RuntimeError: Worker failed with error "
          f"'{cause}', please check the stack trace above for the root cause\n"
          "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
          flush=True)
    sys.exit(1)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def build_app(log_path: str, fail_status: int, max_context: int, token_delay_s: float,
              model: str, tier: Tier | None = None) -> web.Application:
    seen: list[list[int]] = []
    counters = {"prompt_tokens": 0.0, "prefix_cache_hits": 0.0, "external_prefix_cache_hits": 0.0}
    by_source = {"device": 0.0, "disk": 0.0}

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "max_model_len": max_context}]})

    async def metrics(_: web.Request) -> web.Response:
        lines = [f'vllm:{name}_total{{model_name="{model}"}} {value}' for name, value in counters.items()]
        lines += [f'vllm:prompt_tokens_cached_by_source_total{{engine="0",model_name="{model}",source="{source}"}} '
                  f'{value}' for source, value in by_source.items()]
        return web.Response(text="\n".join(lines) + "\n")

    async def generate(request: web.Request) -> web.StreamResponse:
        arrived = time.time()
        body = await request.json()
        if fail_status:
            return web.json_response({"object": "error", "message": f"injected failure {fail_status}",
                                      "code": fail_status}, status=fail_status)
        prompt = body.get("prompt")
        if prompt is None:
            prompt = [ord(c) for m in body["messages"] for c in f"{m['role']}:{m['content']}\n"]
        max_tokens = int(body["max_tokens"])
        if len(prompt) + max_tokens > max_context:
            return web.json_response({"object": "error", "code": 400, "type": "BadRequestError", "message": (
                f"This model's maximum context length is {max_context} tokens. However, you requested "
                f"{len(prompt) + max_tokens} tokens ({len(prompt)} in the messages, {max_tokens} in the completion).")},
                status=400)
        device = max((_common_prefix(prompt, p) for p in seen), default=0)
        stored = max((_common_prefix(prompt, p) for p in tier.prompts), default=0) if tier else 0
        cached = max(device, stored)
        seen.append(prompt)
        if tier is not None:
            tier.store(prompt)
        counters["prompt_tokens"] += len(prompt)
        counters["prefix_cache_hits"] += device
        counters["external_prefix_cache_hits"] += cached - device
        by_source["device"] += device
        by_source["disk"] += cached - device
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chat = "messages" in body
        for index in range(max_tokens):
            await asyncio.sleep(token_delay_s)
            choice = {"index": 0, "delta": {"content": f" t{index}"}} if chat else {"index": 0, "text": f" t{index}"}
            await response.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        usage = {"prompt_tokens": len(prompt), "completion_tokens": max_tokens,
                 "prompt_tokens_details": {"cached_tokens": cached}}
        await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"path": request.path, "body": body, "arrived": arrived,
                                  "finished": time.time()}) + "\n")
        return response

    app = web.Application()
    app.add_routes([web.get("/v1/models", models), web.get("/metrics", metrics),
                    web.post("/v1/completions", generate), web.post("/v1/chat/completions", generate)])

    async def on_shutdown(_: web.Application) -> None:  # SIGTERM only: a SIGKILL leaves no line
        print("fake server: graceful shutdown", flush=True)

    app.on_shutdown.append(on_shutdown)
    return app


def serve_tier_metrics(app: web.Application, tier: Tier, port: int) -> None:
    """Our tier's ``/metrics`` on the dashboard port, beside the OpenAI server."""
    async def tier_metrics(_: web.Request) -> web.Response:
        return web.Response(text=tier.metrics())

    async def start(_: web.Application) -> None:
        side = web.Application()
        side.add_routes([web.get("/metrics", tier_metrics)])
        runner = web.AppRunner(side)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        app["tier_runner"] = runner

    async def stop(_: web.Application) -> None:
        await app["tier_runner"].cleanup()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--fail-status", type=int, default=0)
    parser.add_argument("--max-context", type=int, default=1 << 20)
    parser.add_argument("--token-delay", type=float, default=0.002)
    parser.add_argument("--served-model-name", default="fake-model")
    parser.add_argument("--fail-start", default="")
    parser.add_argument("--kv-bytes-per-token", type=int, default=64)
    args, vllm_args = parser.parse_known_args()  # a grid passes vLLM's flags too: record them
    if vllm_args:
        with open(args.log + ".args", "w", encoding="utf-8") as out:
            json.dump(vllm_args, out)
    if args.fail_start:
        fail_start(args.fail_start)
    tier, tier_port = tier_from_args(vllm_args, args.kv_bytes_per_token)
    app = build_app(args.log, args.fail_status, args.max_context, args.token_delay, args.served_model_name, tier)
    if tier is not None and tier_port:
        serve_tier_metrics(app, tier, tier_port)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
