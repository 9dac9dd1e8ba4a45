"""Records inside a v2 batch (DefaultRecord): the decoder used wherever records must be opened.

The broker's append and fetch paths never come here; only consumers, the cleaner, dump-log and
validation of compressed or compacted data do. The decoder is a single function with the
one-byte varint case inlined because it runs once per record.
"""

from __future__ import annotations

from typing import NamedTuple

from kafkalite.errors import InvalidRecordError
from kafkalite.records.varint import decode_varint, decode_varlong

Header = tuple[str, bytes | None]

MAX_SEQUENCE = (1 << 31) - 1


class Record(NamedTuple):
    """One decoded record with absolute offset and effective timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = -1


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap from Integer.MAX_VALUE back to 0."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return MAX_SEQUENCE - (decrement - sequence) + 1
    return sequence - decrement


def _read_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    b = buf[pos] if pos < end else 0x80
    if b < 0x80:
        length = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        length, pos = decode_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > end:
        raise InvalidRecordError(f"{what} of {length} bytes runs past the end of its record")
    return buf[pos : pos + length], pos + length


# a hot decoder: one pass per batch or record, kept whole on purpose
def decode_records(  # noqa: C901
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None = None,
    base_sequence: int = -1,
) -> list[Record]:
    """Decode `count` records from the (uncompressed) records section of a batch.

    Raises InvalidRecordError for Kafka's iteration failures: a negative count, records running past
    the data ("premature EOF"), bytes left after `count` records, or a record whose body does not
    match its length prefix. A count larger than the data could hold fails before any allocation.
    """
    if count < 0:
        raise InvalidRecordError(f"found invalid record count {count} in batch")
    end = len(data)
    if count > end // 7 + 1:  # the smallest record (all fields empty, no key/value) is 7 bytes
        raise InvalidRecordError(f"record count {count} cannot fit in {end} bytes: premature EOF")
    out: list[Record] = []
    append = out.append
    pos = 0
    for _ in range(count):
        if pos >= end:
            raise InvalidRecordError("premature EOF: fewer records than the batch's count")
        b = data[pos]
        if b < 0x80:
            size = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            size, pos = decode_varint(data, pos)
        start = pos
        rec_end = pos + size
        if size < 0 or rec_end > end:
            raise InvalidRecordError(f"record of {size} bytes runs past the batch end: premature EOF")
        pos += 1  # attributes, unused
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            ts_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            ts_delta, pos = decode_varlong(data, pos)
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = decode_varint(data, pos)
        key, pos = _read_bytes(data, pos, rec_end, "key")
        value, pos = _read_bytes(data, pos, rec_end, "value")
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            n_headers = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n_headers, pos = decode_varint(data, pos)
        if n_headers < 0 or n_headers > rec_end - pos:
            raise InvalidRecordError(f"found invalid number of record headers {n_headers}")
        headers: tuple[Header, ...] = ()
        if n_headers:
            hs = []
            for _h in range(n_headers):
                hkey, pos = _read_bytes(data, pos, rec_end, "header key")
                if hkey is None:
                    raise InvalidRecordError("invalid negative header key size")
                hval, pos = _read_bytes(data, pos, rec_end, "header value")
                try:
                    hs.append((hkey.decode(), hval))
                except UnicodeDecodeError:
                    raise InvalidRecordError("header key is not valid UTF-8") from None
            headers = tuple(hs)
        if pos != rec_end or pos - start != size:
            raise InvalidRecordError(
                f"invalid record size: expected to read {size} bytes in record payload, but read {pos - start}"
            )
        if base_sequence < 0:
            seq = -1
        else:
            seq = base_sequence + offset_delta
            if seq > MAX_SEQUENCE:
                seq -= MAX_SEQUENCE + 1
        ts = base_timestamp + ts_delta if log_append_time is None else log_append_time
        append(Record(base_offset + offset_delta, ts, key, value, headers, seq))
    if pos != end:
        raise InvalidRecordError(f"incorrect declared batch size, records still remaining in file ({end - pos} bytes)")
    return out
