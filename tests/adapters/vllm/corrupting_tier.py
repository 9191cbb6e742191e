"""Negative control for the engine tests: a LifeboatTier that scribbles over every chunk it loads.

If the engine tests compared outputs in a way that could not notice wrong KV, the run with
this tier would pass them too; it must not.
"""

from __future__ import annotations

from collections.abc import Iterable

from lifeboatcache_vllm.tier import LifeboatTier
from vllm.v1.kv_offload.tiering.base import JobResult, TransferJob


class CorruptingLifeboatTier(LifeboatTier):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self._load_chunks: dict[int, list[int]] = {}

    def submit_load(self, job_metadata: TransferJob) -> None:
        self._load_chunks[job_metadata.job_id] = [int(c) for c in job_metadata.chunk_ids]
        super().submit_load(job_metadata)

    def get_finished_jobs(self) -> Iterable[JobResult]:
        results = list(super().get_finished_jobs())
        for result in results:
            for chunk in self._load_chunks.pop(result.job_id, []):
                self._primary_rows[chunk, : self._payload_bytes : 7] = 0x7E  # large finite values
        return results
