"""The recovery scan (mapped windows + column-wise rules) against a plain, batch-by-batch reading of Kafka's
LogSegment.recover, on random segments cut into many small windows, with and without damage."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.errors import CorruptRecordError
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage import file_records, names
from kafkalite.storage.file_records import FileRecords
from kafkalite.storage.segment import MAX_RELATIVE_OFFSET, LogSegment
from tests.support import T0

SEGMENT_BASE = 100


def reference_choose(spans: list[tuple[int, int]], base: int) -> list[bool]:
    """Which batches recovery keeps, judged by their (first, last) offsets alone, one batch at a time.

    A batch must lie in the segment's range and above the last batch kept. When it also overlaps the
    next batch, one of the two has a damaged base offset: drop this one if the next one fits where it
    is (above the last kept, below the batch after it) and this one does not, or if both fit and the
    next one lines up with its neighbours (first == last kept + 1, last + 1 == the batch after) more often.
    """
    def in_range(first: int, last: int) -> bool:
        return first >= base and last >= first and last - base <= MAX_RELATIVE_OFFSET

    keep = []
    prev = base - 1
    for i, (first, last) in enumerate(spans):
        ok = in_range(first, last) and first > prev
        if ok and i + 1 < len(spans) and last >= spans[i + 1][0]:
            next_first, next_last = spans[i + 1]
            after = spans[i + 2][0] if i + 2 < len(spans) else None
            next_ok = in_range(next_first, next_last) and next_first > prev and (after is None or next_last < after)
            self_ok = after is None or last < after
            lines_up_self = (first == prev + 1) + (after is not None and last + 1 == after)
            lines_up_next = (next_first == prev + 1) + (after is not None and next_last + 1 == after)
            if next_ok and (not self_ok or lines_up_next > lines_up_self):
                ok = False
        keep.append(ok)
        if ok:
            prev = last
    return keep


def reference_recover(data: bytes, base: int, interval: int) -> dict:
    """Kafka's LogSegment.recover, one batch at a time, written as plainly as possible, with our one change:
    a batch whose offsets do not fit is dropped alone (the file closes up over it), not cut with all after it."""
    pos = 0
    batches = []  # (position, size, first, last, max timestamp) of every CRC-valid batch before the first bad one
    while len(data) - pos >= 61:
        (b_base, length, _epoch, magic, crc, _attrs, lod, _bts, b_max_ts, *_rest) = struct.unpack_from(
            ">qiibIhiqqqhii", data, pos)
        size = length + 12
        if size < 61 or pos + size > len(data) or magic != 2 or crc32c(data[pos + 21 : pos + size]) != crc:
            break
        batches.append((pos, size, b_base, b_base + lod, b_max_ts))
        pos += size
    scan_end = pos
    keep = reference_choose([(b[2], b[3]) for b in batches], base)
    valid = last_entry = 0
    max_ts, offset_of_max = -1, -1
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    for (_pos, size, _first, last, b_max_ts), kept in zip(batches, keep, strict=True):
        if not kept:
            continue
        if b_max_ts > max_ts:
            max_ts, offset_of_max = b_max_ts, last
        if valid - last_entry > interval:
            offset_entries.append((last, valid))
            if max_ts > (time_entries[-1][0] if time_entries else -1):
                time_entries.append((max_ts, offset_of_max))
            last_entry = valid
        valid += size
    if max_ts > (time_entries[-1][0] if time_entries else -1):
        time_entries.append((max_ts, offset_of_max))
    kept_bytes = b"".join(data[p : p + s] for (p, s, *_), k in zip(batches, keep, strict=True) if k)
    return {"valid": valid, "scan_end": scan_end, "offsets": offset_entries, "times": time_entries,
            "max": (max_ts, offset_of_max), "bytes": kept_bytes}


batch_spec = st.tuples(
    st.integers(1, 6),  # records
    st.sampled_from([0, 10, 300, 1500, 4000]),  # value size
    st.integers(-3, 3),  # timestamp step (timestamps are not monotonic in a real log either)
    st.sampled_from([-1, -1, 5]),  # producer id
    st.integers(0, 2),  # offset gap before the batch
)
damage_spec = st.one_of(
    st.none(),
    st.tuples(st.just("flip"), st.floats(0, 1)),
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("junk"), st.integers(1, 200)),
    st.tuples(st.just("backwards"), st.floats(0, 1)),
    # a flipped bit in a batch's base offset, which its CRC does not cover; the tuple is (batch, bit)
    st.tuples(st.just("base-bit"), st.tuples(st.floats(0, 1), st.integers(0, 62))),
)


def build_segment(specs, damage) -> bytes:
    batches = []
    offset, ts = SEGMENT_BASE, T0
    for i, (n, value_size, step, pid, gap) in enumerate(specs):
        offset += gap
        ts += step * 1000
        records = [SimpleRecord(b"k%d" % j, bytes([i % 251]) * value_size, ts + j) for j in range(n)]
        batches.append(bytes(build_batch(records, base_offset=offset, producer_id=pid,
                                         producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1)))
        offset += n
    if damage is not None and damage[0] == "backwards" and len(batches) > 1:
        at = max(1, int(damage[1] * len(batches)) % len(batches))
        batches[at] = bytes(build_batch([SimpleRecord(b"x", b"y", ts)], base_offset=SEGMENT_BASE))
    if damage is not None and damage[0] == "base-bit" and batches:
        where, bit = damage[1]
        at = int(where * (len(batches) - 1))
        flipped = bytearray(batches[at])
        struct.pack_into(">q", flipped, 0, struct.unpack_from(">q", flipped)[0] ^ (1 << bit))
        batches[at] = bytes(flipped)
    data = bytearray(b"".join(batches))
    if damage is not None and data and damage[0] in ("flip", "cut", "junk"):
        kind, arg = damage
        if kind == "flip":
            data[int(arg * (len(data) - 1))] ^= 0x5A
        elif kind == "cut":
            del data[int(arg * len(data)):]
        elif kind == "junk":
            data += os.urandom(arg)
    return bytes(data)


@pytest.mark.slow
@given(specs=st.lists(batch_spec, max_size=40), damage=damage_spec, interval=st.sampled_from([0, 100, 4096]),
       overlap=st.sampled_from([64, 700, 1 << 20]))
def test_recovery_matches_kafkas_rules_batch_by_batch(tmp_path_factory, specs, damage, interval, overlap):
    # one-page windows with a small overlap, so that batches cross windows and outgrow the overlap
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(file_records, "_SCAN_STRIDE", 4096)
        patch.setattr(file_records, "_SCAN_OVERLAP", overlap)
        check_recovery(tmp_path_factory, specs, damage, interval)


def check_recovery(tmp_path_factory, specs, damage, interval) -> None:
    data = build_segment(specs, damage)
    directory = tmp_path_factory.mktemp("seg")
    names.log_file(directory, SEGMENT_BASE).write_bytes(data)
    expected = reference_recover(data, SEGMENT_BASE, interval)

    segment = LogSegment.open(directory, SEGMENT_BASE, index_interval_bytes=interval, max_index_size=1 << 20)
    truncated = segment.recover()
    assert truncated == len(data) - expected["scan_end"]
    assert segment.size == expected["valid"]
    assert names.log_file(directory, SEGMENT_BASE).read_bytes() == expected["bytes"]
    idx, tidx = segment.offset_index, segment.time_index
    assert [tuple(idx.entry(i)) for i in range(idx.entries)] == expected["offsets"]
    assert [tuple(tidx.entry(i)) for i in range(tidx.entries)] == expected["times"]
    assert tuple(segment.max_timestamp_and_offset_so_far) == expected["max"]
    segment.close()


def test_scan_reports_where_and_why_it_stopped(tmp_path):
    good = bytes(build_batch([SimpleRecord(b"k", b"v" * 100, T0)], base_offset=0))
    path = tmp_path / "x.log"
    bad = bytearray(good)
    bad[-1] ^= 1
    path.write_bytes(good * 3 + bytes(bad) + good)
    records = FileRecords(path, mutable=False)
    seen = []
    with pytest.raises(CorruptRecordError, match=rf"byte {3 * len(good)} of .*x.log fails its CRC32C"):
        for window in records.scan_valid():
            seen.extend(window.positions.tolist())
    assert seen == [0, len(good), 2 * len(good)]
    records.close()


def test_scan_of_a_file_shorter_than_a_header_is_trailing_bytes(tmp_path):
    path = tmp_path / "x.log"
    path.write_bytes(b"\0" * 10)
    records = FileRecords(path, mutable=False)
    with pytest.raises(CorruptRecordError, match="10 trailing bytes at byte 0"):
        list(records.scan_valid())
    records.close()
