"""The cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap), bounded by memory like Kafka's.

Kafka sizes the map from `log.cleaner.dedupe.buffer.size`: each slot holds a 16-byte key hash and an
8-byte offset, so `slots = memory // 24`, and a cleaning pass stops adding keys at
`slots * load_factor`. We keep exactly that layout and bound: three numpy arrays of `slots` entries
(two 64-bit key hashes standing in for MD5's 16 bytes, and the offset), open addressing, nothing
allocated per key. So a configuration cleans the same amount of log per pass as in Kafka, and
memory stays at the configured buffer size whatever the key sizes.

The map is used in bulk: `put_many_until` and `get_many` take arrays of hashes and probe all of
them at once, one numpy step per probe round. A key's probe sequence is a few double-hashing steps
followed by linear probing, so every slot is eventually reached (the slot count is not prime).
"""

from __future__ import annotations

import numpy as np

from kafkalite.cleaner.vector import hash_key

HASH_SIZE = 16
ENTRY_SIZE = HASH_SIZE + 8
_DOUBLE_HASH_ROUNDS = 8


class OffsetMapFullError(Exception):
    """A put of a new key into a map with no free slot (Kafka's IllegalArgumentException)."""


class OffsetMap:
    def __init__(self, memory: int) -> None:
        if memory < ENTRY_SIZE:
            raise ValueError(f"an offset map needs at least {ENTRY_SIZE} bytes, got {memory}")
        self.memory = memory
        self.slots = memory // ENTRY_SIZE
        # One row of 24 bytes per slot (hash 1, hash 2, offset + 1; 0 = empty), so that a probe touches
        # one cache line. np.zeros maps untouched pages lazily: an idle map costs nothing until used.
        self._table = np.zeros((self.slots, 3), dtype=np.int64)
        self._h1 = self._table[:, 0].view(np.uint64)
        self._h2 = self._table[:, 1].view(np.uint64)
        self._off = self._table[:, 2]
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0

    @staticmethod
    def hash_key(key: bytes) -> tuple[int, int]:
        return hash_key(key)

    @property
    def utilization(self) -> float:
        return self.size / self.slots

    # --- probing ----------------------------------------------------------------------------------

    def _start(self, h1: np.ndarray, h2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = np.uint64(self.slots)
        step = (h2 % np.uint64(max(self.slots - 1, 1))).astype(np.int64) + 1
        return (h1 % s).astype(np.int64), step

    def _locate(self, h1: np.ndarray, h2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each key: (its slot, True, its stored offset + 1), or (the first empty slot of its probe
        sequence, False, 0). A key absent from a completely full map gets slot -1.
        """
        n = len(h1)
        slot = np.full(n, -1, dtype=np.int64)
        found = np.zeros(n, dtype=bool)
        stored = np.zeros(n, dtype=np.int64)
        pos, step = self._start(h1, h2)
        todo = np.arange(n)
        a1, a2 = h1, h2
        attempt = 0
        table = self._table
        while len(todo):
            rows = np.take(table, pos, axis=0)
            occupied = rows[:, 2] != 0
            match = occupied & (rows[:, 0].view(np.uint64) == a1) & (rows[:, 1].view(np.uint64) == a2)
            done = match | ~occupied
            if done.any():
                at = todo[done]
                slot[at] = pos[done]
                found[at] = match[done]
                stored[at] = rows[done, 2]
                left = ~done
                todo, pos, step, a1, a2 = todo[left], pos[left], step[left], a1[left], a2[left]
            attempt += 1
            if attempt > self.slots + _DOUBLE_HASH_ROUNDS:
                break
            pos = (pos + (step if attempt < _DOUBLE_HASH_ROUNDS else 1)) % self.slots
        return slot, found, stored

    def _insert(self, h1: np.ndarray, h2: np.ndarray, stored: np.ndarray) -> None:
        """Insert distinct keys known to be absent; several may race for one empty slot per round.

        A round claims empty slots by writing each contender's (negative) index into them and reading
        back: whichever write landed owns the slot, the others probe on. No sort, no scratch memory.
        """
        pos, step = self._start(h1, h2)
        attempt = 0
        off = self._off
        while len(h1):
            free = np.flatnonzero(off[pos] == 0)
            if len(free):
                at = pos[free]
                off[at] = -1 - free
                won = free[off[at] == -1 - free]
                at = pos[won]
                self._h1[at] = h1[won]
                self._h2[at] = h2[won]
                off[at] = stored[won]
                left = np.ones(len(h1), dtype=bool)
                left[won] = False
                h1, h2, stored, pos, step = h1[left], h2[left], stored[left], pos[left], step[left]
            attempt += 1
            pos = (pos + (step if attempt < _DOUBLE_HASH_ROUNDS else 1)) % self.slots

    # --- bulk operations ----------------------------------------------------------------------------

    def put_many_until(self, h1: np.ndarray, h2: np.ndarray, offsets: np.ndarray, limit: int) -> int:
        """Put keys in order while the map holds fewer than `limit` keys before each put.

        This is the cleaner's loop "if map.size < maxDesiredMapSize put, else stop", exactly: the
        check happens before every put, for new and known keys alike. Returns how many were put.
        """
        n = len(h1)
        limit = min(limit, self.slots)
        if n == 0 or self.size >= limit:
            return 0
        order = np.argsort(h1)
        s1, s2 = h1[order], h2[order]
        same1 = s1[1:] == s1[:-1]
        if (same1 & (s2[1:] != s2[:-1])).any():  # two keys share h1 (rare): sort by both hashes
            order = np.lexsort((h2, h1))
            s1, s2 = h1[order], h2[order]
            same1 = (s1[1:] == s1[:-1]) & (s2[1:] == s2[:-1])
        starts_group = np.ones(n, dtype=bool)
        starts_group[1:] = ~same1
        group_starts = np.flatnonzero(starts_group)
        first_idx = np.minimum.reduceat(order, group_starts)
        last_idx = np.maximum.reduceat(order, group_starts)
        u1, u2 = s1[group_starts], s2[group_starts]
        slot, found, _ = self._locate(u1, u2)
        if self.size + int((~found).sum()) > limit - 1:
            is_new = np.zeros(n, dtype=np.int64)
            is_new[first_idx[~found]] = 1
            size_before = self.size + np.cumsum(is_new) - is_new
            over = np.flatnonzero(size_before >= limit)
            if len(over):
                stop = int(over[0])
                return self.put_many_until(h1[:stop], h2[:stop], offsets[:stop], limit) if stop else 0
        stored = offsets[last_idx] + 1
        self._off[slot[found]] = stored[found]
        new = ~found
        self._insert(u1[new], u2[new], stored[new])
        self.size += int(new.sum())
        self.latest_offset = int(offsets[-1])
        return n

    def get_many(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """The latest offset of each key, -1 where absent."""
        self.lookups += len(h1)
        if not len(h1):
            return np.zeros(0, dtype=np.int64)
        _, _, stored = self._locate(h1, h2)
        return stored - 1

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    # --- single keys (Kafka's OffsetMap interface) ---------------------------------------------------

    def put(self, key: bytes, offset: int) -> None:
        a, b = hash_key(key)
        h1, h2 = np.array([a], dtype=np.uint64), np.array([b], dtype=np.uint64)
        slot, found, _ = self._locate(h1, h2)
        if found[0]:
            self._off[slot[0]] = offset + 1
        elif self.size >= self.slots:
            raise OffsetMapFullError(f"attempt to add a new entry to a full offset map ({self.slots} slots)")
        else:
            self._insert(h1, h2, np.array([offset + 1], dtype=np.int64))
            self.size += 1
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset put for this key, or -1."""
        a, b = hash_key(key)
        return int(self.get_many(np.array([a], dtype=np.uint64), np.array([b], dtype=np.uint64))[0])

    def clear(self) -> None:
        if self.size:  # a map never written keeps its lazily mapped zero pages untouched
            self._table.fill(0)
        self.size = 0
        self.latest_offset = -1
        self.lookups = 0
