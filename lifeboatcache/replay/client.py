"""One streaming request to an OpenAI-compatible server, recorded; and the server's counters.

Every request asks for the same work: ``max_tokens`` output tokens with ``ignore_eos`` (a
vLLM/SGLang sampling extension) and greedy sampling, so configurations compare equal work.
A failure never raises: it is written into the record with a reason, and the replay goes on.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp

from lifeboatcache.replay.records import RequestRecord

#: Phrases servers use when a prompt does not fit (vLLM, SGLang, OpenAI).
CONTEXT_TOO_LONG_HINTS = ("maximum context length", "context length", "max_model_len", "too long",
                          "maximum model length", "exceeds the model")


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests; ``base_url`` is the server root (``/v1/...`` is appended)."""

    base_url: str
    model: str
    timeout_s: float = 600.0
    api_key: str | None = None

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def request_body(endpoint: Endpoint, prompt: list[int] | None, messages: tuple[dict, ...] | None,
                 max_tokens: int) -> tuple[str, dict]:
    """(path, JSON body) for one turn: token ids go to completions, messages to chat."""
    body: dict = {
        "model": endpoint.model,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if messages is not None:
        return "/v1/chat/completions", {**body, "messages": list(messages)}
    return "/v1/completions", {**body, "prompt": prompt}


def classify_http_error(status: int, body: str) -> tuple[str, str]:
    """(reason, detail) for an error response; the detail is the server's own message."""
    detail = body.strip()
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        message = error.get("message") if isinstance(error, dict) else parsed.get("message") or error
        if message:
            detail = str(message)
    if 400 <= status < 500 and any(hint in detail.lower() for hint in CONTEXT_TOO_LONG_HINTS):
        return "context_too_long", detail[:500]
    return f"http_{status}", detail[:500] or f"HTTP {status} with an empty body"


def _text_of(chunk: dict) -> str:
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "text" in choice:
        return choice.get("text") or ""
    return (choice.get("delta") or {}).get("content") or ""


async def _read_stream(response: aiohttp.ClientResponse, record: RequestRecord) -> None:
    last_chunk_s: float | None = None
    text_chunks = 0
    usage: dict | None = None
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        chunk = json.loads(payload)
        if "error" in chunk:
            record.error, record.error_detail = "stream_error", str(chunk["error"])[:500]
            return
        now = time.perf_counter()
        if _text_of(chunk):
            if last_chunk_s is None:
                record.ttft_s = now - record.start_s
            else:
                record.chunk_gaps_s.append(now - last_chunk_s)
            last_chunk_s = now
            text_chunks += 1
        if chunk.get("usage"):
            usage = chunk["usage"]
    record.output_tokens = text_chunks
    if usage:
        record.output_tokens = int(usage.get("completion_tokens") or text_chunks)
        record.prompt_tokens = int(usage.get("prompt_tokens") or record.prompt_tokens)
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            record.cached_tokens = int(details["cached_tokens"])
    if record.ttft_s is None:
        record.error, record.error_detail = "empty_response", "the stream ended without any output text"


async def send_request(http: aiohttp.ClientSession, endpoint: Endpoint, record: RequestRecord,
                       prompt: list[int] | None, messages: tuple[dict, ...] | None, max_tokens: int) -> RequestRecord:
    """Send one streaming request and fill ``record`` (timings, tokens, or the error)."""
    path, body = request_body(endpoint, prompt, messages, max_tokens)
    record.start_s = time.perf_counter()
    try:
        async with http.post(endpoint.url(path), json=body, headers=endpoint.headers(),
                             timeout=aiohttp.ClientTimeout(total=endpoint.timeout_s)) as response:
            if response.status >= 400:
                record.error, record.error_detail = classify_http_error(response.status, await response.text())
            else:
                await _read_stream(response, record)
    except aiohttp.ClientConnectorError as exc:
        record.error, record.error_detail = "unreachable", f"{endpoint.base_url}: {exc.strerror or exc}"
    except TimeoutError:
        record.error, record.error_detail = "timeout", f"no complete answer within {endpoint.timeout_s:g} s"
    except (aiohttp.ClientError, ValueError) as exc:
        record.error, record.error_detail = "stream_error", f"{type(exc).__name__}: {exc}"[:500]
    record.end_s = time.perf_counter()
    return record


async def discover_model(http: aiohttp.ClientSession, base_url: str) -> tuple[str, int | None]:
    """(model id, max_model_len or None) of the first model the server lists."""
    async with http.get(base_url.rstrip("/") + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)) as response:
        response.raise_for_status()
        data = (await response.json()).get("data") or []
    if not data:
        raise RuntimeError(f"{base_url}/v1/models lists no model: pass --model")
    return str(data[0]["id"]), data[0].get("max_model_len")


#: one Prometheus label pair: ``name="value"`` (values may hold escaped quotes)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus_samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(metric name, labels, value) of every sample line of Prometheus text; NaN and junk skipped."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        name, _, labels = metric.partition("{")
        try:
            number = float(value)
        except ValueError:
            continue
        if not math.isnan(number):
            yield name.strip(), dict(_LABEL.findall(labels)), number


def counter_key(name: str, label: str, value: str) -> str:
    """The key of one label value of a counter split by ``label``, e.g. ``x{source="disk"}``."""
    return f'{name}{{{label}="{value}"}}'


def parse_prometheus_counters(text: str, names: tuple[str, ...],
                              split_by: dict[str, str] | None = None) -> dict[str, float]:
    """Sum each named counter over its labels (``name_total`` counts as ``name``).

    A counter named in ``split_by`` is also summed per value of that label, under
    :func:`counter_key` (vLLM's ``prompt_tokens_cached_by_source`` is split by ``source``).
    """
    split_by = split_by or {}
    totals: dict[str, float] = {}
    for metric, labels, number in parse_prometheus_samples(text):
        base = metric.removesuffix("_total")
        if base in names:
            totals[base] = totals.get(base, 0.0) + number
        if base in split_by and split_by[base] in labels:
            key = counter_key(base, split_by[base], labels[split_by[base]])
            totals[key] = totals.get(key, 0.0) + number
    return totals


async def scrape_counters(http: aiohttp.ClientSession, base_url: str, names: tuple[str, ...],
                          split_by: dict[str, str] | None = None) -> dict[str, float]:
    """The server's Prometheus counters, or {} when it exposes none (not every server does)."""
    try:
        async with http.get(base_url.rstrip("/") + "/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
            if response.status != 200:
                return {}
            return parse_prometheus_counters(await response.text(), names, split_by)
    except (aiohttp.ClientError, TimeoutError):
        return {}
