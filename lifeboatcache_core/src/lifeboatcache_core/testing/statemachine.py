"""A hypothesis state machine that checks any Backend against a plain dict model (zarr style)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from lifeboatcache_core.abc import Backend
from lifeboatcache_core.chunkfile import BlockMeta
from lifeboatcache_core.keys import BlockKey

_keys = st.builds(
    BlockKey,
    st.sampled_from(["ns0", "ns1"]),
    st.sampled_from([bytes([i]) * 32 for i in range(6)]),
)
_data = st.binary(min_size=0, max_size=4096)


def backend_state_machine(factory: Callable[[Path], Backend], *, max_examples: int = 30,
                          stateful_step_count: int = 25) -> type[RuleBasedStateMachine]:
    """Build a state machine class for ``factory(tmp_dir) -> Backend``.

    Use in a test module as ``TestMyBackendModel = backend_state_machine(factory).TestCase``.
    """

    class BackendModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.dir = Path(tempfile.mkdtemp(prefix="lbc-sm-"))
            self.backend = factory(self.dir)
            self.model: dict[BlockKey, bytes] = {}

        @rule(k=_keys, data=_data)
        def put(self, k: BlockKey, data: bytes) -> None:
            self.backend.put(k, [data], BlockMeta.new(k, len(data)))
            self.model[k] = data

        @rule(k=_keys)
        def read(self, k: BlockKey) -> None:
            if k in self.model:
                assert bytes(self.backend.read(k)[1]) == self.model[k]
            else:
                try:
                    self.backend.read(k)
                except KeyError:
                    return
                raise AssertionError(f"read of absent {k} returned data")

        @rule(k=_keys)
        def read_into(self, k: BlockKey) -> None:
            if k in self.model:
                dest = memoryview(bytearray(len(self.model[k])))
                assert bytes(self.backend.read(k, dest)[1]) == self.model[k]

        @rule(k=_keys)
        def delete(self, k: BlockKey) -> None:
            freed = self.backend.delete(k)
            if k not in self.model:
                assert freed == 0, "deleting an absent key freed bytes"
            self.model.pop(k, None)

        @rule()
        def reopen(self) -> None:
            if self.backend.persistent:
                self.backend.close()
                self.backend = factory(self.dir)

        @invariant()
        def exists_matches(self) -> None:
            for k in self.model:
                assert self.backend.exists(k)

        @invariant()
        def scan_matches(self) -> None:
            assert {k for k, _ in self.backend.scan()} == set(self.model)

        def teardown(self) -> None:
            self.backend.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    BackendModel.TestCase.settings = settings(
        max_examples=max_examples, stateful_step_count=stateful_step_count, deadline=None
    )
    return BackendModel
