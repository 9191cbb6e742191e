"""Topic tags from text embeddings: online nearest-centroid clustering (EpiCache's episode clustering).

An adapter that has an embedding of a request's text (e.g. from the engine's own embedding
model, or a small sentence encoder it already runs) calls ``tag_for(vector)`` once per request
and puts the returned tag in every ``BlockHint`` of that request's blocks. Requests on one topic
then share an episode even when their prompts do not share a prefix (a user who reopens the same
task in a new session). Without embeddings the policy falls back to the prefix tree.

Cost: O(max_topics x dim) numpy work per request, nothing per block. Memory: ``max_topics``
centroids; the least recently matched topic is replaced when a new one is needed.
"""

from __future__ import annotations

import numpy as np


class EpisodeClusters:
    def __init__(self, dim: int, *, threshold: float = 0.8, max_topics: int = 256) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold {threshold} must be in (0, 1]: it is a cosine similarity")
        self.threshold = threshold
        self._centroids = np.zeros((max_topics, dim), dtype=np.float32)
        self._counts = np.zeros(max_topics, dtype=np.int64)
        self._last_used = np.zeros(max_topics, dtype=np.int64)
        self._ids = np.full(max_topics, -1, dtype=np.int64)
        self._next_id = 0
        self._tick = 0

    def tag_for(self, embedding: np.ndarray) -> str:
        """The topic tag of a request whose text embeds to ``embedding``."""
        v = np.asarray(embedding, dtype=np.float32).ravel()
        if v.shape[0] != self._centroids.shape[1]:
            raise ValueError(f"embedding has {v.shape[0]} dimensions, the clusters {self._centroids.shape[1]}")
        norm = float(np.linalg.norm(v))
        if norm == 0.0:
            raise ValueError("an all-zero embedding has no direction to cluster by")
        v = v / norm
        self._tick += 1
        used = self._ids >= 0
        if used.any():
            sims = np.where(used, self._centroids @ v, -np.inf)
            best = int(np.argmax(sims))
            if sims[best] >= self.threshold:
                n = self._counts[best]
                centroid = self._centroids[best] * n + v
                self._centroids[best] = centroid / max(float(np.linalg.norm(centroid)), 1e-12)
                self._counts[best] = n + 1
                self._last_used[best] = self._tick
                return f"topic-{self._ids[best]}"
        slot = int(np.argmin(np.where(used, self._last_used, -1)))
        self._centroids[slot] = v
        self._counts[slot] = 1
        self._last_used[slot] = self._tick
        self._ids[slot] = self._next_id
        self._next_id += 1
        return f"topic-{self._ids[slot]}"
