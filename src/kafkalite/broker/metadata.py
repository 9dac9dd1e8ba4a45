"""Topic metadata of a single broker: which topics exist, their ids, partition counts and config overrides.

Kafka keeps this in its metadata quorum (`__cluster_metadata`); a one-node kafkalite keeps it in one JSON
file next to the data, `kafkalite-metadata.json` in the first log dir, written atomically. The partition
directories stay the source of truth for data: a directory written by another Kafka implementation is
adopted at start-up (its `partition.metadata` topic id is kept), so serving an existing Kafka data dir works.
The producer-id allocator lives here too, because an id must never be handed out twice across restarts.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kafkalite.errors import InvalidTopicError, KafkaliteError, KafkaStorageError, metadata_write_error
from kafkalite.storage.checkpoint import (
    PARTITION_METADATA_FILE,
    atomic_write,
    decode_partition_metadata,
    encode_partition_metadata,
)

if TYPE_CHECKING:
    from kafkalite.storage.log import Log

log = logging.getLogger("kafkalite.broker.metadata")

METADATA_FILE = "kafkalite-metadata.json"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def halt_on_metadata_dir_failure(path: Path, exc: OSError) -> None:
    """Kafka halts a broker whose metadata log dir fails: without its topic registry it can't go on safely.
    The log line says which dir and what to do, because the process ends right after it."""
    log.critical("The metadata dir %s failed (%s): the broker cannot record topic changes and halts, as Kafka "
                 "does when its metadata log dir fails. Fix or replace the disk of %s (its %s must be readable "
                 "and writable), then restart the broker", path.parent, exc, path.parent, METADATA_FILE)
    for h in logging.getLogger().handlers + log.handlers:
        h.flush()
    os._exit(1)


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: non-empty, not `.`/`..`, at most 249 chars of [a-zA-Z0-9._-]."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
                                "characters")
    if not _LEGAL.match(name):
        raise InvalidTopicError(f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
                                "alphanumerics, '.', '_' and '-'")


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataStore:
    """The topic registry and producer-id allocator of one broker; every change is saved before it is used."""

    def __init__(self, directory: Path,
                 on_fatal: Callable[[Path, OSError], None] = halt_on_metadata_dir_failure, persist: bool = True
                 ) -> None:
        self.path = Path(directory) / METADATA_FILE
        self.on_fatal = on_fatal
        # Single-broker mode keeps the file through cluster/local_store.py (the cluster's znodes, which this
        # class reads compatibly): there this registry is the broker's view of what it hosts, not saved.
        self.persist = persist
        self.topics: dict[str, TopicInfo] = {}
        self._producer_id_limit = 0  # see producer_id_limit
        self._lock = threading.RLock()
        self._load()

    # --- persistence ------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            for t in doc.get("topics", []):
                info = TopicInfo(str(t["name"]), uuid.UUID(t["id"]), int(t["partitions"]),
                                 {str(k): str(v) for k, v in t.get("configs", {}).items()})
                self.topics[info.name] = info
            self._producer_id_limit = int(doc.get("next_producer_id_block", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise KafkaliteError(f"{self.path} is malformed ({exc}); fix or remove it (topics are then adopted "
                                 "from the partition directories, without their config overrides)") from None

    def _save(self) -> None:
        """Write the file, or raise KafkaStorageError with the in-memory state left for the caller to undo.

        A full disk is the operator's to fix and fails only the request; descriptor exhaustion likewise.
        Any other I/O error means the metadata dir is lost: fatal (`on_fatal`), as in Kafka."""
        if not self.persist:
            return
        try:
            self._write()
        except OSError as exc:
            retriable = metadata_write_error(self.path, exc)
            if retriable is not None:
                raise retriable from exc
            self.on_fatal(self.path, exc)
            raise KafkaStorageError(f"the metadata dir {self.path.parent} failed: {exc}") from exc

    def _changed(self, undo: Callable[[], object]) -> None:
        """Save after an in-memory change; if the save fails, `undo` puts memory back as the file still is."""
        try:
            self._save()
        except BaseException:
            undo()
            raise

    def _write(self) -> None:
        doc = {
            "version": 1,
            "topics": [{"name": t.name, "id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                       for t in sorted(self.topics.values(), key=lambda t: t.name)],
            "next_producer_id_block": self._producer_id_limit,
        }
        atomic_write(self.path, json.dumps(doc, indent=1).encode() + b"\n")

    # --- topics ----------------------------------------------------------------------------------

    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def check_new_name(self, name: str) -> None:
        validate_topic_name(name)
        key = _collision_key(name)
        for other in self.topics:
            if other != name and _collision_key(other) == key:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}")

    def add(self, name: str, partitions: int, configs: dict[str, str], topic_id: uuid.UUID | None = None
            ) -> TopicInfo:
        with self._lock:
            info = TopicInfo(name, topic_id or uuid.uuid4(), partitions, dict(configs))
            self.topics[name] = info
            self._changed(lambda: self.topics.pop(name, None))
            return info

    def remove(self, name: str) -> TopicInfo | None:
        with self._lock:
            info = self.topics.pop(name, None)
            if info is not None:
                self._changed(lambda: self.topics.__setitem__(name, info))
            return info

    def set_partitions(self, name: str, partitions: int) -> None:
        with self._lock:
            info = self.topics[name]
            old = info.partitions
            info.partitions = partitions
            self._changed(lambda: setattr(info, "partitions", old))

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._lock:
            info = self.topics[name]
            old = info.configs
            info.configs = dict(configs)
            self._changed(lambda: setattr(info, "configs", old))

    def adopt(self, partitions_on_disk: dict[str, list[tuple[int, Path]]]) -> list[str]:
        """Register topics found on disk but unknown here (a data dir from another writer); returns them."""
        adopted = []
        with self._lock:
            before = copy.deepcopy(self.topics)
            for name, parts in sorted(partitions_on_disk.items()):
                count = max(p for p, _ in parts) + 1
                known = self.topics.get(name)
                if known is not None:
                    if count > known.partitions:
                        known.partitions = count
                        adopted.append(name)
                    continue
                topic_id = None
                for _p, path in parts:
                    topic_id = read_partition_topic_id(path)
                    if topic_id is not None:
                        break
                self.topics[name] = TopicInfo(name, topic_id or uuid.uuid4(), count, {})
                adopted.append(name)
            if adopted:
                self._changed(lambda: setattr(self, "topics", before))
        return adopted

    @property
    def producer_id_limit(self) -> int:
        """Producer ids below this were handed out by a kafkalite older than the cluster store (which hands them
        out now, cluster/local_store.py); kept in the file so such a version, reading it, never repeats one."""
        return self._producer_id_limit


def read_partition_topic_id(partition_dir: Path) -> uuid.UUID | None:
    try:
        return decode_partition_metadata((partition_dir / PARTITION_METADATA_FILE).read_bytes(),
                                         partition_dir / PARTITION_METADATA_FILE)
    except FileNotFoundError:
        return None
    except KafkaliteError as exc:
        log.warning("%s; a new partition.metadata is written", exc)
        return None


def write_partition_topic_id(partition_dir: Path, topic_id: uuid.UUID) -> None:
    """Kafka writes partition.metadata in every partition dir so a dir can't be confused with a recreated topic."""
    if read_partition_topic_id(partition_dir) != topic_id:
        atomic_write(partition_dir / PARTITION_METADATA_FILE, encode_partition_metadata(topic_id))


def ensure_log_topic_id(lg: Log, topic_id: uuid.UUID) -> None:
    """`write_partition_topic_id` for a loaded log, which knows its file's topic id (read at load, kept on the
    Log): every LeaderAndIsr names each partition's topic id, and reading the file back for each cost
    ~0.15 ms a partition (1.5 s of a 10,000-partition broker's start)."""
    if lg.topic_id != topic_id:
        atomic_write(lg.dir / PARTITION_METADATA_FILE, encode_partition_metadata(topic_id))
        lg.topic_id = topic_id
