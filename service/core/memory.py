"""The in-process level of the embedding cache: an LRU bounded by bytes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from xla_costmodel.runner import Embedding

# Dict, key and array headers: a rough per-entry cost on top of the array data.
ENTRY_OVERHEAD = 512


def embedding_nbytes(embedding: Embedding) -> int:
    return ENTRY_OVERHEAD + sum(a.nbytes for a in embedding.values())


class MemoryLRU:
    """Least-recently-used embeddings, at most ``max_bytes`` in all.

    Used from the event loop only, so it needs no lock. An entry larger than the
    whole budget is not kept.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[Hashable, tuple[Embedding, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Embedding | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: Hashable, embedding: Embedding) -> None:
        size = embedding_nbytes(embedding)
        self.discard(key)
        if size > self.max_bytes:
            return
        self._entries[key] = (embedding, size)
        self.nbytes += size
        while self.nbytes > self.max_bytes:
            _, (_, evicted) = self._entries.popitem(last=False)
            self.nbytes -= evicted

    def discard(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.nbytes -= entry[1]
