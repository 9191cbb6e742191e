"""The most any tier of a given size could serve of the grid's sessions: Bélády's offline optimum.

Builds the sessions exactly as ``lifeboatcache grid`` does (same traces, ``--agents``,
``--rounds``, ``--scale``, ``--max-model-len``), cuts every prompt into engine-block chunks
hashed as a prefix chain (equal prefixes give equal chunks, as the engine's block hashes do),
orders the requests round by round (the agents run concurrently; within a round their order
varies from run to run), puts the engine's LRU prefix cache of ``--device-kv-blocks`` in front,
and replays the tier with ``lifeboatcache.sim.belady.replay_belady`` (it sees the future: the
upper bound for any eviction policy, ours and a fill-and-refuse tier alike). The share of
prompt tokens from cache (device + tier) is printed for the whole run and for the grid's last
third of rounds, for each tier size given in raw KV bytes (a codec's stored-to-raw ratio turns a
disk size into raw bytes: 0.5 GiB at the lossless codec's 0.68 holds 0.79 GB of raw KV).

    python optimum.py --capacity-gb 0.54,0.79,1.07 [--agents 16 --rounds 8 ...]
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from lifeboatcache.grid.setup import sessions_per_agent_count
from lifeboatcache.replay.report import last_rounds
from lifeboatcache.replay.sessions import Session, Spawn
from lifeboatcache.replay.sources import SourceChoice, token_map_for_scale
from lifeboatcache.sim.belady import replay_belady
from lifeboatcache.sim.engine import gpu_prefix_hits
from lifeboatcache.sim.workload import Workload


def chunk_chain(tokens: np.ndarray, chunk_tokens: int) -> list[int]:
    """One id per full chunk, each hashing the chunk and every chunk before it."""
    ids, digest = [], b""
    for start in range(0, len(tokens) - chunk_tokens + 1, chunk_tokens):
        digest = hashlib.blake2b(digest + tokens[start:start + chunk_tokens].tobytes(), digest_size=8).digest()
        ids.append(int.from_bytes(digest, "little") >> 2)  # fits int64 for the simulator's numpy stream
    return ids


def requests_of(session: Session) -> Iterator[tuple[int, np.ndarray]]:
    """(turn index, block ids) of every request of ``session`` and its sub-agents, in sending order."""
    index = session.first_turn
    for step in session.steps:
        if isinstance(step, Spawn):
            for child in step.sessions:
                yield from requests_of(child)
        else:
            yield index, step.block_ids
            index += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--traces", type=Path, default=Path("/work/shared/traces/kv-cache-tester"))
    p.add_argument("--agents", type=int, default=16)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--scale", type=float, default=0.0625)
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--device-kv-blocks", type=int, default=320)
    p.add_argument("--kv-bytes-per-token", type=int, default=23040,
                   help="SmolLM2-135M bf16: 30 layers x 2 x 3 x 64 x 2")
    p.add_argument("--capacity-gb", default="0.54,0.79,1.07", help="tier sizes in GB of raw KV, comma separated")
    a = p.parse_args()
    token_map = token_map_for_scale(a.scale)
    choice = SourceChoice("kvtrace", a.traces, a.agents, a.rounds)
    sessions = sessions_per_agent_count(choice, [a.agents], token_map, a.max_model_len, a.max_tokens)[0][a.agents]
    # each agent's requests in the order it sends them, each with the turn index the replay
    # records (a sub-agent's turns count from its own first turn, as the runner numbers them)
    sent = [list(requests_of(s)) for s in sessions]
    blocks, tokens, rounds = [], [], []
    for position in range(max(len(r) for r in sent)):
        for requests in sent:
            if position < len(requests):
                turn, block_ids = requests[position]
                prompt = np.asarray(token_map.tokens(block_ids))
                blocks.append(chunk_chain(prompt, a.block_size))
                tokens.append(len(prompt))
                rounds.append(turn)
    working_set = len({b for chain in blocks for b in chain})
    workload = Workload(blocks, tokens, [""] * len(blocks), [float(r) for r in rounds], a.block_size, working_set)
    gpu = gpu_prefix_hits(workload, a.device_kv_blocks)
    chunk_bytes = a.block_size * a.kv_bytes_per_token
    tail = set(last_rounds([SimpleNamespace(turn=r) for r in rounds]))  # the grid's own last third
    last = [r in tail for r in rounds]
    print(f"{len(blocks)} requests, {sum(tokens):,} prompt tokens, {working_set:,} distinct chunks "
          f"({working_set * chunk_bytes / 1e9:.2f} GB raw KV); last third = rounds {min(tail)}..{max(tail)}")
    for gb in [float(x) for x in a.capacity_gb.split(",")]:
        capacity = max(1, int(gb * 1e9 / chunk_bytes))
        tier = replay_belady(workload, gpu, capacity)
        served = [(g + t) * a.block_size for g, t in zip(gpu, tier, strict=True)]
        whole = sum(served) / sum(tokens)
        third = (sum(s for s, x in zip(served, last, strict=True) if x)
                 / sum(t for t, x in zip(tokens, last, strict=True) if x))
        print(f"tier of {gb:.2f} GB raw ({capacity:,} chunks): at most {100 * whole:.1f} % of the prompt tokens from "
              f"cache, {100 * third:.1f} % in the last third")


if __name__ == "__main__":
    main()
