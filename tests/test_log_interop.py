"""Directories in Kafka's layout written by an independent writer (kafka-python's builder) open and read back
record for record; directories we write decode with kafka-python's reader."""

from __future__ import annotations

import struct
import time

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tests.support.logs import Env, records_in, write_foreign_partition


def test_foreign_directory_opens_and_reads_back(tmp_path):
    d = tmp_path / "orders-3"
    expected = write_foreign_partition(d)
    env = Env()
    lg = env.open(d, {"index.interval.bytes": 512})
    assert lg.leo == len(expected) and len(lg.segments) == 4
    got = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records_in(lg)]
    assert got == expected
    assert lg.latest_epoch == 3
    target = expected[123]
    assert lg.fetch_offset_by_timestamp(target[3]).offset == 123
    lg.append_as_leader(bytearray(_one_kp_batch()), leader_epoch=4)
    assert lg.leo == len(expected) + 1
    lg.close()


def _one_kp_batch() -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=b"k", value=b"v", headers=[])
    return bytes(b.build())


def test_our_directory_decodes_with_kafka_python(tmp_path):
    from kafkalite.records import CompressionType, SimpleRecord, build_batch

    env = Env()
    lg = env.open(tmp_path / "events-0", {"segment.bytes": 2048})
    expected = []
    for i in range(80):
        recs = [SimpleRecord(b"u%d" % i, b"payload-%d-%d" % (i, j), 1700000000000 + i, [("n", b"%d" % j)])
                for j in range(3)]
        info = lg.append_as_leader(build_batch(recs, compression=list(CompressionType)[i % 5]), leader_epoch=1)
        expected += [(info.first_offset + j, r.key, r.value, r.timestamp) for j, r in enumerate(recs)]
    lg.close()
    got = []
    for seg_file in sorted((tmp_path / "events-0").glob("*.log")):
        data = seg_file.read_bytes()
        pos = 0
        while pos < len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            batch = DefaultRecordBatch(data[pos : pos + 12 + length])
            assert batch.validate_crc()
            got += [(r.offset, r.key, r.value, r.timestamp) for r in batch]
            pos += 12 + length
    assert got == expected
