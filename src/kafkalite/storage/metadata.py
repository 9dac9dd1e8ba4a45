"""Small value types shared by segments and logs: where an offset lives, and what a read returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from kafkalite.storage.file_records import FileSlice

UNKNOWN_OFFSET = -1
UNKNOWN_FILE_POSITION = -1


class LogOffsetMetadata(NamedTuple):
    """An offset, and when known the segment and byte position it lives at (Kafka's LogOffsetMetadata).

    A NamedTuple because one is built on every append (the new log end offset)."""

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = UNKNOWN_FILE_POSITION

    def message_offset_only(self) -> bool:
        return self.segment_base_offset == UNKNOWN_OFFSET and self.relative_position_in_segment == UNKNOWN_FILE_POSITION

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        if self.message_offset_only():
            raise ValueError(f"{self} cannot compare its segment info with {other} since it only has message offset")
        return self.segment_base_offset < other.segment_base_offset

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset == other.segment_base_offset


@dataclass(slots=True)
class FetchDataInfo:
    """The result of a read: batch-aligned bytes (a file slice, or empty) and where the read started."""

    fetch_offset_metadata: LogOffsetMetadata
    records: FileSlice | bytes = b""
    first_entry_incomplete: bool = False
    aborted_transactions: list | None = field(default=None)

    @property
    def size(self) -> int:
        return len(self.records)

    def tobytes(self) -> bytes:
        return self.records if isinstance(self.records, bytes) else self.records.tobytes()
