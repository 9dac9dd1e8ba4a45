"""`Log.open_read_only`: reads a directory another process writes, without a lock and without changing a byte."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kafkalite.errors import LogError
from kafkalite.storage.dir_lock import LOCK_FILE
from kafkalite.storage.log import FetchIsolation, Log
from kafkalite.storage.log_config import LogConfig
from tests.support.batches import batch_at
from tests.support.brokers import BrokerProcess
from tests.support.clients import consume_values, create_topic, produce

pytest.importorskip("confluent_kafka")


def file_states(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and mtime: what a reader must leave exactly as it found."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_size, st.st_mtime_ns)
    return out


def settled_file_states(root: Path, quiet_s: float = 1.0, timeout_s: float = 20.0) -> dict[str, tuple[int, int]]:
    """`file_states` once the broker has stopped writing on its own: a roll's flush rewrites the leader-epoch
    checkpoint (synced after the first append of an epoch) a moment after the produce that caused it."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, tuple[int, int]] = {}
    since = time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, f"the broker kept writing under {root} for {timeout_s} s"
        time.sleep(0.1)
        try:
            now = file_states(root)
        except FileNotFoundError:  # a file renamed or removed between the listing and its stat: still writing
            now = {}
        if now != last:
            last, since = now, time.monotonic()
    return last


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # small segments and index interval: several segments, index entries, a preallocated active index; no
    # periodic checkpoint rewrites (HW every 5 s by default) while a test compares the files before and after
    hour = 3_600_000
    b = BrokerProcess(tmp_path_factory.mktemp("read-only") / "data",
                      {"num.partitions": 1, "log.segment.bytes": 128 * 1024, "log.index.interval.bytes": 512,
                       "replica.high.watermark.checkpoint.interval.ms": hour,
                       "log.flush.offset.checkpoint.interval.ms": hour,
                       "log.flush.start.offset.checkpoint.interval.ms": hour}).start()
    yield b
    rc = b.stop()
    assert rc == 0, b.output()


@pytest.mark.slow
def test_read_only_log_on_a_live_broker_reads_everything_and_changes_nothing(broker):
    topic = create_topic(broker)
    values = [b"value-%05d-" % i + b"x" * 200 for i in range(1000)]
    produce(broker, topic, values, {"batch.size": 16384})
    partition_dir = broker.data_dir / f"{topic}-0"
    active_index = sorted(partition_dir.glob("*.index"))[-1]
    assert active_index.stat().st_size == 10 * 1024 * 1024  # preallocated: the case to survive
    before = settled_file_states(broker.data_dir)
    lg = Log.open_read_only(partition_dir, LogConfig())
    try:
        assert lg.number_of_segments > 1
        assert lg.log_end_offset == 1000 and lg.high_watermark == 1000
        got = [r.value for b in lg.batches() for r in b.records()]
        assert got == values
        mid = lg.read(500, 1, min_one_message=True)  # an index lookup inside the active segment
        assert mid.tobytes()[:8] != b"" and lg.fetch_offset_by_timestamp(0).offset == 0
        with pytest.raises(LogError, match="read-only"):
            lg.append_as_leader(batch_at(0))
        with pytest.raises(LogError, match="read-only"):
            lg.read(0, 1000, FetchIsolation.TXN_COMMITTED)
    finally:
        lg.close()
    assert file_states(broker.data_dir) == before
    assert broker.proc.poll() is None, broker.output()
    produce(broker, topic, [b"after"])
    assert consume_values(broker, topic, 1001)[-1] == b"after"


def test_read_only_log_needs_no_lock_and_sees_a_preallocated_active_segment(tmp_path):
    config = LogConfig.from_props({"preallocate": "true", "segment.bytes": 1 << 20, "index.interval.bytes": 100})
    writer = Log(tmp_path / "t-0", config)
    try:
        for o in range(50):
            writer.append_as_leader(batch_at(0, ts=1000 + o, key=b"k%d" % o))
        assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == 1 << 20  # zeros at the tail
        before = file_states(tmp_path)
        reader = Log.open_read_only(tmp_path / "t-0")  # the writer holds the lock; a reader needs none
        try:
            assert reader.log_end_offset == 50
            assert [r.key for b in reader.batches() for r in b.records()] == [b"k%d" % o for o in range(50)]
            assert reader.fetch_offset_by_timestamp(1025).offset == 25
        finally:
            reader.close()
        assert file_states(tmp_path) == before
        writer.append_as_leader(batch_at(0, ts=2000, key=b"later"))
    finally:
        writer.close()
    assert (tmp_path / "t-0" / LOCK_FILE).exists()


def test_read_only_log_creates_nothing(tmp_path):
    with pytest.raises(LogError, match="no such directory"):
        Log.open_read_only(tmp_path / "missing-0")
    assert not (tmp_path / "missing-0").exists() and list(tmp_path.iterdir()) == []
