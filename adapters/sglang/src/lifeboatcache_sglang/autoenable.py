"""``LIFEBOAT_CACHE=1 python -m sglang.launch_server ...``: add the HiCache storage flags.

Registered as an ``sglang.srt.plugins`` entry point. SGLang's ``launch_server`` calls its
general plugins before it parses ``sys.argv``, and hands no config object to plugins, so the
plugin edits ``sys.argv`` of that one process: it adds ``--enable-hierarchical-cache
--hicache-storage-backend dynamic --hicache-storage-backend-extra-config <ours>`` (and
``--page-size 64`` when no page size is given: a storage object per token is far too small).
An explicit ``--hicache-storage-backend`` always wins. Without the variable, or in any other
process (schedulers, detokenizer, ``sglang.Engine`` in a script), it does nothing: there, pass
the flags shown by ``lifeboatcache_sglang.settings.launch_flags()``.
"""

from __future__ import annotations

import logging
import os
import sys

from lifeboatcache_sglang.settings import launch_flags

log = logging.getLogger("lifeboatcache.sglang")

ENV_ENABLE = "LIFEBOAT_CACHE"
DEFAULT_PAGE_SIZE = "64"


def _given(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def rewrite_argv(argv: list[str]) -> list[str]:
    """``argv`` (without the program name) with our flags added unless the user chose a backend."""
    if _given(argv, "--hicache-storage-backend"):
        log.warning("lifeboatcache: LIFEBOAT_CACHE=1 but --hicache-storage-backend is given; using it "
                    "unchanged (lifeboatcache stays out)")
        return argv
    out = list(argv)
    flags = launch_flags()
    if _given(out, "--enable-hierarchical-cache"):
        flags = flags[1:]
    out += flags
    if not _given(out, "--page-size"):
        out += ["--page-size", DEFAULT_PAGE_SIZE]
    return out


def _is_launch_server() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", "") == "sglang.launch_server" or (
        bool(sys.argv) and sys.argv[0].endswith(os.path.join("sglang", "launch_server.py"))
    )


def load() -> None:
    """SGLang general-plugin entry point."""
    if os.environ.get(ENV_ENABLE, "") not in ("1", "true", "yes") or not _is_launch_server():
        return
    given = sys.argv[1:]
    new = rewrite_argv(given)
    if new != given:
        sys.argv[1:] = new
        log.warning("lifeboatcache: LIFEBOAT_CACHE=1: added %s", " ".join(new[len(given):]))
