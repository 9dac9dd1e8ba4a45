"""Topic administration on one broker: CreateTopics, CreatePartitions, DeleteTopics and topic config
changes, with Kafka's validation, and the partition creation behind them.

Creating partitions costs a few ms each (new files, fsyncs), so thousands would stall every client if
made on the event loop: CreateTopics and CreatePartitions make them in chunks on worker threads, checking
between chunks that the topic was not deleted meanwhile. The metadata is written before the partition
dirs, so `startup` finishes a creation a crash cut off. Which partitions this broker leads is the
ReplicaManager's business: a new partition is handed to it (`lead_locally`, single-broker mode) and a
deleted one removed through it, so its `Partition` objects and purgatory stay in step.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kafkalite.broker.metadata import TopicInfo, write_partition_topic_id
from kafkalite.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaliteError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkalite.manager.log_manager import FDS_PER_PARTITION, open_descriptors
from kafkalite.storage.log_config import LogConfig

if TYPE_CHECKING:
    from kafkalite.broker.replica_manager import ReplicaManager

log = logging.getLogger("kafkalite.broker")

# Kafka refuses a CreateTopics/CreatePartitions that would create more than this many partitions
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, POLICY_VIOLATION): one request must not be able to
# monopolise the broker.
MAX_PARTITIONS_PER_REQUEST = 10_000
CREATE_CHUNK = 100  # partitions per step of a creation, between which a deletion of the topic is seen
CREATE_THREADS = 4  # threads creating one chunk: a new log is mostly fsync waits, which overlap
DESCRIPTOR_HEADROOM = 128  # descriptors kept free for connections, segment rolls and checkpoint files


class TopicAdmin:
    """Creates, grows, reconfigures and deletes topics of the broker's metadata and LogManager."""

    def __init__(self, replicas: ReplicaManager) -> None:
        self.replicas = replicas
        self.logs = replicas.logs
        self.metadata = replicas.metadata
        self._creating: set[str] = set()  # topics whose partitions a CreateTopics/CreatePartitions is making
        self._reserved_partitions = 0  # partitions those requests will still open files for
        self._creator: ThreadPoolExecutor | None = None

    def startup(self) -> None:
        """Adopt partition dirs unknown to the metadata and create the missing ones of known topics."""
        self.adopt_logs()
        for info in list(self.metadata.topics.values()):
            self.ensure_partitions(info)

    def adopt_logs(self) -> None:
        """Register logs the metadata doesn't know: dirs from another writer at start-up, or partitions
        created directly on the LogManager (the group coordinator's `__consumer_offsets`)."""
        on_disk: dict[str, list[tuple[int, Any]]] = {}
        for lg in self.logs.all_logs():
            on_disk.setdefault(lg.topic, []).append((lg.partition, lg.dir))
        for name in self.metadata.adopt(on_disk):
            info = self.metadata.topics[name]
            log.info("Registered topic %s found in the data directory (%d partitions)", name, info.partitions)
            for _p, path in on_disk[name]:
                write_partition_topic_id(path, info.topic_id)

    def ensure_partitions(self, info: TopicInfo, partitions: range | None = None) -> None:
        """Create what is missing of `partitions` (all by default); at start-up this finishes a creation
        that a crash cut off, since the metadata is always written before the partition dirs."""
        overrides = info.configs or None
        for p in partitions if partitions is not None else range(info.partitions):
            try:
                if self.logs.get_log(info.name, p) is None and not self.logs.is_offline(info.name, p):
                    created = self.logs.get_or_create_log(info.name, p, overrides)
                    self.replicas.lead_locally(created)
                lg = self.logs.get_log(info.name, p)
                if lg is not None:
                    write_partition_topic_id(lg.dir, info.topic_id)
            except OSError as exc:
                raise self.replicas.io_failed(info.name, p, exc) from exc

    async def create_logs(self, wanted: list[tuple[str, int, dict[str, str], uuid.UUID | None]]) -> None:
        """Make the missing logs of `wanted` (topic, partition, config overrides, topic id to write in its
        partition.metadata) in chunks on worker threads,
        as a creation does: what the controller's LeaderAndIsr hands this broker may be thousands of new
        partitions. A failure is logged and left to the caller, which tries that partition again itself
        and reports its error."""
        missing = [w for w in wanted if self.logs.get_log(w[0], w[1]) is None and not self.logs.is_offline(w[0], w[1])]
        if not missing:
            return
        loop = asyncio.get_running_loop()
        if self._creator is None:
            self._creator = ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="partition-creation")

        def make(part: list[tuple[str, int, dict[str, str], uuid.UUID | None]]) -> None:
            for topic, p, configs, topic_id in part:
                try:
                    lg = self.logs.get_or_create_log(topic, p, configs or None)
                    if topic_id is not None:
                        write_partition_topic_id(lg.dir, topic_id)
                except (OSError, KafkaliteError) as exc:
                    log.warning("Cannot create the log of %s-%d: %s", topic, p, exc)

        self._reserved_partitions += len(missing)
        try:
            for lo in range(0, len(missing), CREATE_CHUNK):
                chunk = missing[lo:lo + CREATE_CHUNK]
                parts = [chunk[i::CREATE_THREADS] for i in range(CREATE_THREADS) if chunk[i::CREATE_THREADS]]
                await asyncio.gather(*(loop.run_in_executor(self._creator, make, part) for part in parts))
        finally:
            self._reserved_partitions -= len(missing)

    def check_new_partitions(self, count: int) -> None:
        """Refuse, before anything is written, a request that would create more partitions than Kafka allows
        in one request or than the broker's open-file limit can keep open (POLICY_VIOLATION)."""
        if count > MAX_PARTITIONS_PER_REQUEST:
            raise PolicyViolationError(f"Excessively large number of partitions per request: {count} requested, "
                                       f"at most {MAX_PARTITIONS_PER_REQUEST} may be created by one request "
                                       "(Kafka's limit); split it into several requests")
        used, limit = open_descriptors()
        need = (self._reserved_partitions + count) * FDS_PER_PARTITION
        if used + need + DESCRIPTOR_HEADROOM > limit:
            pending = self._reserved_partitions
            also = f"; {pending} partitions of other requests are still being created" if pending else ""
            raise PolicyViolationError(
                f"Creating {count} partitions needs about {count * FDS_PER_PARTITION} more open files, but the "
                f"broker has {used} open of its limit of {limit} (RLIMIT_NOFILE; {DESCRIPTOR_HEADROOM} are kept "
                f"for connections{also}): "
                "raise the broker's open file limit (ulimit -n, or LimitNOFILE= for systemd) and restart it, "
                "or create fewer partitions")

    def validate_topic_configs(self, configs: dict[str, str]) -> LogConfig:
        try:
            return LogConfig.from_props(configs, self.logs.default_config)
        except InvalidConfigError:
            raise
        except (ValueError, TypeError) as exc:
            raise InvalidConfigError(str(exc)) from None

    def _check_new_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        if name in self.metadata.topics:
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if name in self._creating:
            raise TopicAlreadyExistsError(f"Topic '{name}' is still being created or removed; retry later.")
        self.metadata.check_new_name(name)
        if partitions <= 0:
            raise InvalidPartitionsError("Number of partitions must be larger than 0.")
        self.validate_topic_configs(configs)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str], validate_only: bool = False
                     ) -> TopicInfo:
        """Create a topic on the calling thread: for the few partitions of auto-creation; CreateTopics uses
        `create_topic_async`, which keeps the event loop serving while thousands are made."""
        self._check_new_topic(name, partitions, configs)
        self.check_new_partitions(partitions)
        if validate_only:
            return TopicInfo(name, uuid.uuid4(), partitions, configs)
        info = self.metadata.add(name, partitions, configs)
        if configs:
            self.logs.update_topic_config(name, configs)
        try:
            self.ensure_partitions(info)
        except KafkaliteError:
            self._undo_new_partitions(info, range(partitions), drop_topic=True)
            raise
        log.info("Created topic %s with %d partition(s)%s", name, partitions,
                 f" and configs {configs}" if configs else "")
        return info

    async def create_topic_async(self, name: str, partitions: int, configs: dict[str, str],
                                 validate_only: bool = False, *, checked: bool = False) -> TopicInfo:
        """CreateTopics: metadata first (so a crash is finished at the next start), then the partition dirs
        in chunks on a worker thread; a failure removes what was made. `checked`: the caller already ran
        check_new_partitions for the whole request."""
        self._check_new_topic(name, partitions, configs)
        if not checked:
            self.check_new_partitions(partitions)
        if validate_only:
            return TopicInfo(name, uuid.uuid4(), partitions, configs)
        info = self.metadata.add(name, partitions, configs)
        if configs:
            self.logs.update_topic_config(name, configs)
        started = time.perf_counter()
        await self._create_in_chunks(info, range(partitions), drop_topic=True)
        log.info("Created topic %s with %d partition(s)%s in %.0f ms", name, partitions,
                 f" and configs {configs}" if configs else "", (time.perf_counter() - started) * 1000)
        return info

    async def _create_in_chunks(self, info: TopicInfo, partitions: range, *, drop_topic: bool) -> None:
        """Chunks of CREATE_CHUNK partitions, each split over CREATE_THREADS worker threads: a new log
        costs a few fsyncs, which overlap across threads while the event loop keeps serving."""
        loop = asyncio.get_running_loop()
        if self._creator is None:
            self._creator = ThreadPoolExecutor(CREATE_THREADS, thread_name_prefix="partition-creation")
        self._creating.add(info.name)
        self._reserved_partitions += len(partitions)
        try:
            for lo in range(partitions.start, partitions.stop, CREATE_CHUNK):
                chunk = range(lo, min(lo + CREATE_CHUNK, partitions.stop))
                if self.metadata.get(info.name) is not info:
                    raise UnknownTopicOrPartitionError(f"Topic '{info.name}' was deleted while its partitions "
                                                       "were being created")
                parts = [chunk[i::CREATE_THREADS] for i in range(CREATE_THREADS) if chunk[i::CREATE_THREADS]]
                outcomes = await asyncio.gather(
                    *(loop.run_in_executor(self._creator, self.ensure_partitions, info, part) for part in parts),
                    return_exceptions=True)
                failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
                if failed is not None:
                    self._undo_new_partitions(info, partitions, drop_topic=drop_topic)
                    raise failed
                if self.metadata.get(info.name) is not info:  # deleted meanwhile: drop what this chunk made
                    for p in chunk:
                        self.replicas.remove_partition(info.name, p)
                    raise UnknownTopicOrPartitionError(f"Topic '{info.name}' was deleted while its partitions "
                                                       "were being created")
        finally:
            self._creating.discard(info.name)
            self._reserved_partitions -= len(partitions)

    def _undo_new_partitions(self, info: TopicInfo, partitions: range, *, drop_topic: bool) -> None:
        """A creation failed part-way: remove its partitions (and the topic, when it was new) so the topic
        is as before the request; logged, since a second failure here leaves it for the next start-up."""
        try:
            if self.metadata.get(info.name) is info:
                if drop_topic:
                    self.metadata.remove(info.name)
                else:
                    self.metadata.set_partitions(info.name, partitions.start)
            for p in partitions:
                self.replicas.remove_partition(info.name, p)
            log.warning("Removed the partitions %d..%d of %s after its creation failed", partitions.start,
                        partitions.stop - 1, info.name)
        except (OSError, KafkaliteError) as exc:
            log.error("Could not remove the partly created partitions of %s (%s); the next start-up completes "
                      "them", info.name, exc)

    async def create_partitions_async(self, name: str, count: int, validate_only: bool = False) -> None:
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        if name in self._creating:
            raise InvalidPartitionsError(f"Topic '{name}' is still being created; retry later.")
        if count <= info.partitions:
            raise InvalidPartitionsError(f"Topic currently has {info.partitions} partitions, which is higher than "
                                         f"or equal to the requested {count}.")
        old = info.partitions
        self.check_new_partitions(count - old)
        if validate_only:
            return
        self.metadata.set_partitions(name, count)
        await self._create_in_chunks(info, range(old, count), drop_topic=False)
        log.info("Increased the partitions of %s from %d to %d", name, old, count)

    def delete_topic(self, name: str) -> TopicInfo:
        info = self.metadata.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        if info.internal:
            raise InvalidTopicError(f"Topic {name} is an internal topic and cannot be deleted")
        self.metadata.remove(name)
        for p in range(info.partitions):
            self.replicas.remove_partition(name, p)
        log.info("Deleted topic %s; its partition dirs are renamed *-delete and removed after "
                 "log.segment.delete.delay.ms", name)
        return info

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        self.validate_topic_configs(configs)
        if validate_only:
            return
        self.metadata.set_configs(name, configs)
        self.logs.update_topic_config(name, configs)
        log.info("Updated the configs of topic %s: %s", name, configs or "(all defaults)")
