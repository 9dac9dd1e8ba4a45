"""A partition's topic id is read from partition.metadata once, when its log is loaded (Kafka's
initializeTopicId), and kept on the Log: LeaderAndIsr for thousands of partitions writes only what changed."""

from __future__ import annotations

import uuid

from kafkalite.broker.metadata import ensure_log_topic_id
from kafkalite.storage.checkpoint import PARTITION_METADATA_FILE, read_partition_metadata
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig


def test_topic_id_is_read_at_load_and_written_only_when_it_changes(tmp_path):
    d = tmp_path / "orders-0"
    lg = Log(d, LogConfig())
    assert lg.topic_id is None  # a new partition has no partition.metadata
    first = uuid.uuid4()
    ensure_log_topic_id(lg, first)
    path = d / PARTITION_METADATA_FILE
    assert read_partition_metadata(d) == first and lg.topic_id == first
    inode = path.stat().st_ino
    ensure_log_topic_id(lg, first)
    assert path.stat().st_ino == inode  # unchanged: not rewritten (a rewrite renames a new file over it)
    lg.close()

    lg = Log(d, LogConfig())
    assert lg.topic_id == first  # read back at load
    ensure_log_topic_id(lg, first)
    assert path.stat().st_ino == inode
    second = uuid.uuid4()  # the topic was recreated under the same name
    ensure_log_topic_id(lg, second)
    assert read_partition_metadata(d) == second and lg.topic_id == second
    lg.close()


def test_a_damaged_partition_metadata_is_named_and_rewritten(tmp_path, caplog):
    d = tmp_path / "orders-0"
    Log(d, LogConfig()).close()
    (d / PARTITION_METADATA_FILE).write_bytes(b"version: 0\ntopic_id: ???\n")
    lg = Log(d, LogConfig())
    assert lg.topic_id is None
    assert PARTITION_METADATA_FILE in caplog.text
    topic_id = uuid.uuid4()
    ensure_log_topic_id(lg, topic_id)
    assert read_partition_metadata(d) == topic_id
    lg.close()
