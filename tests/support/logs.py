"""Builders for partition-log tests: a log on a mock clock and scheduler, and record helpers."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkalite.clock import MockClock
from kafkalite.records import RecordBatch, SimpleRecord, build_batch, iter_batches
from kafkalite.scheduler import MockScheduler
from kafkalite.storage import names
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig
from tests.support import T0


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


def write_foreign_partition(d, n_segments=4, batches_per_segment=10, per_batch=7):
    """Segments written by concatenating kafka-python batches, no index files: as copied from elsewhere."""
    d.mkdir(parents=True)
    now = int(time.time() * 1000)
    expected = []
    offset = 0
    for _s in range(n_segments):
        base = offset
        with open(names.log_file(d, base), "wb") as f:
            for b in range(batches_per_segment):
                builder = DefaultRecordBatchBuilder(magic=2, compression_type=b % 5, is_transactional=False,
                                                    producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                    batch_size=1 << 20)
                for i in range(per_batch):
                    k, v, ts = b"key-%d" % (offset + i), b"val-%d" % (offset + i) * 10, now + offset + i
                    h = [("trace", b"%d" % (offset + i))]
                    builder.append(i, timestamp=ts, key=k, value=v, headers=h)
                    expected.append((offset + i, k, v, ts, (("trace", b"%d" % (offset + i)),)))
                buf = bytearray(builder.build())
                struct.pack_into(">q", buf, 0, offset)
                struct.pack_into(">i", buf, 12, 3)  # partition leader epoch, as a broker stamps it
                f.write(buf)
                offset += per_batch
    return expected


