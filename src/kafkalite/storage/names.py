"""File and directory names of Kafka's log layout (LogFileUtils / LocalLog naming helpers).

Names are part of the on-disk format: Kafka finds segments, snapshots and partitions only by
these patterns, so every name in kafkalite is produced and parsed here and nowhere else.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

MAX_DIR_NAME_LENGTH = 255

_DIR_WITH_SUFFIX = re.compile(r"^(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)$")


def as_path(p: Path | str | os.PathLike[str]) -> Path:
    """`p` as a Path, the same object when it already is one: `Path(path)` copies it (its parts list and cached
    string), and every partition keeps a dozen paths, which a broker with thousands of partitions pays for."""
    return p if isinstance(p, Path) else Path(p)


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit zero-padded decimal offset every segment-level file name starts with."""
    return f"{offset:020d}"


def offset_from_file_name(name: str) -> int:
    """Kafka parses the offset as the text before the first dot."""
    prefix = name.rpartition("/")[2].split(".", 1)[0]  # no Path: every partition's load parses a few names
    if not (prefix.isascii() and prefix.isdigit()):
        raise ValueError(f"not a segment file name: {name!r}")
    return int(prefix)


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return as_path(directory) / (filename_prefix_from_offset(offset) + LOG_SUFFIX + suffix)


def offset_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return as_path(directory) / (filename_prefix_from_offset(offset) + INDEX_SUFFIX + suffix)


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return as_path(directory) / (filename_prefix_from_offset(offset) + TIME_INDEX_SUFFIX + suffix)


def txn_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return as_path(directory) / (filename_prefix_from_offset(offset) + TXN_INDEX_SUFFIX + suffix)


def snapshot_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return as_path(directory) / (filename_prefix_from_offset(offset) + SNAPSHOT_SUFFIX + suffix)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def _suffixed_dir_name(topic: str, partition: int, suffix: str, cap: bool) -> str:
    tail = f"-{partition}.{uuid.uuid4().hex}{suffix}"
    if cap and len(topic) + len(tail) > MAX_DIR_NAME_LENGTH:
        topic = topic[: MAX_DIR_NAME_LENGTH - len(tail)]
    return topic + tail


def delete_dir_name(topic: str, partition: int) -> str:
    """`topic-partition.<uuid>-delete`, topic truncated so the name fits in 255 characters."""
    return _suffixed_dir_name(topic, partition, DELETE_DIR_SUFFIX, cap=True)


def stray_dir_name(topic: str, partition: int) -> str:
    return _suffixed_dir_name(topic, partition, STRAY_DIR_SUFFIX, cap=True)


def future_dir_name(topic: str, partition: int) -> str:
    return _suffixed_dir_name(topic, partition, FUTURE_DIR_SUFFIX, cap=False)


def parse_topic_partition_name(name: str) -> tuple[str, int]:
    """Inverse of the partition dir names, with Kafka's rules; ValueError names what is wrong."""
    original = name
    if not name or "-" not in name:
        raise ValueError(f"found directory {original!r}, which is not in the form topic-partition")
    if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
        if not _DIR_WITH_SUFFIX.match(name):
            raise ValueError(f"found directory {original!r}, which is not in the form topic-partition.uniqueId-suffix")
        name = name[: name.rindex(".")]
    topic, _, partition = name.rpartition("-")
    if not topic or not partition or not re.fullmatch(r"-?\d+", partition):
        raise ValueError(f"found directory {original!r}, which is not in the form topic-partition")
    return topic, int(partition)
