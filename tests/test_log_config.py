"""LogConfig: Kafka's topic config names, defaults and validation; broker-level defaults."""

from __future__ import annotations

import contextlib
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.errors import InvalidConfigError
from kafkalite.storage.log_config import CONFIG_DEFS, LONG_MAX, LogConfig

REFERENCE_DEFAULTS = {
    "segment.bytes": "1073741824", "segment.ms": "604800000", "segment.jitter.ms": "0",
    "segment.index.bytes": "10485760", "index.interval.bytes": "4096", "retention.ms": "604800000",
    "retention.bytes": "-1", "cleanup.policy": "delete", "min.cleanable.dirty.ratio": "0.5",
    "delete.retention.ms": "86400000", "min.compaction.lag.ms": "0", "max.compaction.lag.ms": str(LONG_MAX),
    "file.delete.delay.ms": "60000", "flush.messages": str(LONG_MAX), "flush.ms": str(LONG_MAX),
    "max.message.bytes": "1048588", "message.timestamp.type": "CreateTime", "preallocate": "false",
    "compression.type": "producer", "min.insync.replicas": "1",
}


def test_defaults_match_kafka():
    props = LogConfig().to_props()
    for k, v in REFERENCE_DEFAULTS.items():
        assert props[k] == v, k


def test_parse_strings_and_values():
    cfg = LogConfig.from_props({"segment.bytes": "1048576", "preallocate": "TRUE", "cleanup.policy": "Compact, delete",
                                "min.cleanable.dirty.ratio": 0.1, "message.timestamp.type": "LogAppendTime"})
    assert cfg.segment_bytes == 1048576 and cfg.preallocate
    assert cfg.compact and cfg.delete and cfg.min_cleanable_dirty_ratio == 0.1
    assert LogConfig.from_props(cfg.to_props()) == cfg


@pytest.mark.parametrize("key,ok,bad", [
    ("segment.bytes", 14, 13), ("segment.ms", 1, 0), ("segment.index.bytes", 4, 3), ("retention.ms", -1, -2),
    ("min.cleanable.dirty.ratio", 1, 1.01), ("flush.messages", 1, 0), ("max.compaction.lag.ms", 1, 0),
    ("index.interval.bytes", 0, -1), ("min.insync.replicas", 1, 0),
])
def test_range_boundaries(key, ok, bad):
    LogConfig.from_props({key: ok})
    with pytest.raises(InvalidConfigError, match=key):
        LogConfig.from_props({key: bad})


def test_clear_errors():
    expected = "Invalid value 10 for configuration segment.bytes: Value must be between 14 and 2147483647"
    with pytest.raises(InvalidConfigError, match=re.escape(expected)):
        LogConfig.from_props({"segment.bytes": 10})
    with pytest.raises(InvalidConfigError, match=re.escape("Unknown topic config name: segmnt.bytes")):
        LogConfig.from_props({"segmnt.bytes": 10})
    with pytest.raises(InvalidConfigError, match=re.escape("cleanup.policy")):
        LogConfig.from_props({"cleanup.policy": "shred"})
    with pytest.raises(InvalidConfigError, match=re.escape("message.timestamp.type")):
        LogConfig.from_props({"message.timestamp.type": "WallTime"})
    with pytest.raises(InvalidConfigError, match="preallocate"):
        LogConfig.from_props({"preallocate": "yes"})
    assert LogConfig.from_props({"bogus": 1}, ignore_unknown=True) == LogConfig()


def test_broker_defaults_and_precedence():
    cfg = LogConfig.from_broker_props({"log.segment.bytes": "2048", "log.retention.hours": "1",
                                       "log.retention.minutes": "2", "log.roll.hours": "3", "message.max.bytes": 5000,
                                       "log.cleanup.policy": "compact", "num.partitions": "3"})
    assert cfg.segment_bytes == 2048 and cfg.retention_ms == 2 * 60_000 and cfg.segment_ms == 3 * 3_600_000
    assert cfg.max_message_bytes == 5000 and cfg.compact
    assert LogConfig.from_broker_props({"log.retention.ms": 5, "log.retention.hours": 1}).retention_ms == 5
    assert LogConfig.from_broker_props({"log.retention.hours": -1}).retention_ms == -1


def test_derived_values():
    cfg = LogConfig.from_props({"cleanup.policy": "compact", "max.compaction.lag.ms": 1000, "segment.ms": 5000})
    assert cfg.max_segment_ms == 1000
    assert LogConfig.from_props({"segment.ms": 5000}).max_segment_ms == 5000
    jit = LogConfig.from_props({"segment.jitter.ms": 100, "segment.ms": 50})
    rng = random.Random(1)
    assert all(0 <= jit.random_segment_jitter(rng) < 50 for _ in range(200))
    assert LogConfig().random_segment_jitter(rng) == 0


@given(st.sampled_from([d.name for d in CONFIG_DEFS]), st.text(max_size=30))
def test_arbitrary_strings_only_raise_invalid_config(key, value):
    with contextlib.suppress(InvalidConfigError):
        LogConfig.from_props({key: value})
