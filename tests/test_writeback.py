"""The write-out of a segment's appended bytes started on the writeback thread (storage/writeback.py): every
KICK_BYTES of appends is handed over, a closed file's descriptor is never used, a truncation takes back what it
cut, and a file that never grows that much carries no state for it."""

from __future__ import annotations

import time

import pytest

from kafkalite.storage import writeback
from kafkalite.storage.file_records import FileRecords

pytestmark = pytest.mark.skipif(not writeback.supported(), reason="sync_file_range(2) is Linux's")

CHUNK = b"x" * (1024 * 1024)


def _handed_over(fr: FileRecords, at_least: int, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while fr._kicked < at_least:
        assert time.monotonic() < deadline, f"only {fr._kicked} of {at_least} bytes handed to the writeback thread"
        time.sleep(0.01)
    return fr._kicked


def test_every_kick_bytes_of_appends_is_handed_to_the_writeback_thread(tmp_path):
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    chunks = 3 * writeback.KICK_BYTES // len(CHUNK) + 1
    for _ in range(chunks):
        fr.append(CHUNK)
    assert _handed_over(fr, 3 * writeback.KICK_BYTES) <= fr.size
    fr.append(CHUNK)  # below KICK_BYTES since the last kick: nothing more is asked for
    time.sleep(0.05)
    assert fr._kicked <= 3 * writeback.KICK_BYTES + len(CHUNK) and not fr._kick_pending
    assert fr.read(0, 4) == b"xxxx" and fr.size == (chunks + 1) * len(CHUNK)
    fr.close()


def test_a_closed_files_descriptor_is_never_used_and_the_thread_goes_on(tmp_path):
    """A kick still queued when its file closes finds fd -1 (the number may already be another file's)."""
    first = FileRecords(tmp_path / "a.log")
    for _ in range(writeback.KICK_BYTES // len(CHUNK)):
        first.append(CHUNK)
    first.close()  # waits for the thread if it is using the descriptor right now
    assert first.writeback_range()[0] == -1
    second = FileRecords(tmp_path / "b.log")
    for _ in range(writeback.KICK_BYTES // len(CHUNK)):
        second.append(CHUNK)
    assert _handed_over(second, writeback.KICK_BYTES) == writeback.KICK_BYTES
    second.close()


def test_a_truncation_takes_back_what_it_cut(tmp_path):
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    for _ in range(writeback.KICK_BYTES // len(CHUNK)):
        fr.append(CHUNK)
    _handed_over(fr, writeback.KICK_BYTES)
    fr.truncate_to(len(CHUNK))
    assert fr._kicked == len(CHUNK)
    for _ in range(writeback.KICK_BYTES // len(CHUNK)):
        fr.append(CHUNK)
    assert _handed_over(fr, writeback.KICK_BYTES + len(CHUNK)) == fr.size
    fr.close()


def test_a_small_file_carries_no_writeback_state(tmp_path):
    """Most of 10,000 partitions never append KICK_BYTES: the class defaults serve them (idle RSS per partition)."""
    fr = FileRecords(tmp_path / "00000000000000000000.log")
    fr.append(CHUNK)
    assert not {"writeback_lock", "_kicked", "_kick_pending"} & set(vars(fr))
    fr.close()
