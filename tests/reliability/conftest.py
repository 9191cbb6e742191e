"""Reports what the power-loss suite tried (test_power_loss.py): crash points and what they found."""

from __future__ import annotations

import sys
from typing import Any


def pytest_terminal_summary(terminalreporter: Any) -> None:
    module = sys.modules.get("tests.reliability.test_power_loss")
    cuts = getattr(module, "CUTS", None)
    if not cuts:
        return
    total = sum(ledger.rounds for ledger in cuts.values())
    terminalreporter.write_sep("-", f"power loss: {total} crash points tried")
    for name, ledger in cuts.items():
        where = ", ".join(f"{op} {n}" for op, n in ledger.cut_at.most_common())
        terminalreporter.write_line(
            f"{name}: {ledger.rounds} cuts ({where}); {len(ledger.acked)} puts acknowledged, "
            f"{len(ledger.deleted)} evicted, {ledger.served} blocks served and compared, "
            f"{len(ledger.lost)} acknowledged blocks lost, {len(ledger.wrong)} wrong blocks served")
