"""One writer per directory: a live broker's data dir refuses a second `Log` or `LogManager` with the lock
file and the holder's pid, and the broker keeps serving; standalone Logs lock their partition."""

from __future__ import annotations

import os

import pytest

from kafkalite.errors import DirectoryLockedError
from kafkalite.manager.log_manager import LogManager
from kafkalite.storage.dir_lock import LOCK_FILE, DirLock
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig
from tests.support.batches import batch_at
from tests.support.brokers import BrokerProcess
from tests.support.clients import consume_values, create_topic, produce

ck = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("locks") / "data", {"num.partitions": 1}).start()
    yield b
    rc = b.stop()
    assert rc == 0, b.output()


@pytest.mark.slow
def test_standalone_log_on_a_live_broker_partition_is_refused_and_the_broker_goes_on(broker):
    topic = create_topic(broker)
    first = [b"before-%d" % i for i in range(200)]
    produce(broker, topic, first)
    partition_dir = broker.data_dir / f"{topic}-0"
    lock = broker.data_dir.resolve() / LOCK_FILE
    with pytest.raises(DirectoryLockedError) as err:
        Log(partition_dir, LogConfig())
    message = str(err.value)
    assert str(lock) in message and f"pid {broker.proc.pid}" in message, message
    assert err.value.lock_file == str(lock)
    # nothing was touched: the broker writes its indexes on, and loses nothing
    second = [b"after-%d" % i for i in range(200)]
    produce(broker, topic, second)
    assert broker.proc.poll() is None, broker.output()
    assert consume_values(broker, topic, 400) == first + second


@pytest.mark.slow
def test_log_manager_on_a_live_broker_dir_is_refused(broker):
    lock = broker.data_dir.resolve() / LOCK_FILE
    with pytest.raises(DirectoryLockedError) as err:
        LogManager([broker.data_dir])
    message = str(err.value)
    assert str(lock) in message and f"pid {broker.proc.pid}" in message, message
    assert broker.proc.poll() is None
    topic = create_topic(broker)
    produce(broker, topic, [b"still here"])
    assert consume_values(broker, topic, 1) == [b"still here"]


def test_two_standalone_writers_of_one_partition_conflict(tmp_path):
    first = Log(tmp_path / "t-0", LogConfig())
    try:
        first.append_as_leader(batch_at(0))
        with pytest.raises(DirectoryLockedError) as err:
            Log(tmp_path / "t-0", LogConfig())
        message = str(err.value)
        assert str((tmp_path / "t-0").resolve() / LOCK_FILE) in message and f"pid {os.getpid()}" in message
        assert first.log_end_offset == 1  # the refused opener changed nothing
    finally:
        first.close()
    with Log(tmp_path / "t-0", LogConfig()) as again:  # released on close
        assert again.log_end_offset == 1
    assert (tmp_path / "t-0" / LOCK_FILE).read_bytes() == b""  # emptied again, as Kafka leaves it


def test_standalone_logs_share_a_dir_but_keep_a_manager_out(tmp_path):
    a = Log(tmp_path / "a-0", LogConfig())
    b = Log(tmp_path / "b-0", LogConfig())
    try:
        with pytest.raises(DirectoryLockedError) as err:
            LogManager([tmp_path])
        message = str(err.value)
        assert str(tmp_path.resolve() / LOCK_FILE) in message
        assert "a Log writing a-0" in message and "a Log writing b-0" in message and f"pid {os.getpid()}" in message
    finally:
        a.close()
        b.close()
    manager = LogManager([tmp_path])
    try:
        assert sorted(manager.logs) == [("a", 0), ("b", 0)]
        lg = manager.get_or_create_log("c", 0)  # the manager's own logs take no lock of their own
        lg.append_as_leader(batch_at(0))
        with pytest.raises(DirectoryLockedError, match="held by pid"):
            Log(tmp_path / "c-0", LogConfig())
    finally:
        manager.shutdown()


def test_a_log_refuses_a_lock_that_does_not_cover_it(tmp_path):
    (tmp_path / "x").mkdir()
    other = DirLock.acquire(tmp_path / "x", exclusive=True, what="log dir")
    try:
        with pytest.raises(ValueError, match="does not hold"):
            Log(tmp_path / "t-0", LogConfig(), dir_lock=other)
    finally:
        other.release()
    assert not (tmp_path / "t-0").exists()
