"""A stateful property test: the Log against a list-of-records model, over random appends, rolls,
truncations, retention and clean or unclean reopens."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkalite.records import CompressionType, SimpleRecord, build_batch
from tests.support import T0
from tests.support.logs import Env, first_offset_read, records_in

PROPS = {"segment.bytes": 600, "index.interval.bytes": 150, "retention.bytes": 2000}


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="logmodel-"))
        self.env = Env()
        self.log = self.env.open(self.tmp / "model-0", PROPS)
        self.records: list[tuple[int, bytes, bytes]] = []  # (offset, key, value), everything ever kept
        self.batch_starts: list[int] = []
        self.n = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(count=st.integers(1, 5), codec=st.sampled_from(list(CompressionType)), size=st.integers(0, 80))
    def append(self, count, codec, size):
        recs = [SimpleRecord(b"k%d" % (self.n + i), b"v" * size + b"%d" % (self.n + i), T0 + self.n + i)
                for i in range(count)]
        leo = self.log.log_end_offset
        info = self.log.append_as_leader(build_batch(recs, compression=codec), leader_epoch=self.log.latest_epoch or 0)
        assert info.first_offset == leo
        self.batch_starts.append(info.first_offset)
        self.records += [(info.first_offset + i, r.key, r.value) for i, r in enumerate(recs)]
        self.n += count

    @rule(count=st.integers(1, 3), retry=st.booleans())
    def idempotent_append(self, count, retry):
        """An idempotent producer: sequences continue; a retry of its last batch returns the same offsets."""
        if retry and getattr(self, "last_idempotent", None) is not None:
            buf, first = self.last_idempotent
            info = self.log.append_as_leader(bytearray(buf))
            if info.duplicate:
                assert info.first_offset == first
                return
        seq = getattr(self, "seq", 0)
        recs = [SimpleRecord(b"p%d" % (seq + i), b"idem", T0) for i in range(count)]
        buf = build_batch(recs, producer_id=getattr(self, "pid", 7), producer_epoch=0, base_sequence=seq)
        info = self.log.append_as_leader(bytearray(buf))
        if info.duplicate:
            return
        self.seq = seq + count
        self.last_idempotent = (bytes(buf), info.first_offset)
        self.batch_starts.append(info.first_offset)
        self.records += [(info.first_offset + i, r.key, r.value) for i, r in enumerate(recs)]

    @rule(gap=st.integers(0, 3), count=st.integers(1, 3), epoch_bump=st.booleans())
    def follower_append(self, gap, count, epoch_bump):
        first = self.log.log_end_offset + gap
        epoch = (self.log.latest_epoch or 0) + (1 if epoch_bump else 0)
        recs = [SimpleRecord(b"f%d" % (first + i), b"fol", T0) for i in range(count)]
        self.log.append_as_follower(build_batch(recs, base_offset=first, partition_leader_epoch=epoch))
        self.batch_starts.append(first)
        self.records += [(first + i, r.key, r.value) for i, r in enumerate(recs)]

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: len(self.batch_starts) > 1)
    @rule(data=st.data())
    def truncate_at_batch(self, data):
        start = self.log.log_start_offset
        candidates = [b for b in self.batch_starts if b >= start]
        if not candidates:
            return
        target = data.draw(st.sampled_from(candidates))
        self.log.truncate_to(target)
        self.records = [r for r in self.records if r[0] < target]
        self.batch_starts = [b for b in self.batch_starts if b < target]
        assert self.log.log_end_offset == target
        # the log's producer state rolled back with the data; continue with a new producer id
        self.pid = getattr(self, "pid", 7) + 1
        self.seq = 0
        self.last_idempotent = None

    @rule()
    def retention(self):
        self.log.update_high_watermark(self.log.log_end_offset)
        self.log.delete_old_segments()

    @rule(clean=st.booleans())
    def reopen(self, clean):
        start = self.log.log_start_offset
        if clean:
            self.log.close()
            self.log = self.env.open(self.tmp / "model-0", PROPS, clean_shutdown=True,
                                     recovery_point=self.log.log_end_offset, log_start_offset=start)
        else:
            self.log.close(flush=False)
            self.log = self.env.open(self.tmp / "model-0", PROPS, recovery_point=0, log_start_offset=start)

    @invariant()
    def log_equals_model(self):
        start = self.log.log_start_offset
        expected = [r for r in self.records if r[0] >= start]
        got = [(r.offset, r.key, r.value) for r in records_in(self.log)]
        assert got == expected
        if expected:  # a truncation into an offset gap leaves the LEO above the last record, as in Kafka
            assert self.log.log_end_offset >= expected[-1][0] + 1
        for offset, _k, _v in expected[:: max(1, len(expected) // 5)]:
            first = first_offset_read(self.log, offset, 1)
            assert first is not None and first <= offset


LogModel.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestLogModel = LogModel.TestCase
TestLogModel.pytestmark = [pytest.mark.slow]  # a stateful property run of a few seconds
