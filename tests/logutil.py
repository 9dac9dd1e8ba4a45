"""Builders for partition-log tests: a log on a mock clock and scheduler, and record helpers."""

from __future__ import annotations

from pathlib import Path

from kafkalite.clock import MockClock
from kafkalite.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from kafkalite.scheduler import MockScheduler
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig
from tests.conftest import T0


class Env:
    """A clock and scheduler shared by the logs of one test (Kafka's MockTime + MockScheduler)."""

    def __init__(self, start_ms: int = T0) -> None:
        self.clock = MockClock(start_ms)
        self.scheduler = MockScheduler(self.clock)

    def sleep(self, ms: int) -> None:
        self.scheduler.advance(ms)

    def open(self, directory: Path, props: dict | None = None, **kw) -> Log:
        return Log(directory, LogConfig.from_props(props or {}), clock=self.clock, scheduler=self.scheduler, **kw)


def single(value: bytes = b"test", key: bytes | None = None, ts: int = -1, **kw) -> bytearray:
    return build_batch([SimpleRecord(key, value, ts)], **kw)


def records_in(the_log: Log) -> list:
    return [r for b in the_log.batches() for r in b.records()]


def first_offset_read(the_log: Log, offset: int, max_bytes: int = 100, **kw) -> int | None:
    data = the_log.read(offset, max_bytes, **kw).tobytes()
    for b in iter_batches(data):
        return b.base_offset
    return None


def batch_last_offsets(the_log: Log) -> list[int]:
    return [b.last_offset for b in the_log.batches()]


def segment_bases(the_log: Log) -> list[int]:
    return list(the_log.segments.keys())


def as_batch(buf: bytearray) -> RecordBatch:
    return RecordBatch(buf)
