"""Damaged offset indexes, on real files: every record written comes back, a warning names the index file,
and no damage is ever taken for a failure of the whole log directory."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage import names
from tests.support import T0
from tests.support.logs import Env, records_in

PROPS = {"segment.bytes": 3000, "index.interval.bytes": 200}
N = 200


def _expected(n: int = N) -> list[tuple[int, bytes, bytes]]:
    return [(i, b"k%d" % i, b"value-%d" % i * 4) for i in range(n)]


def _written(d: Path) -> list[int]:
    """A partition of N records in several segments, closed cleanly; returns the segment bases."""
    env = Env()
    lg = env.open(d, PROPS)
    for i in range(0, N, 2):
        lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % j, b"value-%d" % j * 4, T0 + j)
                                         for j in (i, i + 1)]))
    bases = list(lg.segments.keys())
    lg.close()
    assert len(bases) >= 3
    return bases


def _got(lg) -> list[tuple[int, bytes, bytes]]:
    return [(r.offset, r.key, r.value) for r in records_in(lg)]


def _each_offset_reads(lg) -> None:
    """A read at every offset starts at the batch holding it (what a consumer seeking there gets)."""
    for offset in range(N):
        batches = list(lg.batches(offset))
        assert batches and batches[0].base_offset <= offset <= batches[0].last_offset, offset


ENTRY = struct.Struct(">ii")


@pytest.mark.slow
@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("garbage", [
    ENTRY.pack(0x7FFFFFF0, 0x00100000),  # an entry far past the segment, at a position past the .log
    ENTRY.pack(3, 0x7FFFFFFF),  # a plausible offset at an impossible position
    ENTRY.pack(5, -8),  # a negative position
    b"\xde\xad\xbe\xef\x01",  # not a whole entry
    ENTRY.pack(-4, 10),  # an offset below the segment base
])
def test_garbage_appended_to_a_flushed_segments_index(tmp_path, caplog, garbage, clean):
    d = tmp_path / "topic-0"
    bases = _written(d)
    victim = names.offset_index_file(d, bases[1])
    with victim.open("ab") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING):
        lg = Env().open(d, PROPS, clean_shutdown=clean, recovery_point=lg_end(clean))
    assert lg.log_end_offset == N
    assert _got(lg) == _expected()
    _each_offset_reads(lg)
    assert victim.name in caplog.text
    lg.close()


def lg_end(clean: bool) -> int:
    return N if clean else 0


@pytest.mark.parametrize("where", ["past", "negative", "mid-batch", "wrong-batch"])
def test_a_bad_entry_inside_an_index_is_met_on_read(tmp_path, caplog, where):
    """An entry not at the end (the load-time check reads the last one only) is caught when a read uses it."""
    d = tmp_path / "topic-0"
    bases = _written(d)
    victim = names.offset_index_file(d, bases[1])
    data = bytearray(victim.read_bytes())
    assert len(data) >= 16
    relative, position = ENTRY.unpack_from(data, 0)
    bad_position = {"past": 1 << 20, "negative": -100, "mid-batch": position + 7, "wrong-batch": 0}[where]
    if where == "wrong-batch":  # the entry claims a later offset than the batch it points at starts with
        ENTRY.pack_into(data, 0, relative, ENTRY.unpack_from(data, 8)[1])
    else:
        ENTRY.pack_into(data, 0, relative, bad_position)
    victim.write_bytes(bytes(data))
    lg = Env().open(d, PROPS, clean_shutdown=True, recovery_point=N)
    with caplog.at_level(logging.WARNING):
        assert _got(lg) == _expected()
        _each_offset_reads(lg)
    assert victim.name in caplog.text
    lg.close()


def test_garbage_entry_in_the_active_segments_index(tmp_path, caplog):
    """The active segment's index is resized to full size at load; a bad entry must not end in EINVAL."""
    d = tmp_path / "topic-0"
    bases = _written(d)
    victim = names.offset_index_file(d, bases[-1])
    with victim.open("ab") as f:
        f.write(ENTRY.pack(1, -(1 << 30)))
    with caplog.at_level(logging.WARNING):
        lg = Env().open(d, PROPS, clean_shutdown=True, recovery_point=N)
        assert _got(lg) == _expected()
        _each_offset_reads(lg)
    assert victim.name in caplog.text
    lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % N, b"value-%d" % N * 4, T0)]))
    assert _got(lg) == _expected(N + 1)
    lg.close()
    lg = Env().open(d, PROPS, clean_shutdown=True, recovery_point=N + 1)
    assert _got(lg) == _expected(N + 1)
    lg.close()


@pytest.mark.parametrize("content", ["garbage", "other-segment"])
def test_stray_index_swap_file(tmp_path, caplog, content):
    d = tmp_path / "topic-0"
    bases = _written(d)
    target = names.offset_index_file(d, bases[1])
    stray = target.with_name(target.name + names.SWAP_SUFFIX)
    if content == "garbage":
        stray.write_bytes(bytes(range(256)) * 3)
    else:  # a whole index, but of another segment: plausible entries, wrong positions
        stray.write_bytes(names.offset_index_file(d, bases[0]).read_bytes() + ENTRY.pack(500, 4000))
    with caplog.at_level(logging.WARNING):
        lg = Env().open(d, PROPS, clean_shutdown=True, recovery_point=N)
        assert _got(lg) == _expected()
        _each_offset_reads(lg)
    assert not stray.exists()
    lg.close()


@pytest.mark.slow
def test_live_broker_serves_every_record_past_a_bad_active_index_entry(tmp_path):
    """The reported failure: a bad entry in the active segment's index took the whole log dir offline."""
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.support.brokers import BrokerProcess

    data = tmp_path / "data"
    props = {"num.partitions": 1, "log.segment.bytes": 64 * 1024, "log.index.interval.bytes": 512}
    broker = BrokerProcess(data, props).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("damaged", 1, 1)])["damaged"].result(timeout=15)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "compression.type": "none"})
        for i in range(400):
            p.produce("damaged", value=b"v%04d" % i + b"x" * 300)
            if i % 20 == 19:
                p.flush(10)
        p.flush(10)
    finally:
        assert broker.stop() == 0, broker.output()
    part = data / "damaged-0"
    active = sorted(part.glob("*.index"))[-1]
    with active.open("ab") as f:
        f.write(ENTRY.pack(10_000, -(1 << 30)))
    broker = BrokerProcess(data, props, port=broker.port).start()
    try:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False})
        got: list[list[bytes]] = []
        for start in (0, 399):
            c.assign([TopicPartition("damaged", 0, start)])
            want = 400 - start
            seen: list[bytes] = []
            for _ in range(60):
                for m in c.consume(500, timeout=0.5):
                    assert m.error() is None, m.error()
                    seen.append(m.value()[:5])
                if len(seen) >= want:
                    break
            got.append(seen)
        c.close()
        assert got[0] == [b"v%04d" % i for i in range(400)]
        assert got[1] == [b"v0399"]
    finally:
        assert broker.stop() == 0, broker.output()
    output = broker.log_path.read_text(errors="replace")
    assert "Errno" not in output and "offline" not in output.lower(), broker.output()
    assert active.name in output, broker.output()
