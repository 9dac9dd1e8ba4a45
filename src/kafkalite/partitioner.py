"""Java's default partitioner: which partition a keyed record goes to, so kafkalite's producer puts a key
where every Kafka client (Java, librdkafka's murmur2_random, kafka-python) puts it.

Kafka hashes the serialized key with murmur2 (seed 0x9747b28c), clears the sign bit (`Utils.toPositive`)
and takes the remainder by the partition count. Keyless records carry no such contract; callers spread
them (the producer CLI keeps each batch on one partition and moves on, as Kafka's sticky partitioner does).
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` of `data`, as a signed 32-bit int (what Java returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: the sign bit cleared (not abs(), which differs for negative numbers)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's default partitioner picks for a non-null serialized key."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
