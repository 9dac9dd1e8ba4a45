"""Kafka's small files: text checkpoints, the clean-shutdown marker, partition.metadata, meta.properties.

They are tiny and always rewritten whole, so every writer goes through `atomic_write`: after a
crash a reader sees either the old or the new content, never a mix, and nothing needs repair.

Readers are strict. None of these files has a checksum, so the only defence against a damaged
file is to refuse anything Kafka itself could not have written (missing final line end, wrong
counts, illegal topic characters, negative epochs). A refused file raises `CheckpointError` naming
the file and line; callers choose the fallback (log loading treats a bad recovery-point checkpoint
as empty, which only costs a longer recovery, whereas a silently misread offset loses data).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar, cast

from kafkalite.errors import KafkaStorageError
from kafkalite.storage.leader_epoch import EpochEntry
from kafkalite.storage.names import as_path

log = logging.getLogger("kafkalite.storage")

StrPath = str | os.PathLike[str]
TopicPartition = tuple[str, int]
T = TypeVar("T")
T_in = TypeVar("T_in")
T_out = TypeVar("T_out")
K = TypeVar("K")
V = TypeVar("V")

TMP_SUFFIX = ".tmp"

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA_FILE = "partition.metadata"
META_PROPERTIES_FILE = "meta.properties"

OFFSET_CHECKPOINT_VERSION = 0
LEADER_EPOCH_CHECKPOINT_VERSION = 0
CLEAN_SHUTDOWN_VERSION = 0
PARTITION_METADATA_VERSION = 0

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
MAX_TOPIC_LENGTH = 249

_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s, not Python's Unicode-wide one
_DECIMAL = re.compile(r"[+-]?[0-9]+")  # ASCII only: int() would also take "1_0" and "٣"
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


class CheckpointError(KafkaStorageError):
    """A small metadata file that Kafka could not have written: bad version, line, count or bytes.

    A KafkaStorageError, as in Kafka, where an unreadable checkpoint fails the log dir unless the
    caller has a documented fallback.
    """

    def __init__(self, source: object, reason: str, line_number: int | None = None) -> None:
        where = f"{source}" if line_number is None else f"{source}, line {line_number}"
        super().__init__(f"{where}: {reason}")
        self.source = str(source)
        self.reason = reason
        self.line_number = line_number


class MalformedFieldError(Exception):
    """Raised by an EntryFormat's parser for a bad field; the reader turns it into a CheckpointError
    with the file name and line number, which the parser does not know."""


# --- atomic write ------------------------------------------------------------------------------


_path_locks: dict[str, threading.Lock] = {}
_path_locks_guard = threading.Lock()


def _writer_lock(path: Path) -> threading.Lock:
    """One lock per file path in this process. Writers of a file share its `.tmp`, so two at once (a
    periodic checkpoint task and the shutdown's final checkpoint, say) would truncate each other's
    temp file and the second rename would fail; callers build a new checkpoint object per write, so
    a lock on the object cannot serialise them."""
    key = os.path.abspath(path)
    with _path_locks_guard:
        lock = _path_locks.get(key)
        if lock is None:
            lock = _path_locks[key] = threading.Lock()
        return lock


def atomic_write(path: StrPath, data: bytes, durable: bool = True, sync_dir: bool = True) -> None:
    """Replace `path` with `data` so that a crash at any moment leaves the old or the new content.

    The bytes reach the disk (`.tmp` fsync) before the rename publishes them, and the directory
    fsync makes the rename itself durable; without either, a power loss can leave an empty file.
    `durable=False` skips both fsyncs, for a file whose loss or emptiness after a power loss is
    repaired at the next start (the caller writes it durably again before relying on it).
    `sync_dir=False` skips only the directory fsync: for a file whose old version, or absence, after a power
    loss is safe (a producer snapshot: the loader falls back to an older one and replays the log).
    """
    target = Path(path)
    tmp = target.with_name(target.name + TMP_SUFFIX)
    with _writer_lock(target):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, target)
    if durable and sync_dir:
        fsync_dir(target.parent)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_file_if_exists(path: StrPath) -> None:
    """Make a file's contents durable; a file deleted meanwhile needs nothing (Kafka's Utils.flushFileIfExists)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: StrPath) -> None:
    """Make renames, creations and deletions in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_file_system(path: StrPath) -> None:
    """Make everything written on the file system holding `path` durable, with one syncfs(2).

    For many small files written without their own fsync (producer snapshots of a recovery of thousands of
    partitions): one journal commit instead of one per file. Falls back to sync(2) where syncfs is missing."""
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols, libc's among them
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs of {path} failed: {os.strerror(err)}")
    finally:
        os.close(fd)


_SMALL_READ = 65536


def read_small_file(path: StrPath) -> bytes:
    """The whole content of a small file (a checkpoint, a snapshot, partition.metadata).

    Three system calls where `open().read()` makes eight (fstat twice, an isatty ioctl, two lseeks): a broker
    loading 10,000 partitions reads three such files in each. A read of a regular file comes back short only at
    its end, so a file under 64 KiB is read with one `read`, not two. Raises FileNotFoundError like `open`."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, _SMALL_READ)]
        while len(chunks[-1]) == _SMALL_READ and (chunk := os.read(fd, _SMALL_READ)):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return read_small_file(path)
    except FileNotFoundError:
        return None


# --- field parsing -----------------------------------------------------------------------------


def _parse_int(text: str, low: int, high: int, what: str) -> int:
    if not _DECIMAL.fullmatch(text):
        raise MalformedFieldError(f"{what} {text!r} is not a decimal number")
    value = int(text)
    if not low <= value <= high:
        raise MalformedFieldError(f"{what} {value} is out of range [{low}, {high}]")
    return value


def _check_int(value: object, low: int, high: int, what: str) -> int:
    """Writers refuse what readers would refuse, so we never produce a file we cannot read back."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{what} must be an int in [{low}, {high}], got {value!r}")
    return value


def _is_legal_topic(topic: object) -> bool:
    if not isinstance(topic, str) or len(topic) > MAX_TOPIC_LENGTH:
        return False
    return bool(_LEGAL_TOPIC.fullmatch(topic))


def _split_fields(line: str) -> list[str]:
    """Java's `line.split("\\s+")`: leading blanks give an empty first field, trailing ones vanish."""
    fields = _JAVA_WHITESPACE.split(line)
    while fields and not fields[-1]:
        fields.pop()
    return fields


# --- generic text checkpoint -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryFormat(Generic[T]):
    """How one entry maps to the whitespace-separated fields of a checkpoint line.

    `parse` receives exactly `field_count` fields and raises `MalformedFieldError` on bad content;
    `fields` returns the values to write, already validated.
    """

    field_count: int
    fields: Callable[[T], tuple[object, ...]]
    parse: Callable[[list[str]], T]


# Loading reads a leader-epoch checkpoint and a partition.metadata in every partition directory, and those small
# files repeat: every partition of a topic has the same topic id, and partitions led since the same epoch the same
# epoch file. Their parse (lines, numbers, base64, the checks) is kept by content; only well-formed content is kept
# (a malformed file is parsed, and reported with its path, every time), and the entries kept are immutable.
_MEMO_BYTES = 128
_MEMO_ENTRIES = 4096
_DECODED: dict[tuple[int, int, bytes], tuple[object, ...]] = {}
_TOPIC_IDS: dict[bytes, uuid.UUID] = {}


def _memo(memo: dict[K, V], key: K, value: V) -> None:
    if len(memo) >= _MEMO_ENTRIES:
        memo.clear()  # a start-up aid, not a store: bounded, and refilled by what repeats
    memo[key] = value


class CheckpointFile(Generic[T]):
    """A versioned text file of entries: `version\\n count\\n entry\\n...` (Kafka's CheckpointFile).

    A missing file reads as empty, like Kafka (which creates an empty one up front); we avoid the
    side effect of creating files from a constructor.
    """

    def __init__(self, path: StrPath, version: int, entry_format: EntryFormat[T]) -> None:
        self.path = as_path(path)
        self.version = version
        self._format = entry_format
        self._lock = threading.Lock()

    def write(self, entries: Iterable[T], durable: bool = True) -> None:
        atomic_write(self.path, self.encode(entries), durable)  # serialised per path, across instances

    def read(self) -> list[T]:
        with self._lock:
            data = _read_or_none(self.path)
        return [] if data is None else self.decode(data)

    def encode(self, entries: Iterable[T]) -> bytes:
        lines = [" ".join(str(f) for f in self._format.fields(e)) for e in entries]
        return "".join(f"{line}\n" for line in [str(self.version), str(len(lines)), *lines]).encode()

    def decode(self, data: bytes) -> list[T]:
        """Parse checkpoint bytes; anything but a complete, well-formed file is a CheckpointError."""
        if not data:
            return []  # Kafka creates the file empty before the first write
        small = len(data) <= _MEMO_BYTES
        if small:
            known = _DECODED.get((self.version, id(self._format), data))
            if known is not None:
                return cast("list[T]", list(known))
        entries = self._decode(data)
        if small:
            _memo(_DECODED, (self.version, id(self._format), data), tuple(entries))
        return entries

    def _decode(self, data: bytes) -> list[T]:
        lines = self._lines(data)
        self._check_version(lines[0])
        if len(lines) < 2:
            raise CheckpointError(self.path, "truncated: no entry count line")
        expected = self._parse_line(lines[1], 2, lambda t: _parse_int(t, 0, INT32_MAX, "entry count"))
        entries = [self._parse_entry(line, number) for number, line in enumerate(lines[2:], start=3)]
        if len(entries) != expected:
            raise CheckpointError(self.path, f"expected {expected} entries, found {len(entries)}")
        return entries

    def _lines(self, data: bytes) -> list[str]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(self.path, f"not UTF-8 text (byte {e.start})") from None
        if not text.endswith("\n"):
            # Every line Kafka writes ends in "\n"; a missing one means a cut-off file whose
            # last line could otherwise parse as a smaller, wrong number.
            raise CheckpointError(self.path, "truncated: last line has no line end", text.count("\n") + 1)
        return text[:-1].split("\n")

    def _check_version(self, line: str) -> None:
        found = self._parse_line(line, 1, lambda t: _parse_int(t, INT32_MIN, INT32_MAX, "version"))
        if found != self.version:
            raise CheckpointError(self.path, f"unrecognised version {found}, expected {self.version}", 1)

    def _parse_entry(self, line: str, number: int) -> T:
        fields = _split_fields(line)
        if len(fields) != self._format.field_count:
            raise CheckpointError(
                self.path, f"malformed line, expected {self._format.field_count} fields: {line!r}", number
            )
        return self._parse_line(fields, number, self._format.parse)

    def _parse_line(self, value: T_in, number: int, parse: Callable[[T_in], T_out]) -> T_out:
        try:
            return parse(value)
        except MalformedFieldError as e:
            raise CheckpointError(self.path, f"malformed line: {e}", number) from None


# --- offset checkpoints ------------------------------------------------------------------------


def _offset_fields(entry: tuple[TopicPartition, int]) -> tuple[object, ...]:
    (topic, partition), offset = entry
    if not _is_legal_topic(topic):
        raise ValueError(f"illegal topic name for a checkpoint: {topic!r}")
    partition = _check_int(partition, 0, INT32_MAX, "partition")
    return topic, partition, _check_int(offset, INT64_MIN, INT64_MAX, "offset")


def _parse_offset(fields: list[str]) -> tuple[TopicPartition, int]:
    topic, partition, offset = fields
    if not _is_legal_topic(topic):
        raise MalformedFieldError(f"illegal topic name {topic!r}")
    key = (topic, _parse_int(partition, 0, INT32_MAX, "partition"))
    return key, _parse_int(offset, INT64_MIN, INT64_MAX, "offset")


_OFFSET_FORMAT: EntryFormat[tuple[TopicPartition, int]] = EntryFormat(3, _offset_fields, _parse_offset)


class OffsetCheckpointFile:
    """`topic partition offset` per line: recovery points, log start offsets, high watermarks,
    cleaner positions. Lines are written sorted so rewrites of the same map are byte-identical."""

    def __init__(self, path: StrPath) -> None:
        self._file = CheckpointFile(path, OFFSET_CHECKPOINT_VERSION, _OFFSET_FORMAT)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._file.write(sorted(offsets.items()))

    def read(self) -> dict[TopicPartition, int]:
        """The stored map; a repeated partition keeps its last value, as in Kafka."""
        return dict(self._file.read())

    def read_or_empty(self) -> dict[TopicPartition, int]:
        """Kafka's startup fallback for recovery-point and log-start checkpoints: warn, use {}.

        Safe because an empty recovery-point map only makes recovery start from offset 0.
        """
        try:
            return self.read()
        except CheckpointError as e:
            log.warning("ignoring unreadable checkpoint, treating it as empty: %s", e)
            return {}

    def encode(self, offsets: Mapping[TopicPartition, int]) -> bytes:
        return self._file.encode(sorted(offsets.items()))

    def decode(self, data: bytes) -> dict[TopicPartition, int]:
        return dict(self._file.decode(data))


# --- leader epoch checkpoint -------------------------------------------------------------------


def _epoch_fields(entry: EpochEntry) -> tuple[object, ...]:
    return (
        _check_int(entry.epoch, 0, INT32_MAX, "leader epoch"),
        _check_int(entry.start_offset, 0, INT64_MAX, "epoch start offset"),
    )


def _parse_epoch(fields: list[str]) -> EpochEntry:
    # Negative values are refused here rather than by the cache, so a damaged file is reported
    # as a damaged file instead of an argument error deep in LeaderEpochCache.
    epoch, start_offset = fields
    return EpochEntry(_parse_int(epoch, 0, INT32_MAX, "leader epoch"),
                      _parse_int(start_offset, 0, INT64_MAX, "start offset"))


_EPOCH_FORMAT: EntryFormat[EpochEntry] = EntryFormat(2, _epoch_fields, _parse_epoch)


class LeaderEpochCheckpointFile:
    """`epoch startOffset` per line, oldest epoch first, in a partition directory."""

    def __init__(self, path: StrPath) -> None:
        self._file = CheckpointFile(path, LEADER_EPOCH_CHECKPOINT_VERSION, _EPOCH_FORMAT)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Iterable[EpochEntry], durable: bool = True) -> None:
        self._file.write(entries, durable)

    def read(self) -> list[EpochEntry]:
        return self._file.read()

    def encode(self, entries: Iterable[EpochEntry]) -> bytes:
        return self._file.encode(entries)

    def decode(self, data: bytes) -> list[EpochEntry]:
        return self._file.decode(data)


# --- clean shutdown marker ---------------------------------------------------------------------


def encode_clean_shutdown(broker_epoch: int) -> bytes:
    """Exactly `{"version":0,"brokerEpoch":N}`: Kafka 3.7+ parses this JSON at startup."""
    _check_int(broker_epoch, INT64_MIN, INT64_MAX, "broker epoch")
    content = {"version": CLEAN_SHUTDOWN_VERSION, "brokerEpoch": broker_epoch}
    return json.dumps(content, separators=(",", ":")).encode()


def decode_clean_shutdown(data: bytes) -> int | None:
    """The broker epoch, or None for anything unreadable (including a legacy empty marker).

    None rather than an error: the marker's presence alone means "clean"; the epoch is a hint.
    Unknown fields are ignored so a newer Kafka's marker still counts.
    """
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    epoch = content.get("brokerEpoch") if isinstance(content, dict) else None
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not INT64_MIN <= epoch <= INT64_MAX:
        return None
    return epoch


def write_clean_shutdown_marker(log_dir: StrPath, broker_epoch: int) -> None:
    atomic_write(Path(log_dir) / CLEAN_SHUTDOWN_FILE, encode_clean_shutdown(broker_epoch))


def has_clean_shutdown_marker(log_dir: StrPath) -> bool:
    """Presence is what matters: Kafka 2.x-3.6 wrote an empty file, which still means clean."""
    return (Path(log_dir) / CLEAN_SHUTDOWN_FILE).exists()


def read_clean_shutdown_marker(log_dir: StrPath) -> int | None:
    """The broker epoch recorded at the last clean shutdown; None if missing or unreadable."""
    try:
        data = (Path(log_dir) / CLEAN_SHUTDOWN_FILE).read_bytes()
    except OSError:
        return None
    return decode_clean_shutdown(data)


def remove_clean_shutdown_marker(log_dir: StrPath) -> None:
    """Delete the marker durably: if the deletion were lost in a crash after startup, the next
    start would skip recovery of logs that were being written to."""
    path = Path(log_dir) / CLEAN_SHUTDOWN_FILE
    if path.exists():
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)


# --- uuids -------------------------------------------------------------------------------------


def uuid_to_base64(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: 16 bytes as URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_base64(text: str) -> uuid.UUID:
    """Inverse of `uuid_to_base64`; only the canonical 22-character form is accepted."""
    if len(text) != 22 or not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError(f"not a base64 uuid: {text!r}")
    try:
        value = uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
    except (binascii.Error, ValueError):
        raise ValueError(f"not a base64 uuid: {text!r}") from None
    if uuid_to_base64(value) != text:  # non-zero padding bits: not something Kafka wrote
        raise ValueError(f"not a canonical base64 uuid: {text!r}")
    return value


# --- partition.metadata ------------------------------------------------------------------------


def encode_partition_metadata(topic_id: uuid.UUID) -> bytes:
    if topic_id.int == 0:
        raise ValueError("the zero uuid is not a valid topic id")
    return f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {uuid_to_base64(topic_id)}".encode()


def decode_partition_metadata(data: bytes, source: object = PARTITION_METADATA_FILE) -> uuid.UUID:
    """The topic id; a CheckpointError for anything but Kafka's two-line, version-0 text."""
    known = _TOPIC_IDS.get(data)
    if known is not None:
        return known
    value = _decode_partition_metadata(data, source)
    if len(data) <= _MEMO_BYTES:
        _memo(_TOPIC_IDS, data, value)
    return value


def _decode_partition_metadata(data: bytes, source: object) -> uuid.UUID:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(source, f"not UTF-8 text (byte {e.start})") from None
    lines = text.removesuffix("\n").split("\n")
    if len(lines) != 2:
        raise CheckpointError(source, f"expected 2 lines, found {len(lines)}")
    version = _partition_metadata_field(lines[0], "version", source, 1)
    _check_partition_metadata_version(version, source)
    topic_id = _partition_metadata_field(lines[1], "topic_id", source, 2)
    try:
        value = uuid_from_base64(topic_id)
    except ValueError as e:
        raise CheckpointError(source, str(e), 2) from None
    if value.int == 0:
        raise CheckpointError(source, "the zero uuid is not a valid topic id", 2)
    return value


def _partition_metadata_field(line: str, key: str, source: object, number: int) -> str:
    match = re.fullmatch(rf"{key}:[ \t\x0b\f\r]+(\S+)", line)
    if match is None:
        raise CheckpointError(source, f"malformed line, expected '{key}: <value>': {line!r}", number)
    return match.group(1)


def _check_partition_metadata_version(text: str, source: object) -> None:
    try:
        version = _parse_int(text, INT32_MIN, INT32_MAX, "version")
    except MalformedFieldError as e:
        raise CheckpointError(source, str(e), 1) from None
    if version < 0:
        raise CheckpointError(source, f"invalid version {version}", 1)
    if version != PARTITION_METADATA_VERSION:
        raise CheckpointError(source, f"unrecognised version {version}", 1)


def write_partition_metadata(partition_dir: StrPath, topic_id: uuid.UUID) -> None:
    atomic_write(Path(partition_dir) / PARTITION_METADATA_FILE, encode_partition_metadata(topic_id))


def read_partition_metadata(partition_dir: StrPath) -> uuid.UUID | None:
    """The partition's topic id, or None when the file does not exist (topic ids not in use)."""
    path = Path(partition_dir) / PARTITION_METADATA_FILE
    data = _read_or_none(path)
    return None if data is None else decode_partition_metadata(data, path)


# --- meta.properties (Java Properties text) ----------------------------------------------------

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_SIMPLE_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "=": "\\=", ":": "\\:",
                   "#": "\\#", "!": "\\!", "\\": "\\\\"}
_UNESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_PROPERTY_BLANKS = " \t\f"


def _java_date(timestamp: float) -> str:
    """Java's Date.toString in UTC, English names regardless of locale, like the JVM default."""
    t = time.gmtime(timestamp)
    return (f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}")


def _escape_property(text: str, is_key: bool) -> str:
    """Properties.store escaping; output is pure ASCII, as Java writes to an OutputStream."""
    out = []
    for index, char in enumerate(text):
        if char == " ":
            out.append("\\ " if is_key or index == 0 else " ")
        elif char in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[char])
        elif " " < char <= "~":
            out.append(char)
        else:
            units = char.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[i]:02X}{units[i + 1]:02X}" for i in range(0, len(units), 2))
    return "".join(out)


def encode_properties(props: Mapping[str, str], *, timestamp: float | None = None) -> bytes:
    """Java `Properties.store(out, "")` output: `#`, `#<date>`, then `key=value` lines."""
    stamp = _java_date(time.time() if timestamp is None else timestamp)
    lines = ["#", f"#{stamp}"]
    lines += [f"{_escape_property(k, True)}={_escape_property(v, False)}" for k, v in props.items()]
    return "".join(f"{line}\n" for line in lines).encode("ascii")


def decode_properties(data: bytes, source: object = META_PROPERTIES_FILE) -> dict[str, str]:
    """Java `Properties.load(InputStream)`: ISO-8859-1 text, so any bytes decode; only a bad
    `\\uXXXX` escape is an error. Later duplicates win."""
    props: dict[str, str] = {}
    for number, line in _logical_property_lines(data.decode("latin-1")):
        key, value = _split_property(line)
        try:
            props[_unescape_property(key)] = _unescape_property(value)
        except MalformedFieldError as e:
            raise CheckpointError(source, str(e), number) from None
    return props


def _logical_property_lines(text: str) -> Iterator[tuple[int, str]]:
    """Join continuation lines (odd trailing backslashes) and drop blanks and comments."""
    pending: str | None = None
    start = 0
    for number, raw in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        line = raw.lstrip(_PROPERTY_BLANKS)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending, start = "", number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = None
    if pending:
        yield start, pending


def _split_property(line: str) -> tuple[str, str]:
    """Key ends at the first unescaped `=`, `:` or blank; then blanks and at most one `=`/`:`
    (only if the key did not already end at one) are skipped before the value."""
    end = 0
    while end < len(line) and line[end] not in "=:" + _PROPERTY_BLANKS:
        end += 2 if line[end] == "\\" else 1
    if end >= len(line):
        return line, ""
    has_separator = line[end] in "=:"
    start = end + 1
    while start < len(line):
        if line[start] in _PROPERTY_BLANKS:
            start += 1
        elif not has_separator and line[start] in "=:":
            has_separator = True
            start += 1
        else:
            break
    return line[:end], line[start:]


def _unescape_property(text: str) -> str:
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\":
            out.append(char)
        elif index < len(text):
            escaped = text[index]
            index += 1
            if escaped == "u":
                out.append(_unicode_escape(text[index:index + 4]))
                index += 4
            else:
                out.append(_UNESCAPES.get(escaped, escaped))
    return _join_surrogates("".join(out))


def _unicode_escape(digits: str) -> str:
    if len(digits) != 4 or not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
        raise MalformedFieldError(f"malformed \\uxxxx escape: \\u{digits!r}")
    return chr(int(digits, 16))


def _join_surrogates(text: str) -> str:
    """Java writes characters beyond U+FFFF as two \\u escapes; turn the pair back into one."""
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        return text  # an unpaired surrogate: keep it as Java would


def write_meta_properties(
    log_dir: StrPath, props: Mapping[str, str], *, timestamp: float | None = None
) -> None:
    atomic_write(Path(log_dir) / META_PROPERTIES_FILE, encode_properties(props, timestamp=timestamp))


def read_meta_properties(log_dir: StrPath) -> dict[str, str] | None:
    """The log dir's identity properties, or None when the dir has none yet."""
    path = Path(log_dir) / META_PROPERTIES_FILE
    data = _read_or_none(path)
    return None if data is None else decode_properties(data, path)


def kraft_meta_properties(
    node_id: int, cluster_id: str, directory_id: uuid.UUID | None = None
) -> dict[str, str]:
    """A version-1 (KRaft) meta.properties: node.id and cluster.id, optionally directory.id."""
    _check_int(node_id, 0, INT32_MAX, "node.id")
    if not cluster_id:
        raise ValueError("cluster.id must not be empty")
    props = {"version": "1", "node.id": str(node_id), "cluster.id": cluster_id}
    if directory_id is not None:
        props["directory.id"] = uuid_to_base64(directory_id)
    return props


def validate_meta_properties(props: Mapping[str, str], source: object = META_PROPERTIES_FILE) -> None:
    """Check the keys Kafka requires for the declared version (0: broker.id; 1: node.id, cluster.id).

    meta.properties has no checksum and Properties text accepts almost any bytes, so this is the
    only way to tell a damaged file from a valid one.
    """
    required = {"0": ("broker.id",), "1": ("node.id", "cluster.id")}.get(props.get("version", ""))
    if required is None:
        raise CheckpointError(source, f"unsupported version {props.get('version')!r}")
    for key in required:
        if not props.get(key):
            raise CheckpointError(source, f"missing {key}")
    for key in ("broker.id", "node.id"):
        if key in props and not _DECIMAL.fullmatch(props[key]):
            raise CheckpointError(source, f"{key} {props[key]!r} is not a number")
    if "directory.id" in props:
        try:
            uuid_from_base64(props["directory.id"])
        except ValueError as e:
            raise CheckpointError(source, f"directory.id: {e}") from None
