"""The embedded backend without Spark: what is safely readable, read-only access, and the sink's commit.

Data is written the way users write it (LogManager, Log), in Kafka's exact layout, and read back
through the same functions Spark's tasks call.
"""

from __future__ import annotations

import gc
import hashlib
import os
import random
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")

from kafkalite.manager.log_manager import LogManager
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.records.compression import CompressionType
from kafkalite.spark.arrow_encode import build_batches
from kafkalite.spark.backend import OffsetBounds
from kafkalite.spark.embedded import EmbeddedSource, writer_is_live
from kafkalite.spark.embedded_sink import STATE_PREFIX, EmbeddedSink, sink_id_for
from kafkalite.spark.errors import DataLossError, OptionError, SinkError, UnknownTopicError
from kafkalite.spark.reading import OffsetRange, read_range
from kafkalite.spark.specs import EmbeddedSpec
from kafkalite.storage.checkpoint import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig
from tests.support import T0

SMALL = LogConfig.from_props({"segment.bytes": 4096})


def records(n: int, start: int = 0, size: int = 100) -> list[SimpleRecord]:
    """Incompressible values, so compressed segments fill up too."""
    return [SimpleRecord(b"k%d" % i, b"v%d-" % i + random.Random(i).randbytes(size), T0 + i)
            for i in range(start, start + n)]


def fill(root: Path, topic: str = "t", partitions: int = 2, batches: int = 20, per: int = 5,
         config: LogConfig = SMALL) -> None:
    """Write with a LogManager (codecs rotating), then shut it down cleanly."""
    lm = LogManager([root], config)
    try:
        for p in range(partitions):
            lg = lm.get_or_create_log(topic, p)
            for b in range(batches):
                codec = list(CompressionType)[b % 5]
                lg.append_as_leader(build_batch(records(per, b * per), compression=codec))
    finally:
        lm.shutdown()


def latest(root: Path, tp=("t", 0)) -> int:
    return EmbeddedSource((str(root),)).offset_bounds([tp])[tp].latest


def read_all(root: Path, tp=("t", 0), start=0, end=None, fail=True) -> list[int]:
    end = latest(root, tp) if end is None else end
    r = OffsetRange(EmbeddedSpec((str(root),)), tp[0], tp[1], start, end, False, fail)
    return [o for rb in read_range(r) for o in rb.column("offset").to_pylist()]


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_discovery_and_bounds_across_segments(tmp_path):
    fill(tmp_path)
    (tmp_path / "t-3.0123456789abcdef-delete").mkdir()  # a partition being deleted is not a partition
    (tmp_path / "not-a-partition").mkdir()
    src = EmbeddedSource((str(tmp_path),))
    assert src.list_topics() == {"t": [0, 1]}
    assert len(list((tmp_path / "t-0").glob("*.log"))) > 3
    assert src.offset_bounds([("t", 0)]) == {("t", 0): OffsetBounds(0, 100)}
    assert read_all(tmp_path, start=7, end=93) == list(range(7, 93))
    with pytest.raises(UnknownTopicError, match="t-9 does not exist"):
        src.offset_bounds([("t", 9)])
    with pytest.raises(OptionError, match="do not exist"):
        EmbeddedSource((str(tmp_path / "nope"),))


def test_reading_in_process_leaves_the_garbage_collector_alone(tmp_path):
    """Spark workers freeze their heap when they first read; an application or a test must not."""
    fill(tmp_path, partitions=1)
    frozen = gc.get_freeze_count()
    assert read_all(tmp_path) == list(range(100))
    assert gc.get_freeze_count() == frozen


def test_reading_changes_nothing_and_takes_no_lock(tmp_path):
    fill(tmp_path)
    before = tree_digest(tmp_path)
    src = EmbeddedSource((str(tmp_path),))
    src.offset_bounds([("t", 0), ("t", 1)])
    src.offsets_for_timestamps({("t", 0): T0 + 50})
    assert len(read_all(tmp_path)) == 100
    assert tree_digest(tmp_path) == before
    lm = LogManager([tmp_path], SMALL)  # a writer can take the dir while readers are around
    try:
        assert writer_is_live(tmp_path)
        assert len(read_all(tmp_path)) == 100
    finally:
        lm.shutdown()
    assert not writer_is_live(tmp_path)


def test_live_writer_is_read_up_to_its_checkpoints(tmp_path):
    fill(tmp_path, partitions=1, batches=4)  # 20 records, clean shutdown: recovery point 20
    lm = LogManager([tmp_path], SMALL)
    try:
        lg = lm.get_log("t", 0)
        for b in range(4, 8):
            lg.append_as_leader(build_batch(records(5, b * 5)))
        src = EmbeddedSource((str(tmp_path),))
        assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 20  # recovery point, not the log end (40)
        lg.flush(include_active=True)
        lm.checkpoint_recovery_offsets()
        assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 40
        OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("t", 0): 33})
        assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 33  # a broker's high watermark wins
    finally:
        lm.shutdown()
    (tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).unlink()
    assert EmbeddedSource((str(tmp_path),)).offset_bounds([("t", 0)])[("t", 0)].latest == 40


def test_a_torn_or_preallocated_tail_is_not_readable(tmp_path):
    with Log(tmp_path / "t-0", LogConfig()) as lg:
        for b in range(3):
            lg.append_as_leader(build_batch(records(5, b * 5)))
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    whole = segment.read_bytes()
    extra = bytes(build_batch(records(5, 15)))
    with segment.open("ab") as f:
        f.write(extra[: len(extra) // 2])  # a writer died half way through a batch
    src = EmbeddedSource((str(tmp_path),))
    assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 15
    assert read_all(tmp_path) == list(range(15))
    segment.write_bytes(whole + bytes(64 * 1024))  # preallocated, not yet written
    assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 15
    assert read_all(tmp_path) == list(range(15))
    last = bytearray(whole)
    last[-3] ^= 0xFF  # the last batch fails its CRC: a crash tail, what recovery would cut
    segment.write_bytes(bytes(last))
    assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 10


def test_corruption_inside_the_readable_range_is_reported(tmp_path):
    fill(tmp_path, partitions=1, batches=4, config=LogConfig())
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[100] ^= 0xFF  # inside the first batch
    segment.write_bytes(bytes(data))
    with pytest.raises(Exception, match=r"offset 0 \(byte 0 of .*t-0/00000000000000000000.log\)"):
        read_all(tmp_path)
    unchecked = OffsetRange(EmbeddedSpec((str(tmp_path),)), "t", 0, 0, 20, False, True, check_crcs=False)
    assert sum(rb.num_rows for rb in read_range(unchecked)) == 20  # kafka.check.crcs=false, as a consumer


def test_offsets_for_timestamps(tmp_path):
    fill(tmp_path, partitions=1)
    src = EmbeddedSource((str(tmp_path),))
    tp = ("t", 0)
    assert src.offsets_for_timestamps({tp: T0 + 57}) == {tp: 57}
    assert src.offsets_for_timestamps({tp: 0}) == {tp: 0}
    assert src.offsets_for_timestamps({tp: T0 + 100}) == {tp: None}


def test_retention_below_the_range_is_data_loss(tmp_path):
    fill(tmp_path, partitions=1)
    segments = sorted((tmp_path / "t-0").glob("*.log"))
    for suffix in (".log", ".index", ".timeindex"):
        segments[0].with_suffix(suffix).unlink(missing_ok=True)
    earliest = int(segments[1].stem)
    with pytest.raises(DataLossError, match=f"offsets 0 to {earliest - 1} of t-0 are gone"):
        read_all(tmp_path)
    assert read_all(tmp_path, fail=False) == list(range(earliest, 100))
    with pytest.raises(DataLossError, match="was deleted"):
        read_all(tmp_path, tp=("gone", 0), end=10)
    with pytest.raises(DataLossError, match="ends at offset 100, before the end of the range planned"):
        read_all(tmp_path, start=earliest, end=120)


# --- sink -----------------------------------------------------------------------------------------


def stage(sink: EmbeddedSink, job: str, n: int, partition: int = 0, topic: str = "out"):
    import pyarrow as pa

    values = pa.array([b"%s-%d" % (job.encode(), i) for i in range(n)], pa.binary())
    stage = sink.open_stage(job)
    for batch, records in build_batches(None, values, None, T0, CompressionType.NONE, 100):
        stage.add((topic, partition), batch, records)
    return stage.finish({topic: 2})


def values(root: Path, topic: str = "out", partition: int = 0) -> list[bytes]:
    end = latest(root, (topic, partition))
    r = OffsetRange(EmbeddedSpec((str(root),)), topic, partition, 0, end, False, True)
    return [v for rb in read_range(r) for v in rb.column("value").to_pylist()]


def test_sink_commit_creates_the_topic_and_cleans_up(tmp_path):
    sink = EmbeddedSink([str(tmp_path)])
    staged = [stage(sink, "job", 30)]
    assert Path(staged[0].file).exists()
    assert sink.commit("job", staged) == 30
    assert sorted(p.name for p in tmp_path.glob("out-*")) == ["out-0", "out-1"]  # numPartitions, all created
    assert values(tmp_path) == [b"job-%d" % i for i in range(30)]
    assert not list(tmp_path.glob(".kafkalite-staging-*"))
    aborted = [stage(sink, "job2", 5)]
    sink.abort("job2", aborted)
    assert not list(tmp_path.glob(".kafkalite-staging-*"))


def test_sink_writes_each_batch_id_once(tmp_path):
    sink = EmbeddedSink([str(tmp_path)])
    assert sink.commit("s-b0", [stage(sink, "s-b0", 10)], sink_id="s", batch_id=0) == 10
    assert sink.commit("s-b0", [stage(sink, "s-b0", 10)], sink_id="s", batch_id=0) == 0  # a replay
    assert sink.commit("s-b1", [stage(sink, "s-b1", 5)], sink_id="s", batch_id=1) == 5
    assert len(values(tmp_path)) == 15
    assert (tmp_path / f"{STATE_PREFIX}s.json").exists()
    assert not list(tmp_path.glob(".kafkalite-staging-*"))


def test_an_interrupted_commit_is_finished_not_repeated(tmp_path, monkeypatch):
    sink = EmbeddedSink([str(tmp_path)])
    sink.commit("s-b0", [stage(sink, "s-b0", 4)], sink_id="s", batch_id=0)
    first = [stage(sink, "s-b1", 12, partition=0), stage(sink, "s-b1", 12, partition=1)]
    original = Log.append_as_leader
    calls = []

    def dying(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("the driver died here")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Log, "append_as_leader", dying)
    with pytest.raises(OSError, match="died"):
        sink.commit("s-b1", first, sink_id="s", batch_id=1)
    sink.abort("s-b1", first, sink_id="s")  # what Spark does after a failed commit: must not lose the redo data
    monkeypatch.setattr(Log, "append_as_leader", original)
    assert 4 < len(values(tmp_path)) < 16  # half of batch 1 landed
    retry = [stage(sink, "s-b1", 12, partition=0)]  # Spark runs batch 1 again
    assert sink.commit("s-b1", retry, sink_id="s", batch_id=1) == 0
    assert values(tmp_path) == [b"s-b0-%d" % i for i in range(4)] + [b"s-b1-%d" % i for i in range(12)]
    assert values(tmp_path, partition=1) == [b"s-b1-%d" % i for i in range(12)]
    assert not list(tmp_path.glob(".kafkalite-staging-*"))


def test_sink_waits_for_the_lock_then_names_the_owner(tmp_path):
    lm = LogManager([tmp_path])
    try:
        sink = EmbeddedSink([str(tmp_path)], lock_timeout_ms=200)
        with pytest.raises(SinkError, match="lockTimeoutMs"):
            sink.commit("job", [stage(sink, "job", 3)])
    finally:
        lm.shutdown()


def test_staging_files_are_ignored_by_a_log_manager(tmp_path):
    fill(tmp_path, partitions=1, batches=2)
    sink = EmbeddedSink([str(tmp_path)])
    stage(sink, "left-behind", 3)
    lm = LogManager([tmp_path])
    assert sorted(lm.logs) == [("t", 0)]
    lm.shutdown()
    assert os.path.exists(tmp_path / "t-0")


def test_sink_id_follows_the_query_in_the_checkpoint(tmp_path):
    (tmp_path / "metadata").write_text('{"id":"query-1"}')
    first = sink_id_for(str(tmp_path))
    assert sink_id_for(f"file:{tmp_path}") == first
    (tmp_path / "metadata").write_text('{"id":"query-2"}')  # checkpoint deleted, a new query started there
    assert sink_id_for(str(tmp_path)) != first
