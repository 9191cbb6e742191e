"""A small OpenAI-compatible streaming server for the replay tests (run as its own process).

``python fake_openai.py --port P --log FILE [--fail-status 500] [--max-context N]``

- ``/v1/completions`` and ``/v1/chat/completions`` stream ``max_tokens`` one-token chunks,
  then a usage chunk whose ``cached_tokens`` is the longest prefix shared with any earlier
  prompt (a toy prefix cache), then ``[DONE]``.
- ``--fail-status`` answers every generation request with that HTTP status (4xx/5xx tests).
- ``--max-context`` answers 400 with vLLM's wording when prompt + max_tokens does not fit.
- Each request body is appended to ``--log`` (one JSON line) with its arrival/finish times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from aiohttp import web


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def build_app(log_path: str, fail_status: int, max_context: int, token_delay_s: float,
              model: str) -> web.Application:
    seen: list[list[int]] = []
    counters = {"prompt_tokens": 0.0, "prefix_cache_hits": 0.0}

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "max_model_len": max_context}]})

    async def metrics(_: web.Request) -> web.Response:
        lines = [f'vllm:{name}_total{{model_name="{model}"}} {value}' for name, value in counters.items()]
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
        cached = max((_common_prefix(prompt, p) for p in seen), default=0)
        seen.append(prompt)
        counters["prompt_tokens"] += len(prompt)
        counters["prefix_cache_hits"] += cached
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
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--fail-status", type=int, default=0)
    parser.add_argument("--max-context", type=int, default=1 << 20)
    parser.add_argument("--token-delay", type=float, default=0.002)
    parser.add_argument("--served-model-name", default="fake-model")
    args, vllm_args = parser.parse_known_args()  # a grid passes vLLM's flags too: record them
    if vllm_args:
        with open(args.log + ".args", "w", encoding="utf-8") as out:
            json.dump(vllm_args, out)
    web.run_app(build_app(args.log, args.fail_status, args.max_context, args.token_delay, args.served_model_name),
                host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
