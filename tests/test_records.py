"""Record batch v2 codec: reference cases A1-A12, fuzzing, and interop with kafka-python's codec."""

from __future__ import annotations

import contextlib
import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from kafkalite.errors import CorruptRecordError, InvalidRecordError, KafkaliteError
from kafkalite.records import (
    CompressionType,
    ControlRecordType,
    RecordBatch,
    SimpleRecord,
    TimestampType,
    build_batch,
    build_empty_batch,
    build_end_txn_marker,
    decrement_sequence,
    increment_sequence,
    iter_batches,
    single,
)
from kafkalite.records.control import EndTransactionMarker, end_txn_marker_of, parse_control_type
from kafkalite.records.varint import decode_varint, decode_varlong, encode_varint, encode_varlong
from tests.support import T0

V1 = (
    "0000000000000000 00000039 00000000 02 965a94b1 0000 00000000 0000018bcfe56800 0000018bcfe56800 "
    "ffffffffffffffff ffff ffffffff 00000001 0e 00 00 00 01 02 61 00"
)
V2 = (
    "0000000000000005 00000042 00000000 02 2f9f220c 0030 00000000 0000018bcfe56800 0000018bcfe56800 "
    "0000000000000001 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c 000000000000 00"
)
V3 = (
    "0000000000000000 00000047 00000000 02 00be233d 0000 00000001 0000018bcfe56800 0000018bcfe56805 "
    "ffffffffffffffff ffff ffffffff 00000002 10 00 00 00 02 6b 02 76 00 18 00 0a 02 04 6b32 01 02 02 68 02 78"
)


def hx(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def vector1() -> bytearray:
    return build_batch([(None, b"a", T0)], partition_leader_epoch=0)


def vector2() -> bytearray:
    return build_end_txn_marker(ControlRecordType.COMMIT, 1, 0, timestamp=T0, base_offset=5, partition_leader_epoch=0)


def vector3() -> bytearray:
    return build_batch([(b"k", b"v", T0), (b"k2", None, T0 + 5, [("h", b"x")])], partition_leader_epoch=0)


def test_a1_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283


def test_a2_vectors_encode_byte_for_byte():
    assert bytes(vector1()) == hx(V1)
    assert bytes(vector2()) == hx(V2)
    assert bytes(vector3()) == hx(V3)


def test_a2_vectors_decode():
    b3 = RecordBatch(hx(V3))
    recs = b3.records()
    assert [r.offset for r in recs] == [0, 1]
    assert [r.timestamp for r in recs] == [T0, T0 + 5]
    assert recs[1].value is None and recs[1].key == b"k2"
    assert recs[1].headers == (("h", b"x"),)
    assert b3.max_timestamp == T0 + 5 and b3.last_offset_delta == 1
    b2 = RecordBatch(hx(V2))
    assert b2.is_control and b2.is_transactional and b2.base_offset == 5
    marker = end_txn_marker_of(b2)
    assert marker == EndTransactionMarker(ControlRecordType.COMMIT, 0)
    b1 = RecordBatch(hx(V1))
    assert b1.records()[0].value == b"a" and b1.records()[0].key is None
    for v in (V1, V2, V3):
        assert RecordBatch(hx(v)).is_valid()


def test_a3_crc_coverage():
    v = hx(V1)
    for pos in range(21, 69):
        bad = bytearray(v)
        bad[pos] ^= 0xFF
        b = RecordBatch(bad)
        assert not b.is_valid()
        with pytest.raises(CorruptRecordError):
            b.ensure_valid()
    for pos in list(range(0, 8)) + list(range(12, 16)):
        ok = bytearray(v)
        ok[pos] ^= 0x5A
        assert RecordBatch(ok).is_valid()
    with pytest.raises(CorruptRecordError):
        RecordBatch(v[:60])


def test_a4_set_last_offset():
    buf = build_batch([(None, b"a", T0), (None, b"b", T0)])
    crc_before = bytes(buf[17:21])
    b = RecordBatch(buf)
    b.set_last_offset(1234568)
    assert b.base_offset == 1234567 and b.last_offset == 1234568
    again = RecordBatch(buf)
    assert [r.offset for r in again.records()] == [1234567, 1234568]
    assert again.is_valid() and bytes(buf[17:21]) == crc_before


def test_a5_set_partition_leader_epoch():
    buf = vector3()
    crc_before = bytes(buf[17:21])
    RecordBatch(buf).set_partition_leader_epoch(37)
    b = RecordBatch(buf)
    assert b.partition_leader_epoch == 37 and b.is_valid() and bytes(buf[17:21]) == crc_before


def test_a6_set_max_timestamp_log_append_time():
    buf = vector3()
    b = RecordBatch(buf)
    b.set_max_timestamp(TimestampType.LOG_APPEND_TIME, 1000)
    again = RecordBatch(buf)
    assert again.attributes & 0x08 and again.max_timestamp == 1000 and again.is_valid()
    assert again.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in again.records()] == [1000, 1000]
    with pytest.raises(InvalidRecordError):
        again.set_max_timestamp(TimestampType.NO_TIMESTAMP_TYPE, -1)


def test_set_max_timestamp_unchanged_keeps_crc():
    buf = vector3()
    before = bytes(buf)
    RecordBatch(buf).set_max_timestamp(TimestampType.CREATE_TIME, T0 + 5)
    assert bytes(buf) == before


def _patch_count(buf: bytearray, count: int) -> bytearray:
    struct.pack_into(">i", buf, 57, count)
    return buf


@pytest.mark.parametrize("codec", list(CompressionType))
def test_a7_count_mismatch_fails_iteration(codec):
    recs = [(b"k1", b"v1", T0), (b"k2", b"v2", T0)]
    with pytest.raises(InvalidRecordError):
        RecordBatch(_patch_count(build_batch(recs, compression=codec), 3)).records()
    with pytest.raises(InvalidRecordError):
        RecordBatch(_patch_count(build_batch(recs, compression=codec), 1)).records()
    with pytest.raises(InvalidRecordError):
        RecordBatch(_patch_count(build_batch(recs, compression=codec), -1)).records()


def test_a8_sequences():
    mx = 2**31 - 1
    buf = build_batch([(None, b"a", T0)] * 3, producer_id=7, producer_epoch=0, base_sequence=mx - 1)
    b = RecordBatch(buf)
    assert [r.sequence for r in b.records()] == [mx - 1, mx, 0]
    assert b.last_sequence == 0
    assert increment_sequence(5, 5) == 10
    assert increment_sequence(mx, 1) == 0
    assert increment_sequence(mx - 5, 10) == 4
    assert decrement_sequence(5, 5) == 0
    assert decrement_sequence(0, 1) == mx


def test_a9_varints():
    cases = {0: "00", -1: "01", 1: "02", 63: "7e", -64: "7f", 64: "8001", 300: "d804"}
    for value, h in cases.items():
        assert encode_varint(value).hex() == h
        assert decode_varint(bytes.fromhex(h), 0) == (value, len(h) // 2)
        assert decode_varlong(encode_varlong(value), 0)[0] == value
    with pytest.raises(InvalidRecordError):
        decode_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(InvalidRecordError):
        decode_varlong(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(InvalidRecordError):
        decode_varint(b"\x80", 0)


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_roundtrip(n):
    assert decode_varint(encode_varint(n), 0) == (n, len(encode_varint(n)))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_roundtrip(n):
    assert decode_varlong(encode_varlong(n), 0) == (n, len(encode_varlong(n)))


def test_a10_sizes():
    assert len(single(b"a")) == 69
    assert len(single(b"test")) == 72
    assert len(single(b"test", key=b"test")) == 76
    assert len(build_end_txn_marker(ControlRecordType.ABORT, 1, 0, timestamp=T0)) == 78


def test_a11_control_keys():
    with pytest.raises(InvalidRecordError):
        parse_control_type(b"\x00\x00\x01")
    with pytest.raises(InvalidRecordError):
        parse_control_type(struct.pack(">hh", -1, 0))
    assert parse_control_type(struct.pack(">hh", 0, 7)) == ControlRecordType.UNKNOWN
    from kafkalite.records import Record

    key = struct.pack(">hh", 0, 1)
    with pytest.raises(InvalidRecordError):
        EndTransactionMarker.from_record(Record(0, T0, key, b"\x00\x00\x00\x00\x01"))
    m = EndTransactionMarker.from_record(Record(0, T0, key, struct.pack(">hi", 5, 42)))
    assert m.coordinator_epoch == 42 and m.kind == ControlRecordType.COMMIT


def test_a12_empty_batch_header():
    buf = build_empty_batch(base_offset=10, last_offset=15, base_sequence=3, producer_id=7, producer_epoch=2,
                            timestamp=99)
    b = RecordBatch(buf)
    assert len(buf) == 61 and b.length == 49 and b.records_count == 0
    assert b.base_timestamp == -1 and b.max_timestamp == 99
    assert b.last_sequence == 8 and b.last_offset == 15
    assert b.is_valid() and b.records() == []


def test_delete_horizon_keeps_record_timestamps():
    buf = build_batch([(b"k", None, T0 - 10)], delete_horizon_ms=T0 + 86400000)
    b = RecordBatch(buf)
    assert b.has_delete_horizon and b.delete_horizon_ms == T0 + 86400000
    assert b.records()[0].timestamp == T0 - 10 and b.is_valid()


def test_iter_batches_frames_and_tolerates_partial_tail():
    data = bytes(vector1()) + bytes(vector3())
    assert [b.base_offset for b in iter_batches(data + b"\x00" * 5)] == [0, 0]
    assert len(list(iter_batches(data + bytes(vector1())[:30]))) == 2
    with pytest.raises(CorruptRecordError):
        list(iter_batches(data + bytes(vector1())[:30], strict=True))
    bad = bytearray(vector1())
    struct.pack_into(">i", bad, 8, 5)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(bad)))


# --- fuzzing: arbitrary bytes give a value or one of our errors, never anything else ------------


@given(st.binary(max_size=400))
def test_fuzz_batch_decode_arbitrary_bytes(data):
    with contextlib.suppress(KafkaliteError):
        for b in iter_batches(data):
            b.is_valid()
            b.records()


@given(st.binary(min_size=1, max_size=200), st.integers(0, 82), st.sampled_from(list(CompressionType)))
def test_fuzz_mutated_valid_batch(noise, pos, codec):
    buf = bytearray(build_batch([(b"k", b"v" * 50, T0), (None, b"x", T0 + 1, [("h", None)])], compression=codec))
    pos = min(pos, len(buf) - 1)
    end = min(len(buf), pos + len(noise))
    buf[pos:end] = noise[: end - pos]
    with contextlib.suppress(KafkaliteError):
        RecordBatch(bytes(buf)).records()


@given(st.integers(0, 2**31 - 1), st.binary(max_size=64))
def test_fuzz_huge_declared_count_fails_fast(count, body):
    buf = bytearray(build_batch([(None, body, T0)]))
    struct.pack_into(">i", buf, 57, count)
    with contextlib.suppress(InvalidRecordError):
        RecordBatch(buf).records()


# --- round trips, ours and against kafka-python's independent codec ------------------------------

headers_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))), max_size=3)
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=32)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.integers(0, 2**42),
    headers_st,
)


@pytest.mark.slow
@given(st.lists(record_st, min_size=1, max_size=20), st.sampled_from(list(CompressionType)),
       st.integers(0, 2**40))
def test_roundtrip_ours(recs, codec, base):
    buf = build_batch([SimpleRecord(k, v, t, h) for k, v, t, h in recs], compression=codec, base_offset=base)
    b = RecordBatch(buf)
    assert b.is_valid() and b.compression == codec
    out = b.records()
    assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in out] == [
        (k, v, t, [tuple(x) for x in h]) for k, v, t, h in recs
    ]
    assert [r.offset for r in out] == list(range(base, base + len(recs)))


KP_CODEC = {CompressionType.NONE: 0, CompressionType.GZIP: 1, CompressionType.SNAPPY: 2,
            CompressionType.LZ4: 3, CompressionType.ZSTD: 4}


@pytest.mark.slow
@pytest.mark.parametrize("codec", list(CompressionType))
@given(recs=st.lists(record_st, min_size=1, max_size=15))
def test_kafka_python_reads_ours(codec, recs):
    buf = build_batch([SimpleRecord(k, v, t, h) for k, v, t, h in recs], compression=codec, base_offset=42,
                      producer_id=9, producer_epoch=1, base_sequence=5)
    kb = KpBatch(bytes(buf))
    assert kb.validate_crc()
    assert kb.compression_type == KP_CODEC[codec]
    got = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in kb]
    assert got == [(42 + i, t, k, v, [tuple(x) for x in h]) for i, (k, v, t, h) in enumerate(recs)]


@pytest.mark.slow
@pytest.mark.parametrize("codec", list(CompressionType))
@given(recs=st.lists(record_st, min_size=1, max_size=15))
def test_we_read_kafka_python(codec, recs):
    builder = KpBuilder(magic=2, compression_type=KP_CODEC[codec], is_transactional=False, producer_id=-1,
                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (k, v, t, h) in enumerate(recs):
        builder.append(i, timestamp=t, key=k, value=v, headers=h)
    data = bytes(builder.build())
    b = RecordBatch(data)
    # kafka-python writes uncompressed when compression would not shrink the batch
    assert b.is_valid() and b.compression in (codec, CompressionType.NONE)
    got = [(r.offset, r.timestamp, r.key, r.value, [tuple(x) for x in r.headers]) for r in b.records()]
    assert got == [(i, t, k, v, [tuple(x) for x in h]) for i, (k, v, t, h) in enumerate(recs)]


def test_large_payloads_cross_block_boundaries_each_codec():
    """Payloads above the 32 KiB snappy and 64 KiB lz4 block sizes survive both codecs' framings."""
    big = [(b"key%d" % i, bytes(range(256)) * 300, T0 + i) for i in range(8)]
    for codec in CompressionType:
        buf = build_batch(big, compression=codec)
        kb = KpBatch(bytes(buf))
        assert [r.value for r in kb] == [v for _, v, _ in big]
        assert [r.value for r in RecordBatch(buf).records()] == [v for _, v, _ in big]


def test_snappy_raw_payload_readable():
    """librdkafka writes raw (unframed) snappy; readers must accept it."""
    import cramjam

    from kafkalite.records.builder import encode_record

    body = encode_record(0, 0, b"k", b"v" * 100)
    payload = bytes(cramjam.snappy.compress_raw(body))
    buf = build_batch([(b"k", b"v" * 100, T0)])  # reuse header then swap payload
    hdr = bytearray(buf[:61])
    hdr[21:23] = struct.pack(">h", 2)
    struct.pack_into(">i", hdr, 8, 49 + len(payload))
    full = hdr + payload
    struct.pack_into(">I", full, 17, crc32c(bytes(full[21:])))
    b = RecordBatch(full)
    assert b.is_valid() and b.records()[0].value == b"v" * 100


def test_corrupt_compressed_payload_is_corrupt_record():
    for codec in (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD):
        buf = bytearray(build_batch([(b"k", b"v" * 100, T0)], compression=codec))
        buf[70:80] = b"\xee" * 10
        with pytest.raises((CorruptRecordError, InvalidRecordError)):
            RecordBatch(buf).records()


def test_foreign_compression_framings_decode():
    """Framings other writers produce: zstd without content size or concatenated, LZ4 with linked blocks,
    content size or 4 MiB blocks (librdkafka, Java, Go clients), multi-member gzip."""
    import gzip
    import os as _os

    import lz4.frame
    import zstandard

    from kafkalite.records.compression import decompress

    data = _os.urandom(50_000) + b"abc" * 100_000
    streaming = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frames = {
        CompressionType.ZSTD: [streaming.compress(data) + streaming.flush(),
                               zstandard.ZstdCompressor().compress(data[:1000])
                               + zstandard.ZstdCompressor().compress(data[1000:])],
        CompressionType.LZ4: [lz4.frame.compress(data, block_linked=True),
                              lz4.frame.compress(data, content_checksum=True, store_size=True),
                              lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX4MB)],
        CompressionType.GZIP: [gzip.compress(data[:1000]) + gzip.compress(data[1000:])],
    }
    for codec, payloads in frames.items():
        for payload in payloads:
            assert decompress(codec, payload) == data, codec
