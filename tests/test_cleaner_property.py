"""Property: whatever the appends, rolls, cleanings (with maps of any size) and passing time, reading
the log gives every key its latest value, at its original offset and in offset order, every record
left is one that was written there, and tombstones are gone once a cleaning passes their horizon."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.cleaner.config import CleanerConfig
from kafkalite.cleaner.log_cleaner import LogCleaner
from kafkalite.records import CompressionType, SimpleRecord, build_batch
from kafkalite.storage.log import Log
from tests.support.logs import Env

RETENTION = 1000
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 600, "delete.retention.ms": RETENTION,
          "min.cleanable.dirty.ratio": 0.01}

records = st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.integers(0, 3)), min_size=1, max_size=6)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), records, st.sampled_from([CompressionType.NONE, CompressionType.GZIP])),
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean"), st.sampled_from([3, 8, 64, 4096])),
        st.tuples(st.just("sleep"), st.integers(0, 2 * RETENTION)),
    ),
    max_size=30,
)


def _append(lg: Log, env: Env, recs, codec, written: dict[int, tuple[bytes, bytes | None]]) -> None:
    now = env.clock.milliseconds()
    simple = [SimpleRecord(b"k%d" % k, None if dead else b"v%d-%d" % (k, lg.log_end_offset + i), now + dt)
              for i, (k, dead, dt) in enumerate(recs)]
    info = lg.append_as_leader(build_batch(simple, compression=codec))
    for i, r in enumerate(simple):
        written[info.first_offset + i] = (r.key, r.value)
    lg.update_high_watermark(lg.log_end_offset)


def _clean(lg: Log, env: Env, slots: int) -> None:
    cleaner = LogCleaner(CleanerConfig(dedupe_buffer_size=slots * 24, dedupe_buffer_load_factor=0.75),
                         [lg.dir.parent], {(lg.topic, lg.partition): lg}, clock=env.clock)
    cleaner.clean_now(lg.topic, lg.partition)


def _check(lg: Log, written: dict[int, tuple[bytes, bytes | None]]) -> list:
    got = [r for b in lg.batches() for r in b.records()]
    offs = [r.offset for r in got]
    assert offs == sorted(set(offs))
    for r in got:
        assert written[r.offset] == (r.key, r.value)
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for o in sorted(written):
        latest[written[o][0]] = (o, written[o][1])
    last_in_log = {r.key: (r.offset, r.value) for r in got}
    for key, (o, value) in latest.items():
        if value is not None:
            assert last_in_log.get(key) == (o, value)
        else:
            assert key not in last_in_log or last_in_log[key] == (o, None)
    return got


@pytest.mark.slow
@settings(max_examples=50)  # each example builds and cleans a real log several times
@given(ops)
def test_cleaning_keeps_the_latest_value_of_every_key(steps):
    root = Path(tempfile.mkdtemp(prefix="cleaner-prop-"))
    try:
        env = Env()
        lg = env.open(root / "prop-0", CONFIG)
        written: dict[int, tuple[bytes, bytes | None]] = {}
        for step in steps:
            if step[0] == "append":
                _append(lg, env, step[1], step[2], written)
            elif step[0] == "roll" and lg.active_segment.size:
                lg.roll()
            elif step[0] == "clean":
                _clean(lg, env, step[1])
            elif step[0] == "sleep":
                env.sleep(step[1])
            _check(lg, written)
        # two passes a horizon apart over a fully cleanable log: no tombstone may survive below the end
        lg.roll()
        _clean(lg, env, 4096)
        env.sleep(RETENTION + 1)
        _append(lg, env, [(99, False, 0)], CompressionType.NONE, written)
        lg.roll()
        _clean(lg, env, 4096)
        got = _check(lg, written)
        end = lg.active_segment.base_offset
        assert not [r for r in got if r.value is None and r.offset < end - 1]
        lg.close()
        reopened = Log(root / "prop-0", lg.config, clock=env.clock)
        assert [r.offset for b in reopened.batches() for r in b.records()] == [r.offset for r in got]
        reopened.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
