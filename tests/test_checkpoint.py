"""Text checkpoints and the other small files (reference section 1.10, 1.11, cases K1, K2, K4, K5)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.errors import KafkaliteError, KafkaStorageError
from kafkalite.storage.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    CheckpointError,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    atomic_write,
    decode_clean_shutdown,
    decode_partition_metadata,
    decode_properties,
    encode_clean_shutdown,
    encode_partition_metadata,
    encode_properties,
    has_clean_shutdown_marker,
    kraft_meta_properties,
    read_clean_shutdown_marker,
    read_meta_properties,
    read_partition_metadata,
    remove_clean_shutdown_marker,
    uuid_from_base64,
    uuid_to_base64,
    validate_meta_properties,
    write_clean_shutdown_marker,
    write_meta_properties,
    write_partition_metadata,
)
from kafkalite.storage.leader_epoch import EpochEntry

K1_OFFSETS = {("foo", 1): 5, ("bar", 2): 10}


@pytest.fixture
def offsets_file(tmp_path: Path) -> OffsetCheckpointFile:
    return OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE)


def k1_bytes(tmp_path: Path) -> bytes:
    f = OffsetCheckpointFile(tmp_path / "k1")
    f.write(K1_OFFSETS)
    return f.path.read_bytes()


# --- offset checkpoint: K1, K2 -----------------------------------------------------------------


def test_file_name_constants() -> None:
    assert RECOVERY_POINT_CHECKPOINT_FILE == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT_FILE == "log-start-offset-checkpoint"
    assert REPLICATION_OFFSET_CHECKPOINT_FILE == "replication-offset-checkpoint"
    assert CLEANER_OFFSET_CHECKPOINT_FILE == "cleaner-offset-checkpoint"
    assert LEADER_EPOCH_CHECKPOINT_FILE == "leader-epoch-checkpoint"
    assert CLEAN_SHUTDOWN_FILE == ".kafka_cleanshutdown"
    assert PARTITION_METADATA_FILE == "partition.metadata"
    assert META_PROPERTIES_FILE == "meta.properties"


def test_k1_write_read_and_rewrite_empty(offsets_file: OffsetCheckpointFile) -> None:
    offsets_file.write(K1_OFFSETS)
    text = offsets_file.path.read_text()
    assert text.startswith("0\n2\n") and text.endswith("\n")
    assert sorted(text.splitlines()[2:]) == ["bar 2 10", "foo 1 5"]
    assert offsets_file.read() == K1_OFFSETS

    offsets_file.write({})
    assert offsets_file.path.read_bytes() == b"0\n0\n"
    assert offsets_file.read() == {}


def test_k2_empty_and_missing_files_read_as_empty(offsets_file: OffsetCheckpointFile) -> None:
    assert offsets_file.read() == {}  # missing
    offsets_file.path.write_bytes(b"")
    assert offsets_file.read() == {}


@pytest.mark.parametrize(
    ("content", "line", "fragment"),
    [
        (b"1\n0\n", 1, "version 1"),
        (b"0\n3\nfoo 1 5\nbar 2 10\n", None, "expected 3 entries, found 2"),
        (b"0\n1\nfoo 1\n", 3, "expected 3 fields"),
        (b"0\n1\nfoo 1 5 7\n", 3, "expected 3 fields"),
        (b"0\n1\nfoo x 5\n", 3, "partition 'x'"),
        (b"0\n1\nfoo 1 5.0\n", 3, "offset '5.0'"),
        (b"0\n1\nfoo 1 1_0\n", 3, "offset '1_0'"),
        (b"0\n1\nfoo -1 5\n", 3, "partition -1"),
        (b"0\n1\nfoo 2147483648 5\n", 3, "partition 2147483648"),
        (b"0\n1\nfoo 1 9223372036854775808\n", 3, "out of range"),
        (b"0\n1\nf\xc3\xb6o 1 5\n", 3, "illegal topic"),
        (b"0\n1\n foo 1 5\n", 3, "expected 3 fields"),  # Java split gives an empty first field
        (b"0\n1\nfoo 1 5\n\n", 4, "expected 3 fields"),  # a blank line is a malformed entry
        (b"0\n1\nfoo 1 5", 3, "no line end"),
        (b"0\n", None, "no entry count"),
        (b"0\nx\n", 2, "entry count 'x'"),
        (b"0\n-1\n", 2, "entry count -1"),
        (b"x\n0\n", 1, "version 'x'"),
        (b"\n", 1, "version ''"),
        (b"0\n1\n\xff\xfe 1 5\n", None, "not UTF-8"),
        (b"\x00" * 12, 1, "no line end"),
    ],
)
def test_k2_malformed_files_raise_naming_file_and_line(
    offsets_file: OffsetCheckpointFile, content: bytes, line: int | None, fragment: str
) -> None:
    offsets_file.path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        offsets_file.read()
    error = info.value
    assert isinstance(error, KafkaStorageError) and isinstance(error, KafkaliteError)
    assert str(offsets_file.path) in str(error)
    assert fragment in str(error)
    assert error.line_number == line
    if line is not None:
        assert f"line {line}" in str(error)


def test_reference_replication_example_and_lenient_whitespace(offsets_file: OffsetCheckpointFile) -> None:
    assert offsets_file.decode(b"0\n2\nfoo 0 42\nbar 3 7\n") == {("foo", 0): 42, ("bar", 3): 7}
    # Java splits on \s+ and drops trailing empties: tabs, runs of blanks and a trailing \r are fine.
    assert offsets_file.decode(b"0\n1\nfoo\t0  42 \r\n") == {("foo", 0): 42}
    # A partition listed twice keeps its last value, like Kafka's map building.
    assert offsets_file.decode(b"0\n2\nfoo 0 1\nfoo 0 2\n") == {("foo", 0): 2}


def test_lines_are_sorted_so_rewrites_are_stable(offsets_file: OffsetCheckpointFile) -> None:
    data = offsets_file.encode({("b", 0): 1, ("a", 1): 2, ("a", 0): 3})
    assert data == b"0\n3\na 0 3\na 1 2\nb 0 1\n"


@pytest.mark.parametrize(
    "offsets",
    [{("bad topic", 0): 1}, {("", 0): 1}, {("t" * 250, 0): 1}, {("t", -1): 1}, {("t", 0): True}, {("t", 0): 1.5}],
)
def test_writer_refuses_entries_the_reader_would_refuse(
    offsets_file: OffsetCheckpointFile, offsets: dict
) -> None:
    with pytest.raises(ValueError):
        offsets_file.write(offsets)
    assert not offsets_file.path.exists()


def test_read_or_empty_falls_back_with_a_warning(
    offsets_file: OffsetCheckpointFile, caplog: pytest.LogCaptureFixture
) -> None:
    offsets_file.path.write_bytes(b"0\n5\nfoo 1 5\n")
    with caplog.at_level(logging.WARNING, logger="kafkalite.storage"):
        assert offsets_file.read_or_empty() == {}
    assert str(offsets_file.path) in caplog.text


# --- corruption of a valid offset checkpoint ---------------------------------------------------


def test_truncation_at_every_length_is_detected(tmp_path: Path) -> None:
    good = k1_bytes(tmp_path)
    f = OffsetCheckpointFile(tmp_path / "x")
    assert f.decode(good[:0]) == {}
    for cut in range(1, len(good)):
        with pytest.raises(CheckpointError):
            f.decode(good[:cut])


def test_zero_fill_is_detected(tmp_path: Path) -> None:
    good = k1_bytes(tmp_path)
    f = OffsetCheckpointFile(tmp_path / "x")
    with pytest.raises(CheckpointError):
        f.decode(bytes(len(good)))
    for start in range(len(good)):
        damaged = good[:start] + bytes(3) + good[start + 3:]
        with pytest.raises(CheckpointError):
            f.decode(damaged[: len(good)])


def test_bit_flips_give_a_value_or_our_error(tmp_path: Path) -> None:
    """Text files have no CRC: a flip can turn '5' into '4'. It must never crash the reader."""
    good = k1_bytes(tmp_path)
    f = OffsetCheckpointFile(tmp_path / "x")
    detected = 0
    for bit in range(len(good) * 8):
        damaged = bytearray(good)
        damaged[bit // 8] ^= 1 << (bit % 8)
        try:
            result = f.decode(bytes(damaged))
        except CheckpointError:
            detected += 1
        else:
            assert isinstance(result, dict)
    assert detected > len(good) * 8 // 2


@given(st.binary(max_size=200))
def test_arbitrary_bytes_give_a_value_or_our_error(data: bytes) -> None:
    for reader in (OffsetCheckpointFile("fuzz"), LeaderEpochCheckpointFile("fuzz")):
        try:
            reader.decode(data)
        except CheckpointError as e:
            assert "fuzz" in str(e)


@given(st.text(alphabet="01239-x \t\n\r\x00", max_size=60))
def test_checkpoint_like_text_gives_a_value_or_our_error(text: str) -> None:
    for reader in (OffsetCheckpointFile("fuzz"), LeaderEpochCheckpointFile("fuzz")):
        with contextlib.suppress(CheckpointError):
            reader.decode(("0\n" + text).encode())


topics = st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True)
offset_maps = st.dictionaries(
    st.tuples(topics, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=20
)


@pytest.mark.slow
@given(offset_maps)
def test_offset_checkpoint_round_trip(offsets: dict) -> None:
    f = OffsetCheckpointFile("mem")
    assert f.decode(f.encode(offsets)) == offsets


# --- leader epoch checkpoint file (K3 text; the cache is tested in test_leader_epoch) -----------


def test_leader_epoch_checkpoint_text(tmp_path: Path) -> None:
    f = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    f.write([EpochEntry(2, 6), EpochEntry(3, 8)])
    assert f.path.read_bytes() == b"0\n2\n2 6\n3 8\n"
    assert f.read() == [EpochEntry(2, 6), EpochEntry(3, 8)]
    assert f.decode(b"0\n2\n0 0\n3 120\n") == [EpochEntry(0, 0), EpochEntry(3, 120)]


@pytest.mark.parametrize("content", [b"0\n1\n-1 0\n", b"0\n1\n0 -5\n", b"0\n1\n1 2 3\n", b"1\n0\n"])
def test_leader_epoch_checkpoint_rejects_bad_entries(tmp_path: Path, content: bytes) -> None:
    f = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    f.path.write_bytes(content)
    with pytest.raises(CheckpointError, match=LEADER_EPOCH_CHECKPOINT_FILE):
        f.read()


# --- atomic write ------------------------------------------------------------------------------


def test_atomic_write_replaces_and_leaves_no_tmp(tmp_path: Path) -> None:
    target = tmp_path / "file"
    (tmp_path / "file.tmp").write_bytes(b"stale leftover from a crash, longer than the new content")
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


_CRASH_CHILD = textwrap.dedent(
    """
    import sys
    from kafkalite.storage.checkpoint import OffsetCheckpointFile
    f = OffsetCheckpointFile(sys.argv[1])
    generation = int(sys.argv[2])
    print("ready", flush=True)
    while True:
        generation += 1
        f.write({("topic-%d" % p, p): generation for p in range(400)})
    """
)


def _generation_map(generation: int) -> dict[tuple[str, int], int]:
    return {(f"topic-{p}", p): generation for p in range(400)}


@pytest.mark.slow
def test_atomic_write_survives_sigkill_at_random_moments(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE
    f = OffsetCheckpointFile(path)
    f.write(_generation_map(0))
    rng = random.Random(20241025)
    generation = 0
    deadline = time.monotonic() + 8
    for _ in range(20):
        if time.monotonic() > deadline:
            break
        child = subprocess.Popen(
            [sys.executable, "-c", _CRASH_CHILD, str(path), str(generation)],
            stdout=subprocess.PIPE,
        )
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        current = f.read()  # old or new, complete: a partial file would raise here
        values = set(current.values())
        assert len(values) == 1, "a mix of two generations"
        (new_generation,) = values
        assert new_generation >= generation
        assert path.read_bytes() == f.encode(_generation_map(new_generation))
        generation = new_generation
    assert generation > 0, "the child never completed a write; the test proved nothing"


# --- clean shutdown marker (K4) ----------------------------------------------------------------


def test_k4_clean_shutdown_marker(tmp_path: Path) -> None:
    assert not has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown_marker(tmp_path) is None
    write_clean_shutdown_marker(tmp_path, 3)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":3}'
    assert has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown_marker(tmp_path) == 3
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b'{"version":0,"brokerEpoch":10,"unknown":123}')
    assert read_clean_shutdown_marker(tmp_path) == 10
    remove_clean_shutdown_marker(tmp_path)
    assert not has_clean_shutdown_marker(tmp_path)
    remove_clean_shutdown_marker(tmp_path)  # idempotent


def test_legacy_empty_marker_is_present_without_epoch(tmp_path: Path) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    assert has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown_marker(tmp_path) is None


@pytest.mark.parametrize(
    "content",
    [b"{", b"not json", b"[1]", b"3", b'{"brokerEpoch":"3"}', b'{"brokerEpoch":true}', b'{"brokerEpoch":1.5}',
     b'{"brokerEpoch":99999999999999999999}', b"\xff\xfe", b"[" * 100_000, b'{"version":0}', b"\x00" * 29],
)
def test_malformed_marker_reads_as_no_epoch(content: bytes) -> None:
    assert decode_clean_shutdown(content) is None


@given(st.binary(max_size=100))
def test_marker_arbitrary_bytes_never_raise(data: bytes) -> None:
    result = decode_clean_shutdown(data)
    assert result is None or isinstance(result, int)


@given(st.integers(-(2**63), 2**63 - 1))
def test_marker_round_trip(epoch: int) -> None:
    assert decode_clean_shutdown(encode_clean_shutdown(epoch)) == epoch


# --- partition.metadata (K5) -------------------------------------------------------------------


def test_k5_partition_metadata_text(tmp_path: Path) -> None:
    write_partition_metadata(tmp_path, uuid.UUID(int=1))
    assert (tmp_path / PARTITION_METADATA_FILE).read_bytes() == b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert read_partition_metadata(tmp_path) == uuid.UUID(int=1)


def test_partition_metadata_missing_reads_as_none(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None


def test_partition_metadata_round_trips_random_ids() -> None:
    for _ in range(50):
        topic_id = uuid.uuid4()
        assert decode_partition_metadata(encode_partition_metadata(topic_id)) == topic_id


def test_partition_metadata_accepts_trailing_newline() -> None:
    assert decode_partition_metadata(b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n") == uuid.UUID(int=1)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "zero uuid"),
        (b"version: -1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "invalid version -1"),
        (b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "unrecognised version 1"),
        (b"version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "version 'x'"),
        (b"version:0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ", "malformed line"),
        (b"version: 0\ntopic: AAAAAAAAAAAAAAAAAAAAAQ", "malformed line"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAR", "canonical"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAA", "not a base64 uuid"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAA=", "not a base64 uuid"),
        (b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\nextra", "expected 2 lines"),
        (b"version: 0", "expected 2 lines"),
        (b"", "expected 2 lines"),
        (b"\xff", "not UTF-8"),
    ],
)
def test_partition_metadata_rejects(tmp_path: Path, content: bytes, fragment: str) -> None:
    (tmp_path / PARTITION_METADATA_FILE).write_bytes(content)
    with pytest.raises(CheckpointError, match=re.escape(PARTITION_METADATA_FILE)) as info:
        read_partition_metadata(tmp_path)
    assert fragment in str(info.value)


def test_partition_metadata_refuses_to_write_zero_uuid(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_partition_metadata(tmp_path, uuid.UUID(int=0))


def test_partition_metadata_truncation_and_zero_fill() -> None:
    good = encode_partition_metadata(uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"))
    for cut in range(len(good)):
        with pytest.raises(CheckpointError):
            decode_partition_metadata(good[:cut])
    with pytest.raises(CheckpointError):
        decode_partition_metadata(bytes(len(good)))


@given(st.binary(max_size=80))
def test_partition_metadata_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(CheckpointError):
        assert isinstance(decode_partition_metadata(data), uuid.UUID)


def test_uuid_base64_helpers() -> None:
    assert uuid_to_base64(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    value = uuid.uuid4()
    assert uuid_from_base64(uuid_to_base64(value)) == value
    for bad in ("", "A" * 21, "A" * 23, "AAAAAAAAAAAAAAAAAAAA+Q", "AAAAAAAAAAAAAAAAAAAA/Q"):
        with pytest.raises(ValueError):
            uuid_from_base64(bad)


# --- meta.properties ---------------------------------------------------------------------------


def test_meta_properties_kraft_text(tmp_path: Path) -> None:
    props = kraft_meta_properties(1, "J8kOKz9tRFWB8sh0VPuMEw", uuid.UUID(int=5))
    write_meta_properties(tmp_path, props, timestamp=1729848303)
    assert (tmp_path / META_PROPERTIES_FILE).read_bytes() == (
        b"#\n#Fri Oct 25 09:25:03 UTC 2024\nversion=1\nnode.id=1\ncluster.id=J8kOKz9tRFWB8sh0VPuMEw\n"
        b"directory.id=AAAAAAAAAAAAAAAAAAAABQ\n"
    )
    assert read_meta_properties(tmp_path) == props
    validate_meta_properties(props)
    assert kraft_meta_properties(2, "c") == {"version": "1", "node.id": "2", "cluster.id": "c"}


def test_meta_properties_missing_reads_as_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None


def test_meta_properties_date_line_uses_current_time() -> None:
    lines = encode_properties({"a": "b"}).decode().splitlines()
    assert lines[0] == "#" and lines[1].startswith("#") and lines[1].endswith(time.strftime("%Y", time.gmtime()))


def test_meta_properties_reads_java_properties_syntax() -> None:
    text = (
        b"#Fri Oct 25 09:25:03 UTC 2024\n"
        b"! bang comment\n"
        b"   \n"
        b"  node.id = 3\n"
        b"cluster.id:abc\n"
        b"spaced value\n"
        b"long=one \\\n    two\n"
        b"esc\\=key=a\\tb\\u00e9\\\\\n"
        b"empty\n"
        b"version=0\r\n"
        b"version=1\r"
        b"latin=\xe9\n"
    )
    assert decode_properties(text) == {
        "node.id": "3", "cluster.id": "abc", "spaced": "value", "long": "one two", "esc=key": "a\tb\u00e9\\",
        "empty": "", "version": "1", "latin": "\u00e9",
    }


def test_meta_properties_bad_unicode_escape_names_the_file(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).write_bytes(b"#\na=1\nb=\\u12G4\n")
    with pytest.raises(CheckpointError, match=r"meta\.properties, line 3"):
        read_meta_properties(tmp_path)


@pytest.mark.parametrize(
    "props",
    [{}, {"version": "2"}, {"version": "1", "node.id": "1"}, {"version": "1", "node.id": "x", "cluster.id": "c"},
     {"version": "0"}, {"version": "1", "node.id": "1", "cluster.id": "c", "directory.id": "nope"}],
)
def test_validate_meta_properties_rejects(props: dict[str, str]) -> None:
    with pytest.raises(CheckpointError, match=r"meta\.properties"):
        validate_meta_properties(props)


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=6))
def test_meta_properties_round_trip(props: dict[str, str]) -> None:
    data = encode_properties(props, timestamp=0)
    assert data.isascii()
    assert decode_properties(data) == props


@given(st.binary(max_size=120))
def test_meta_properties_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(CheckpointError):
        assert isinstance(decode_properties(data), dict)


@pytest.mark.slow
def test_concurrent_writers_of_one_checkpoint_never_collide(tmp_path) -> None:
    """The broker's periodic high-watermark checkpoint and its shutdown checkpoint once ran together:
    both wrote the same `.tmp` and the second rename failed. Each writer here builds its own object,
    as the broker does."""
    import threading

    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE
    failures: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(60):
                OffsetCheckpointFile(path).write({("t", n): i})
        except BaseException as exc:  # collected and asserted below
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    [(tp, offset)] = OffsetCheckpointFile(path).read().items()
    assert tp[0] == "t" and offset == 59
    assert not (tmp_path / (REPLICATION_OFFSET_CHECKPOINT_FILE + ".tmp")).exists()


def test_sync_file_system_syncs_or_names_the_path(tmp_path: Path) -> None:
    """Recovery writes its producer snapshots without an fsync each and syncs the data dir's file system once."""
    from kafkalite.storage.checkpoint import sync_file_system

    (tmp_path / "x.snapshot").write_bytes(b"1")
    sync_file_system(tmp_path)
    with pytest.raises(OSError, match="missing"):
        sync_file_system(tmp_path / "missing")


def test_repeated_small_content_is_parsed_once_but_every_reader_gets_its_own_entries(tmp_path: Path) -> None:
    """Loading reads thousands of identical epoch files and partition.metadata: their parse is kept by content.
    Each read still returns a list of its own, a malformed file is reported with its own path every time, and
    the same bytes mean different things in files of different formats."""
    from kafkalite.storage import checkpoint

    epochs = [LeaderEpochCheckpointFile(tmp_path / f"p{i}" / LEADER_EPOCH_CHECKPOINT_FILE) for i in range(2)]
    for f in epochs:
        f.path.parent.mkdir()
        f.path.write_bytes(b"0\n2\n0 0\n3 17\n")
    first = epochs[0].read()
    first.append(EpochEntry(9, 99))  # the caller's list is the caller's
    assert epochs[1].read() == [EpochEntry(0, 0), EpochEntry(3, 17)]
    assert epochs[0].read() == [EpochEntry(0, 0), EpochEntry(3, 17)]
    # valid as an epoch file, not as an offset checkpoint (three fields a line)
    offsets = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE)
    offsets.path.write_bytes(b"0\n2\n0 0\n3 17\n")
    with pytest.raises(CheckpointError, match=re.escape(str(offsets.path))):
        offsets.read()
    for f in epochs:  # the same malformed bytes in two files: each error names its own file
        f.path.write_bytes(b"0\n1\n0 x\n")
        with pytest.raises(CheckpointError, match=re.escape(str(f.path))):
            f.read()
    tid = uuid.uuid4()
    text = encode_partition_metadata(tid)
    assert decode_partition_metadata(text, "a") == decode_partition_metadata(text, "b") == tid
    bad = text.replace(b"version: 0", b"version: 7")
    for source in ("first-partition", "second-partition"):
        with pytest.raises(CheckpointError, match=source):
            decode_partition_metadata(bad, source)
    # bounded: a start-up aid, not a cache of every file ever read
    for i in range(checkpoint._MEMO_ENTRIES + 10):
        epochs[0].decode(f"0\n1\n{i} {i}\n".encode())
    assert len(checkpoint._DECODED) <= checkpoint._MEMO_ENTRIES
