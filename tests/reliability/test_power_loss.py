"""Power loss on a real FUSE mount: what a tier promises after the power is cut at random points.

``powercut_fs`` (mfusepy over libfuse3) keeps what was not made durable by fsync/fdatasync
(a file's bytes) or an fsync of a directory (its entries) in memory only, and a cut loses it
(half the mounts also keep a random part of it: torn pages, some directory changes). Each
round restarts the file tier (with its SQLite manifest) on the remounted filesystem, checks
it, and cuts the power at a random mutating operation of a write/read/evict/manifest-flush
workload; see ``powercut.py``.

- ``durability = "fsync"``: every acknowledged block that was not evicted is served
  byte-exact after every later cut;
- ``durability = "none"``: a block is never served torn or wrong, the tier opens and its
  manifest's rows match its index again;
- negative controls: a file backend that skips the directory fsync after a block's rename,
  or the fsync of a new shard folder's parent, is caught losing acknowledged blocks.

The crash points tried and what they found are printed at the end of the run (``tests/summary.py``).
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.reliability.powercut import Ledger, PowerCutRig
from tests.summary import add_summary_line

ROUNDS = {"fsync": 550, "none": 450}
#: about the mutating operations of a round without a cut (grows when a round needs more)
FIRST_MAX_OPS = 150


@pytest.fixture
def rig_factory(tmp_path: Path) -> Iterator[Callable[..., PowerCutRig]]:
    assert shutil.which("fusermount3"), "fuse3 is a test requirement (.ci/setup.d/20-fuse.sh installs it)"
    rigs: list[PowerCutRig] = []

    def make(durability: str, *, torn: bool = True, variant: str = "") -> PowerCutRig:
        rig = PowerCutRig(tmp_path / f"{durability}-{variant or 'plain'}", durability=durability, torn=torn,
                          variant=variant)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()


def _report(request: pytest.FixtureRequest, name: str, ledger: Ledger) -> None:
    """The tally at the end of the run (called before the asserts: a failing run is reported too)."""
    add_summary_line(request, "power loss: crash points tried and what they found", f"{name}: {ledger.summary()}")


def _run(rig: PowerCutRig, rounds: int, seed: int, *, stop_at_first_loss: bool = False) -> Ledger:
    rng = random.Random(seed)
    for r in range(rounds):
        rig.round(r, rng, max(FIRST_MAX_OPS, rig.full_round_ops))
        if stop_at_first_loss and rig.ledger.lost:
            break
    rig.final_check(rounds)
    return rig.ledger


def test_fsync_keeps_every_acknowledged_block_across_power_cuts(rig_factory: Callable[..., PowerCutRig],
                                                                request: pytest.FixtureRequest) -> None:
    ledger = _run(rig_factory("fsync"), ROUNDS["fsync"], seed=19, stop_at_first_loss=True)
    _report(request, "fsync", ledger)
    assert not ledger.lost, f"{len(ledger.lost)} acknowledged blocks lost, e.g. {sorted(ledger.lost)[:5]}"
    assert ledger.checked == ledger.rounds + 1, f"some restarts did not finish their check: {ledger.problems[:3]}"
    assert not ledger.wrong, ledger.wrong[:5]
    assert not ledger.problems, ledger.problems[:5]
    # the workload must have reached its evictions and cuts everywhere for this to mean anything
    assert len(ledger.acked) > ROUNDS["fsync"] and ledger.deleted and len(ledger.cut_at) >= 6


def test_none_never_serves_a_torn_block_and_recovers(rig_factory: Callable[..., PowerCutRig],
                                                      request: pytest.FixtureRequest) -> None:
    ledger = _run(rig_factory("none"), ROUNDS["none"], seed=20)
    _report(request, "none", ledger)
    assert ledger.checked == ledger.rounds + 1, f"some restarts did not finish their check: {ledger.problems[:3]}"
    assert not ledger.wrong, ledger.wrong[:5]
    assert not ledger.problems, ledger.problems[:5]
    assert ledger.served > ROUNDS["none"], "blocks must survive some cuts (torn mounts) for the check to bite"


@pytest.mark.parametrize("variant", ["no-dir-fsync", "no-new-dir-fsync"])
def test_negative_control_a_skipped_directory_fsync_is_caught(rig_factory: Callable[..., PowerCutRig],
                                                              variant: str, request: pytest.FixtureRequest) -> None:
    """The suite can fail: a backend that acknowledges before the names are durable loses blocks."""
    ledger = _run(rig_factory("fsync", torn=False, variant=variant), 100, seed=21, stop_at_first_loss=True)
    _report(request, f"control {variant}", ledger)
    assert ledger.lost, f"{ledger.rounds} power cuts did not catch a backend with {variant}"
