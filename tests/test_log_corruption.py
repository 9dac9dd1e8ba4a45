"""Damage every kind of file of a partition, then open it: it recovers, keeping everything before the damage,
or fails with our error naming the file. Never a silent loss, never a stray exception."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from kafkalite.errors import KafkaliteError
from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage import names
from tests.support import T0
from tests.support.logs import Env, records_in

PROPS = {"segment.bytes": 3000, "index.interval.bytes": 200}


def _expected(n: int) -> list[tuple[int, bytes, bytes, int]]:
    return [(i, b"k%d" % i, b"value-%d" % i * 4, T0 + i) for i in range(n)]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pristine") / "topic-0"
    env = Env()
    lg = env.open(d, PROPS)
    n = 0
    while n < 300:
        k = 1 + n % 4
        lg.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"value-%d" % i * 4, T0 + i)
                                         for i in range(n, n + k)], compression=n % 5), leader_epoch=n // 100)
        n += k
    lg.close()
    return d


def _damage(path: Path, rnd: random.Random, kind: str) -> int:
    """Damage a file; returns the first byte position that changed."""
    data = bytearray(path.read_bytes())
    if not data:
        path.write_bytes(b"\x01")
        return 0
    pos = rnd.randrange(len(data))
    if kind == "flip":
        data[pos] ^= 1 << rnd.randrange(8)
    elif kind == "truncate":
        del data[pos:]
    else:  # zero-filled tail, as after a power loss with a preallocated or unsynced file
        data[pos:] = b"\x00" * (len(data) - pos + rnd.randrange(0, 4096))
    path.write_bytes(bytes(data))
    return pos


def _batch_at(segment_file: Path, pos: int) -> tuple[int, int, int]:
    """(byte position, first offset, last offset) of the batch containing byte `pos` of a .log file."""
    from kafkalite.storage.file_records import FileRecords

    fr = FileRecords(segment_file, mutable=False)
    try:
        for h in fr.batch_headers(0):
            if h.position + h.size > pos:
                return h.position, h.base_offset, h.last_offset
    finally:
        fr.close_handlers()
    base = names.offset_from_file_name(segment_file.name)
    return pos, base, base - 1


@pytest.mark.parametrize("seed", range(100))
def test_random_damage(tmp_path, pristine, seed):
    rnd = random.Random(seed)
    d = tmp_path / "topic-0"
    shutil.copytree(pristine, d)
    files = sorted(p for p in d.iterdir() if p.suffix in (".log", ".index", ".timeindex", ".snapshot")
                   or p.name == "leader-epoch-checkpoint")
    victim = rnd.choice(files)
    kind = rnd.choice(["flip", "truncate", "zero"])
    safe_before = 0  # for a .log victim: the first offset of the damaged batch; all before it must survive
    lost: range | None = None  # a flip in a batch's base offset (outside its CRC) loses that batch only
    if victim.suffix == ".log":
        pos = _damage(victim, rnd, kind)
        orig = pristine / victim.name
        at, safe_before, last = _batch_at(orig, pos)
        if kind == "flip" and pos - at < 8:
            lost = range(safe_before, last + 1)
    else:
        _damage(victim, rnd, kind)
    env = Env()
    try:
        lg = env.open(d, PROPS, recovery_point=0)
    except KafkaliteError as exc:
        assert victim.name in str(exc), f"error does not name {victim.name}: {exc}"
        return
    got = [(r.offset, r.key, r.value, r.timestamp) for r in records_in(lg)]
    if lost is not None:
        total = max(len(got) + len(lost), got[-1][0] + 1 if got else 0)
        assert total >= 300 and got == [r for r in _expected(total) if r[0] not in lost], "lost more than the batch"
    elif victim.suffix == ".log":
        assert got == _expected(len(got)), "recovered records differ from what was written"
        assert len(got) >= safe_before, f"lost records before the damage at offset {safe_before}"
    else:
        assert got == _expected(len(got)) and len(got) >= 300, f"damage to {victim.name} lost data"
    lg.append_as_leader(build_batch([SimpleRecord(b"after", b"damage", T0)]))  # appends go on
    lg.close()


@pytest.mark.parametrize("clean", [True, False])
def test_log_cut_at_a_batch_boundary_is_cut_there(tmp_path, pristine, clean):
    """A middle `.log` that lost its tail exactly at a batch boundary has no bad batch for recovery to find; its
    offset index (which saw the lost batches) tells. The log is cut there, never left with a hole (seed 0 of
    test_random_damage once kept offsets 207-270 missing while 271-299 stayed)."""
    from kafkalite.storage.file_records import FileRecords

    d = tmp_path / "topic-0"
    shutil.copytree(pristine, d)
    logs = sorted(d.glob("*.log"))
    victim = logs[len(logs) // 2]
    fr = FileRecords(victim, mutable=False)
    try:
        headers = list(fr.batch_headers(0))
    finally:
        fr.close_handlers()
    keep = headers[: len(headers) // 2]
    with open(victim, "r+b") as f:
        f.truncate(keep[-1].position + keep[-1].size)
    lg = Env().open(d, PROPS, **({"clean_shutdown": True} if clean else {"recovery_point": 0}))
    try:
        got = [(r.offset, r.key, r.value, r.timestamp) for r in records_in(lg)]
        assert got == _expected(keep[-1].last_offset + 1)
        assert lg.log_end_offset == keep[-1].last_offset + 1
        assert [p.name for p in sorted(d.glob("*.log"))] == [p.name for p in logs[: len(logs) // 2 + 1]]
    finally:
        lg.close()


@pytest.mark.parametrize("clean", [True, False])
def test_index_pointing_past_an_intact_log_loses_nothing(tmp_path, pristine, clean):
    """The other side of the rule above: an offset index whose last entry points past its `.log` is rebuilt, and
    when the `.log` still reaches the next segment nothing is cut."""
    import struct

    d = tmp_path / "topic-0"
    shutil.copytree(pristine, d)
    indexes = sorted(d.glob("*.index"))
    victim = indexes[len(indexes) // 2]
    data = bytearray(victim.read_bytes())
    assert len(data) >= 8
    struct.pack_into(">I", data, len(data) - 4, 10**6)  # the last entry's position, far past the file
    victim.write_bytes(bytes(data))
    lg = Env().open(d, PROPS, **({"clean_shutdown": True} if clean else {"recovery_point": 0}))
    try:
        got = [(r.offset, r.key, r.value, r.timestamp) for r in records_in(lg)]
        assert len(got) >= 300 and got == _expected(len(got))
    finally:
        lg.close()
