"""`kafkalite dump-log`: through the real command, on our files, on files kafka-python built, on damage."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafkalite.cli.dump_log import Dumper, bytes_from_json
from kafkalite.records import RecordBatch, SimpleRecord, build_batch
from kafkalite.storage import names
from kafkalite.storage.segment import LogSegment
from tests.support.batches import append_batch, batch_at
from tests.support.brokers import BrokerProcess


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "dump-log", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def kafka_python_segment(directory: Path, n_batches: int = 20) -> list[tuple[int, bytes, bytes]]:
    """A segment whose batches were encoded by kafka-python (an independent writer), in Kafka's layout."""
    now = int(time.time() * 1000)
    expected = []
    offset = 0
    with open(names.log_file(directory, 0), "wb") as f:
        for b in range(n_batches):
            builder = DefaultRecordBatchBuilder(magic=2, compression_type=b % 5, is_transactional=False,
                                                producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                                batch_size=1 << 20)
            for i in range(5):
                key, value = b"key-%d" % (offset + i), b"value-%d" % (offset + i) * 20
                builder.append(i, timestamp=now + offset + i, key=key, value=value, headers=[("h", b"1")])
                expected.append((offset + i, key, value))
            buf = bytearray(builder.build())
            struct.pack_into(">q", buf, 0, offset)  # the broker assigns offsets in place
            f.write(buf)
            offset += 5
    return expected


@pytest.mark.slow
def test_dump_our_segment_with_records_and_indexes(tmp_path):
    seg = LogSegment.open(tmp_path, 0, index_interval_bytes=100)
    for o in range(10):
        append_batch(seg, batch_at(o, ts=1000 + o, key=b"k%d" % o))
    seg.close()
    out = run_cli("--print-data-log", names.log_file(tmp_path, 0), names.offset_index_file(tmp_path, 0),
                  names.time_index_file(tmp_path, 0))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("baseOffset:")) == 10
    assert "| offset: 3 CreateTime: 1003 keySize: 2 valueSize: 4 sequence: -1 headerKeys: [] key: k3 payload: test" \
        in out.stdout
    assert "offset: 2 position: 148" in out.stdout  # 74-byte batches, entry once > 100 bytes
    assert any(line.startswith("timestamp: 1009 offset: 9") for line in lines)


@pytest.mark.slow
def test_dump_kafka_python_segment_json(tmp_path):
    expected = kafka_python_segment(tmp_path)
    out = run_cli("--deep-iteration", "--print-data-log", "--json", names.log_file(tmp_path, 0))
    assert out.returncode == 0, out.stderr
    objs = [json.loads(line) for line in out.stdout.splitlines()]
    recs = [(o["offset"], o["key"].encode(), o["payload"].encode()) for o in objs if o["type"] == "record"]
    assert recs == expected
    codecs = {o["compresscodec"] for o in objs if o["type"] == "batch"}
    assert codecs <= {"none", "gzip", "snappy", "lz4", "zstd"} and len(codecs) >= 2
    assert all(o["isvalid"] for o in objs if o["type"] == "batch")


def test_kafka_python_segment_recovers_and_indexes(tmp_path):
    expected = kafka_python_segment(tmp_path)
    seg = LogSegment.open(tmp_path, 0, index_interval_bytes=200)
    assert seg.recover() == 0
    assert seg.read_next_offset() == len(expected)
    got = [(r.offset, r.key, r.value) for _, b in seg.log.batches() for r in b.records()]
    assert got == expected
    for off in (0, 17, 63, 99):
        data = seg.read(off, 1).tobytes() if seg.read(off, 1) else b""
        info = seg.read(off, 1, min_one_message=True)
        first = RecordBatch(info.tobytes())
        assert first.base_offset <= off <= first.last_offset, data


@pytest.mark.slow
def test_corrupt_crc_reported_with_position(tmp_path):
    seg = LogSegment.open(tmp_path, 0)
    for o in range(5):
        append_batch(seg, batch_at(o))
    seg.close()
    path = names.log_file(tmp_path, 0)
    raw = bytearray(path.read_bytes())
    raw[72 * 2 + 65] ^= 0xFF  # a record byte of the third batch
    path.write_bytes(raw)
    out = run_cli("--deep-iteration", path)
    assert out.returncode == 1
    assert f"ERROR: {path} at byte position 144: batch 2..2 fails its CRC32C check" in out.stdout
    assert out.stdout.count("baseOffset:") == 5  # the scan goes on after a bad CRC


@pytest.mark.slow
def test_broken_frame_and_tail_reported(tmp_path):
    seg = LogSegment.open(tmp_path, 0)
    for o in range(3):
        append_batch(seg, batch_at(o))
    seg.close()
    path = names.log_file(tmp_path, 0)
    with open(path, "ab") as f:
        f.write(struct.pack(">qi", 3, 2) + b"\x00" * 20)
    out = run_cli(path)
    assert out.returncode == 1
    assert "at byte position 216" in out.stdout and "smaller than minimum" in out.stdout
    assert out.stdout.count("baseOffset:") == 3


@pytest.mark.slow
def test_truncated_tail_reported(tmp_path):
    seg = LogSegment.open(tmp_path, 0)
    for o in range(3):
        append_batch(seg, batch_at(o))
    seg.close()
    path = names.log_file(tmp_path, 0)
    os.truncate(path, 72 * 3 - 10)
    out = run_cli(path)
    assert out.returncode == 1 and "found 62 invalid bytes at the end" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("garbage", [b"", b"\x00" * 7, os.urandom(3000), b"\xff" * 61])
def test_garbage_files_never_crash(tmp_path, garbage):
    for suffix in (names.LOG_SUFFIX, names.INDEX_SUFFIX, names.TIME_INDEX_SUFFIX, names.TXN_INDEX_SUFFIX):
        p = tmp_path / ("00000000000000000000" + suffix)
        p.write_bytes(garbage)
    out = run_cli(*sorted(tmp_path.iterdir()))
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode in (0, 1)


@pytest.mark.slow
def test_index_mismatch_detected(tmp_path):
    seg = LogSegment.open(tmp_path, 0, index_interval_bytes=1)
    for o in range(5):
        append_batch(seg, batch_at(o, ts=1000 + o))
    seg.close()
    idx = names.offset_index_file(tmp_path, 0)
    raw = bytearray(idx.read_bytes())
    struct.pack_into(">i", raw, 12, 999)  # entry 1's position
    idx.write_bytes(raw)
    out = run_cli("--verify-index-only", idx)
    assert out.returncode == 1
    assert "entry 1 (2 -> 999) does not match the log" in out.stdout
    assert "offset: 1 position" not in out.stdout  # verify-only prints mismatches only


@pytest.mark.slow
def test_index_sanity_check_mode(tmp_path):
    seg = LogSegment.open(tmp_path, 5, index_interval_bytes=1)
    for o in range(5, 9):
        append_batch(seg, batch_at(o))
    seg.close()
    idx = names.offset_index_file(tmp_path, 5)
    assert run_cli("--index-sanity-check", idx).returncode == 0
    idx.write_bytes(idx.read_bytes()[:-3])
    assert run_cli("--index-sanity-check", idx).returncode == 1


# --- lossless --json ----------------------------------------------------------------------------------

_bytes_or_none = st.none() | st.binary(max_size=64) | st.text(max_size=16).map(str.encode)


@pytest.mark.slow
@given(records=st.lists(st.tuples(_bytes_or_none, _bytes_or_none,
                                  st.lists(st.tuples(st.text(max_size=8), _bytes_or_none), max_size=3)),
                        min_size=1, max_size=5))
def test_json_output_round_trips_any_bytes(tmp_path_factory, records):
    directory = tmp_path_factory.mktemp("json")
    seg = LogSegment.open(directory, 0)
    batch = build_batch([SimpleRecord(k, v, 1000, headers=h) for k, v, h in records], base_offset=0)
    seg.append(len(records) - 1, 1000, len(records) - 1, batch)
    seg.close()
    out = io.StringIO()
    dumper = Dumper(out, deep=True, print_data=True, as_json=True, max_bytes=None)
    dumper.dump(names.log_file(directory, 0))
    assert dumper.problems == 0
    got = []
    for obj in map(json.loads, out.getvalue().splitlines()):
        if obj["type"] == "record":
            headers = [(h["key"], bytes_from_json(h, "value")) for h in obj["headers"]]
            got.append((bytes_from_json(obj, "key"), bytes_from_json(obj, "payload"), headers))
    assert got == [(k, v, list(h)) for k, v, h in records]


@pytest.mark.slow
def test_json_marks_binary_values_as_base64(tmp_path):
    seg = LogSegment.open(tmp_path, 0)
    seg.append(0, 1000, 0, build_batch([SimpleRecord(b"text", b"\xf1\xdf\x00", 1000, headers=[("h", b"\xff")])]))
    seg.close()
    out = run_cli("--print-data-log", "--json", names.log_file(tmp_path, 0))
    record = next(o for o in map(json.loads, out.stdout.splitlines()) if o["type"] == "record")
    assert record["key"] == "text" and "keyEncoding" not in record
    assert record["payload"] == "8d8A" and record["payloadEncoding"] == "base64"
    assert record["headers"] == [{"key": "h", "value": "/w==", "valueEncoding": "base64"}]
    assert "base64" in subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "dump-log", "--help"],
                                      capture_output=True, text=True, timeout=60).stdout


# --- a live broker's active segment -----------------------------------------------------------------


@pytest.mark.slow
def test_dump_a_live_broker_active_segment_index(tmp_path):
    from tests.support.clients import create_topic, produce

    broker = BrokerProcess(tmp_path / "data", {"num.partitions": 1, "log.index.interval.bytes": 256}).start()
    try:
        busy, quiet = create_topic(broker), create_topic(broker)
        produce(broker, busy, [b"v-%04d" % i + b"x" * 100 for i in range(300)], {"batch.size": 2048})
        produce(broker, quiet, [b"one small record"])  # an index with no entry at all: zeros only
        for topic, some_entries in ((busy, True), (quiet, False)):
            d = broker.data_dir / f"{topic}-0"
            index, time_index = names.offset_index_file(d, 0), names.time_index_file(d, 0)
            assert index.stat().st_size == 10 * 1024 * 1024  # preallocated, zero-filled after the entries
            out = run_cli(index, time_index)
            assert out.returncode == 0, out.stdout + out.stderr
            assert "ERROR" not in out.stdout
            entries = [line for line in out.stdout.splitlines() if line.startswith("offset:")]
            time_entries = [line for line in out.stdout.splitlines() if line.startswith("timestamp:")]
            assert bool(entries) == some_entries and bool(time_entries) == some_entries, out.stdout
            assert "offset: 0 position: 0" not in out.stdout  # no phantom entry read from the zeros
            verify = run_cli("--verify-index-only", index, time_index)
            assert verify.returncode == 0 and "ERROR" not in verify.stdout, verify.stdout
        assert broker.proc.poll() is None
    finally:
        assert broker.stop() == 0, broker.output()
