"""The Spark connector's Arrow codec, without Spark: decoding batches into Arrow and encoding rows.

The reference is kafkalite's own record decoder (`RecordBatch.records()`), itself checked against
kafka-python; the partitioner is checked against kafka-python's murmur2.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager

import numpy as np
import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")
pa = pytest.importorskip("pyarrow")
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.records import (
    ControlRecordType,
    SimpleRecord,
    TimestampType,
    build_batch,
    build_end_txn_marker,
    iter_batches,
)
from kafkalite.records.compression import CompressionType
from kafkalite.spark import arrow_decode
from kafkalite.spark.arrow_decode import RawChunk, decode_chunk
from kafkalite.spark.arrow_encode import StickyPartitioner, build_batches, choose_partitions, murmur2
from kafkalite.spark.errors import CorruptBatchError
from kafkalite.spark.schema import arrow_schema
from tests.support import T0

HEADERS_TYPE = arrow_schema(True).field("headers").type

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20)))
record = st.builds(SimpleRecord, maybe_bytes, maybe_bytes, st.integers(T0 - 10**6, T0 + 10**6),
                   st.lists(header, max_size=3).map(tuple))
batches = st.lists(st.lists(record, min_size=1, max_size=40), min_size=1, max_size=6)


def _log_bytes(groups: list[list[SimpleRecord]], codecs: list[CompressionType], gaps: int = 0) -> bytes:
    out = bytearray()
    offset = 0
    for i, recs in enumerate(groups):
        out += build_batch(recs, base_offset=offset, compression=codecs[i % len(codecs)])
        offset += len(recs) + gaps
    return bytes(out)


def _expected(data: bytes, start: int, end: int) -> list:
    return [r for b in iter_batches(data) if not b.is_control for r in b.records() if start <= r.offset < end]


def _check(rb: pa.RecordBatch | None, expected: list, headers: bool = True) -> None:
    if not expected:
        assert rb is None
        return
    assert rb.schema == arrow_schema(headers)
    d = rb.to_pydict()
    assert d["offset"] == [r.offset for r in expected]
    assert d["key"] == [r.key for r in expected]
    assert d["value"] == [r.value for r in expected]
    assert [int(t.timestamp() * 1000) for t in d["timestamp"]] == [r.timestamp for r in expected]
    if headers:
        got = [None if h is None else [(x["key"], x["value"]) for x in h] for h in d["headers"]]
        assert got == [list(r.headers) or None for r in expected]


@given(batches, st.sampled_from(list(CompressionType)), st.integers(0, 3), st.data())
def test_decode_matches_the_record_decoder(groups, codec, gaps, data):
    raw = _log_bytes(groups, [codec, CompressionType.NONE], gaps)
    total = sum(len(g) for g in groups) * (1 + gaps)
    start = data.draw(st.integers(0, total))
    end = data.draw(st.integers(start, total + 1))
    rb = decode_chunk(RawChunk(raw, "x.log"), "topic", 7, start, end, True)
    _check(rb, _expected(raw, start, end))
    if rb is not None:
        assert set(rb.column("topic").to_pylist()) == {"topic"}
        assert set(rb.column("partition").to_pylist()) == {7}
        assert set(rb.column("timestampType").to_pylist()) == {0}


@contextmanager
def _groups_of(nbytes: int):
    """Make the decoder check, walk and copy batches in groups of `nbytes` (1 MiB in use)."""
    saved = arrow_decode._GROUP_BYTES
    arrow_decode._GROUP_BYTES = nbytes
    try:
        yield
    finally:
        arrow_decode._GROUP_BYTES = saved


@given(st.lists(st.lists(st.integers(0, 400), min_size=1, max_size=30), min_size=1, max_size=12),
       st.integers(1, 3000), st.booleans(), st.data())
def test_batches_decoded_group_by_group_give_the_same_rows(value_sizes, group_bytes, verify, data):
    n = 0
    groups = []
    for sizes in value_sizes:  # every key and value distinct, so a slice copied to the wrong place shows
        groups.append([SimpleRecord(b"key-%d" % (n + i), bytes([(n + i) % 251]) * size, T0 + n + i)
                       for i, size in enumerate(sizes)])
        n += len(sizes)
    raw = _log_bytes(groups, [CompressionType.NONE])
    start = data.draw(st.integers(0, n))
    end = data.draw(st.integers(start, n + 1))
    with _groups_of(group_bytes):
        whole = decode_chunk(RawChunk(raw, "x.log"), "topic", 7, 0, n, True, verify_crc=verify)
        part = decode_chunk(RawChunk(raw, "x.log"), "topic", 7, start, end, True, verify_crc=verify)
    _check(whole, _expected(raw, 0, n))
    _check(part, _expected(raw, start, end))


def test_a_bad_crc_in_a_later_group_names_its_batch():
    raw = bytearray(_log_bytes([[SimpleRecord(b"k", b"v" * 100, T0)]] * 30, [CompressionType.NONE]))
    size = len(raw) // 30
    raw[size * 20 + 70] ^= 0x01  # inside the record of the batch at offset 20
    where = rf"offset 20 \(byte {size * 20} of f.log\).*CRC32C"
    with _groups_of(3 * size), pytest.raises(CorruptBatchError, match=where):
        decode_chunk(RawChunk(bytes(raw), "f.log"), "t", 0, 0, 100, False)
    with _groups_of(3 * size):  # CRCs not checked: the flipped byte is in a value, so the rows decode
        assert decode_chunk(RawChunk(bytes(raw), "f.log"), "t", 0, 0, 100, False, verify_crc=False).num_rows == 30


def test_many_small_batches_take_the_vectorised_walk():
    groups = [[SimpleRecord(b"k%d" % j, bytes(j % 200 + i), T0 + j) for j in range(3)] for i in range(400)]
    raw = _log_bytes(groups, [CompressionType.NONE])
    _check(decode_chunk(RawChunk(raw, "x"), "t", 0, 0, 10**9, False), _expected(raw, 0, 10**9), headers=False)


def test_large_records_use_the_long_varint_path():
    groups = [[SimpleRecord(None, bytes(20_000 + i), T0) for i in range(3)]]
    raw = _log_bytes(groups, [CompressionType.NONE])
    _check(decode_chunk(RawChunk(raw, "x"), "t", 0, 0, 10, True), _expected(raw, 0, 10))


def test_control_batches_are_skipped_and_log_append_time_is_used():
    data = bytes(build_batch([SimpleRecord(b"a", b"1", T0)], timestamp_type=TimestampType.LOG_APPEND_TIME,
                             log_append_time=T0 + 99, producer_id=5, producer_epoch=0, base_sequence=0,
                             is_transactional=True))
    data += bytes(build_end_txn_marker(ControlRecordType.COMMIT, 5, 0, base_offset=1, timestamp=T0))
    rb = decode_chunk(RawChunk(data, "x"), "t", 0, 0, 10, False)
    assert rb.num_rows == 1
    assert rb.column("timestampType").to_pylist() == [1]
    assert int(rb.column("timestamp")[0].as_py().timestamp() * 1000) == T0 + 99


def test_a_partial_tail_batch_is_left_out():
    raw = _log_bytes([[SimpleRecord(b"k", b"v", T0)]] * 3, [CompressionType.NONE])
    rb = decode_chunk(RawChunk(raw[:-5], "x"), "t", 0, 0, 10, False)
    assert rb.column("offset").to_pylist() == [0, 1]


def test_a_flipped_byte_names_the_file_byte_and_offset():
    one = bytes(build_batch([SimpleRecord(b"k", b"value", T0)], base_offset=0))
    two = bytearray(build_batch([SimpleRecord(b"k", b"value", T0)], base_offset=1))
    two[-2] ^= 0xFF
    where = rf"offset 1 \(byte {1000 + len(one)} of /d/t-0/000.log\).*CRC32C"
    with pytest.raises(CorruptBatchError, match=where):
        decode_chunk(RawChunk(one + bytes(two), "/d/t-0/000.log", 1000), "t", 0, 0, 10, False)


def _recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))
    return batch


def test_records_that_do_not_add_up_are_corrupt_even_with_a_good_crc():
    batch = bytearray(build_batch([SimpleRecord(b"k", b"value", T0), SimpleRecord(b"k", b"value", T0)]))
    batch[61] += 2  # the first record claims one byte more
    with pytest.raises(CorruptBatchError, match="offset 0"):
        decode_chunk(RawChunk(bytes(_recrc(batch)), "f.log"), "t", 0, 0, 10, False)
    batch = bytearray(build_batch([SimpleRecord(b"k", b"value", T0)]))
    batch[61 + 4] = 0x7E  # after length, attributes, timestamp and offset deltas: key length 63, past the end
    with pytest.raises(CorruptBatchError):
        decode_chunk(RawChunk(bytes(_recrc(batch)), "f.log"), "t", 0, 0, 10, False)


def _one_record_batch(record: bytes, count: int = 1) -> bytes:
    """A valid batch header (CRC included) around hand-made record bytes."""
    batch = bytearray(build_batch([SimpleRecord(None, b"", T0)]))[:61] + record
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 57, count)
    return bytes(_recrc(batch))


def test_a_too_long_varint_is_corrupt_and_named():
    body = b"\x00\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + b"\x00\x00"  # key length: six varint bytes
    data = _one_record_batch(bytes([len(body) << 1]) + body)
    with pytest.raises(CorruptBatchError, match="key length varint is longer than 5 bytes"):
        decode_chunk(RawChunk(data, "f.log"), "t", 0, 0, 10, False)


def test_a_five_byte_varint_wraps_to_32_bits_as_kafka_reads_it():
    delta = b"\xfe\xff\xff\xff\x7f"  # bits past the 32nd set: Kafka's readVarint drops them
    body = b"\x00\x00" + delta + b"\x01\x02v\x00"  # null key, value "v", no headers
    data = _one_record_batch(bytes([len(body) << 1]) + body)
    expected = _expected(data, -(2**40), 2**40)
    assert [r.offset for r in expected] == [2**31 - 1]
    _check(decode_chunk(RawChunk(data, "f.log"), "t", 0, -(2**40), 2**40, True), expected)


def test_a_record_count_a_compressed_batch_cannot_hold_is_corrupt():
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v" * 50, T0)], compression=CompressionType.LZ4))
    struct.pack_into(">i", batch, 57, 1_000_000_000)  # sizing arrays by this would need ~90 GB
    with pytest.raises(CorruptBatchError, match="record count 1000000000 cannot fit"):
        decode_chunk(RawChunk(bytes(_recrc(batch)), "f.log"), "t", 0, 0, 2**40, False)


def test_a_corrupt_compressed_payload_is_reported():
    batch = bytearray(build_batch([SimpleRecord(b"k", b"v" * 100, T0)], compression=CompressionType.ZSTD))
    batch[70] ^= 0x55
    with pytest.raises(CorruptBatchError, match="decompress"):
        decode_chunk(RawChunk(bytes(_recrc(batch)), "f.log"), "t", 0, 0, 10, False)


def test_a_header_key_that_is_not_utf8_is_corrupt():
    good = bytearray(build_batch([SimpleRecord(None, b"v", T0, (("ab", b"x"),))]))
    at = bytes(good).index(b"ab")
    good[at] = 0xFF
    with pytest.raises(CorruptBatchError, match="UTF-8"):
        decode_chunk(RawChunk(bytes(_recrc(good)), "f.log"), "t", 0, 0, 10, True)


# --- encoding ------------------------------------------------------------------------------------


@given(st.lists(st.binary(max_size=40), max_size=60))
def test_murmur2_matches_kafka(keys):
    from kafka.partitioner.default import murmur2 as reference

    got = murmur2(pa.array(keys, pa.binary())).tolist()
    assert got == [reference(k) for k in keys]


def test_partition_choice_follows_kafka_rules():
    keys = pa.array([b"21", None, b"foobar", b"x"], pa.binary())
    explicit = pa.array([None, None, None, 2], pa.int32())
    parts = choose_partitions(4, keys, explicit, 5, StickyPartitioner(1 << 16, 3))
    assert parts.tolist() == [(3321034988 & 0x7FFFFFFF) % 5, 3, (3504634814 & 0x7FFFFFFF) % 5, 2]


@pytest.mark.parametrize("columns", [(), ("key",), ("partition",), ("key", "partition")])
def test_rows_with_neither_key_nor_partition_column_are_all_placed(columns):
    """The most common write has only a value column: every row still gets a partition (this crashed)."""
    n = 7
    keys = pa.nulls(n, pa.binary()) if "key" in columns else None
    explicit = pa.nulls(n, pa.int32()) if "partition" in columns else None
    values = pa.array([b"v"] * n)
    parts = choose_partitions(n, keys, explicit, 3, StickyPartitioner(1 << 16, 1), values)
    assert parts.tolist() == [1] * n  # one batch's worth: all to the sticky partition


def test_keyless_rows_stick_to_a_partition_for_a_batch_then_move_on():
    sticky = StickyPartitioner(batch_bytes=100, start=2)
    sizes = np.full(25, 10, dtype=np.int64)  # 10 records fill a 100-byte batch
    first = sticky.assign(sizes[:15], 3).tolist()
    second = sticky.assign(sizes[15:], 3).tolist()  # the next Arrow batch of the task carries on where it was
    assert first + second == [2] * 10 + [0] * 10 + [1] * 5
    assert sticky.assign(np.zeros(0, dtype=np.int64), 3).tolist() == []


@given(st.lists(st.integers(0, 500), max_size=200), st.integers(1, 2000), st.integers(1, 7))
def test_sticky_partitions_change_only_after_a_batch_worth(sizes, batch_bytes, count):
    sticky = StickyPartitioner(batch_bytes, 0)
    parts = sticky.assign(np.asarray(sizes, dtype=np.int64), count).tolist()
    assert all(0 <= p < count for p in parts)
    filled = 0
    for i, size in enumerate(sizes):
        if i and filled >= batch_bytes:  # the previous partition has a batch's worth: the next one
            assert parts[i] == (parts[i - 1] + 1) % count
            filled = 0
        elif i:
            assert parts[i] == parts[i - 1]
        filled += size


@given(st.lists(st.tuples(maybe_bytes, maybe_bytes, st.lists(header, max_size=2)), min_size=1, max_size=80),
       st.sampled_from(list(CompressionType)), st.integers(100, 5000))
def test_encoded_batches_decode_to_the_rows(rows, codec, batch_bytes):
    keys = pa.array([k for k, _, _ in rows], pa.binary())
    values = pa.array([v for _, v, _ in rows], pa.binary())
    headers = pa.array([[{"key": k, "value": v} for k, v in hs] or None for _, _, hs in rows], HEADERS_TYPE)
    encoded = build_batches(keys, values, headers, T0, codec, batch_bytes)
    assert sum(n for _, n in encoded) == len(rows)
    decoded = [r for data, _ in encoded for b in iter_batches(data, strict=True) for r in b.records()]
    assert [(r.key, r.value, list(r.headers)) for r in decoded] == [(k, v, hs) for k, v, hs in rows]
    assert all(r.timestamp == T0 for r in decoded)
    if len(encoded) > 1:
        assert all(len(data) <= batch_bytes + 2000 for data, _ in encoded)


def test_string_columns_are_written_as_utf8():
    encoded = build_batches(pa.array(["ké"]), pa.array(["välue"]), None, T0, CompressionType.NONE, 1 << 20)
    (r,) = next(iter_batches(encoded[0][0])).records()
    assert (r.key, r.value) == ("ké".encode(), "välue".encode())


@given(batches, st.data())
def test_damaged_bytes_are_rows_or_a_corrupt_batch_error_never_a_crash(groups, data):
    raw = bytearray(_log_bytes(groups, [CompressionType.NONE, CompressionType.LZ4]))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    for verify in (False, True):
        try:
            rb = decode_chunk(RawChunk(bytes(raw), "x.log"), "t", 0, 0, 10**6, True, verify_crc=verify)
        except CorruptBatchError:
            continue
        assert rb is None or rb.schema == arrow_schema(True)
