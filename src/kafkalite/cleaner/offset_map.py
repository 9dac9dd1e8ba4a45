"""The cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap), bounded by memory like Kafka's.

Kafka sizes the map from `log.cleaner.dedupe.buffer.size`: each slot holds a 16-byte key hash and an
8-byte offset, so `slots = memory // 24`, and a cleaning pass stops adding keys at
`slots * load_factor`. We keep exactly that bound on the number of entries, so a configuration
cleans the same amount of log per pass as in Kafka. Keys are hashed to 16 bytes (MD5, as Kafka) so
memory per entry does not grow with key size; a Python dict holds them.
"""

from __future__ import annotations

import hashlib

HASH_SIZE = 16
ENTRY_SIZE = HASH_SIZE + 8


class OffsetMapFullError(Exception):
    """A put of a new key into a map with no free slot (Kafka's IllegalArgumentException)."""


class OffsetMap:
    def __init__(self, memory: int) -> None:
        if memory < ENTRY_SIZE:
            raise ValueError(f"an offset map needs at least {ENTRY_SIZE} bytes, got {memory}")
        self.memory = memory
        self.slots = memory // ENTRY_SIZE
        self._map: dict[bytes, int] = {}
        self.latest_offset = -1
        self.lookups = 0

    @staticmethod
    def hash_key(key: bytes) -> bytes:
        return hashlib.md5(key, usedforsecurity=False).digest()

    @property
    def size(self) -> int:
        return len(self._map)

    @property
    def utilization(self) -> float:
        return len(self._map) / self.slots

    def put(self, key: bytes, offset: int) -> None:
        digest = self.hash_key(key)
        if digest not in self._map and len(self._map) >= self.slots:
            raise OffsetMapFullError(f"attempt to add a new entry to a full offset map ({self.slots} slots)")
        self._map[digest] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset put for this key, or -1."""
        self.lookups += 1
        return self._map.get(self.hash_key(key), -1)

    def clear(self) -> None:
        self._map.clear()
        self.latest_offset = -1
        self.lookups = 0
