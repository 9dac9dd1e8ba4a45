"""A flipped bit in a batch's base-offset field (the CRC does not cover it): full recovery drops that batch
alone and keeps every other batch, later segments included."""

from __future__ import annotations

import logging
import struct

import pytest

from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage import names
from kafkalite.storage.file_records import FileRecords
from tests.support import T0
from tests.support.logs import Env, records_in

PROPS = {"segment.bytes": 3000, "index.interval.bytes": 200}
N = 200


def _write(d) -> list[int]:
    lg = Env().open(d, PROPS)
    for i in range(0, N, 2):
        lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % j, b"value-%d" % j * 4, T0 + j) for j in (i, i + 1)]))
    bases = list(lg.segments.keys())
    lg.close()
    assert len(bases) >= 4
    return bases


def _flip_base_offset(path, which: int, bit: int) -> tuple[int, int]:
    """Flip one bit of the base offset of batch `which` (negative: from the end); returns its true offsets."""
    records = FileRecords(path, mutable=False)
    headers = list(records.batch_headers(0))
    records.close_handlers()
    h = headers[which]
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, h.position, h.base_offset ^ (1 << bit))
    path.write_bytes(bytes(data))
    return h.base_offset, h.last_offset


@pytest.mark.parametrize("which,bit", [
    (1, 40),  # far up: the batch overlaps everything after it
    (1, 0),  # one up: it overlaps the next batch by one offset
    (2, 3),  # down into the batch before it
    (-1, 20),  # the last batch of a middle segment, up past the next segment's base
    (0, 30),  # the first batch of a segment
    (-2, 1),  # a small jump up near the segment's end
])
def test_a_damaged_base_offset_costs_that_batch_only(tmp_path, caplog, which, bit):
    d = tmp_path / "topic-0"
    bases = _write(d)
    victim = names.log_file(d, bases[1])
    first, last = _flip_base_offset(victim, which, bit)
    with caplog.at_level(logging.WARNING):
        lg = Env().open(d, PROPS, recovery_point=0)
    got = [(r.offset, r.key) for r in records_in(lg)]
    assert got == [(i, b"k%d" % i) for i in range(N) if not first <= i <= last]
    assert list(lg.segments.keys()) == bases
    assert lg.log_end_offset == N
    assert victim.name in caplog.text and "Dropping the record batch" in caplog.text
    lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % N, b"after", T0)]))
    lg.close()
    lg = Env().open(d, PROPS, recovery_point=0)  # and a second recovery finds nothing more to do
    assert [r.offset for r in records_in(lg)] == [i for i in range(N + 1) if not first <= i <= last]
    lg.close()
    assert not list(d.glob("*.tmp"))
