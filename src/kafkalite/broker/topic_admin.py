"""Topic administration on one broker: the local side of what the controller decides, with Kafka's checks.

Topics are created, grown and deleted through the cluster store and the controller in both modes
(broker/topic_apis.py; a single broker is its own controller over cluster/local_store.py). What is this
broker's own business lives here: refusing, before anything is written, a request beyond Kafka's
partition limit or this broker's open-file limit; making the logs a LeaderAndIsr hands it, in chunks on
worker threads (a few ms each: thousands made on the event loop would stall every client); adopting
partition dirs found on disk; validating and applying topic configs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafkalite.broker.metadata import MetadataStore, ensure_log_topic_id
from kafkalite.errors import (
    InvalidConfigError,
    KafkaliteError,
    PolicyViolationError,
    UnknownTopicOrPartitionError,
)
from kafkalite.manager.log_manager import FDS_PER_PARTITION, LogManager, open_descriptors
from kafkalite.storage.log_config import LogConfig, deprecation_warnings

log = logging.getLogger("kafkalite.broker")

# Kafka refuses a CreateTopics/CreatePartitions that would create more than this many partitions
# (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, POLICY_VIOLATION): one request must not be able to
# monopolise the broker.
MAX_PARTITIONS_PER_REQUEST = 10_000
CREATE_CHUNK = 100  # partitions per step of a creation
CREATE_THREADS = 8  # threads creating one chunk: a new log is mostly fsync waits, which overlap
DESCRIPTOR_HEADROOM = 128  # descriptors kept free for connections, segment rolls and checkpoint files


class TopicAdmin:
    """This broker's part of topic administration: limits, new logs, adopted dirs, topic configs."""

    def __init__(self, logs: LogManager, metadata: MetadataStore) -> None:
        self.logs = logs
        self.metadata = metadata
        self._reserved_partitions = 0  # partitions create_logs will still open files for
        self._creator: ThreadPoolExecutor | None = None

    def adopt_logs(self) -> None:
        """Register logs the metadata doesn't know: dirs from another writer at start-up, or partitions
        created directly on the LogManager (the group coordinator's `__consumer_offsets`)."""
        on_disk: dict[str, list[tuple[int, Any]]] = {}
        logs_of: dict[str, list[Any]] = {}
        for lg in self.logs.all_logs():
            on_disk.setdefault(lg.topic, []).append((lg.partition, lg.dir))
            logs_of.setdefault(lg.topic, []).append(lg)
        for name in self.metadata.adopt(on_disk):
            info = self.metadata.topics[name]
            log.info("Registered topic %s found in the data directory (%d partitions)", name, info.partitions)
            for lg in logs_of[name]:
                ensure_log_topic_id(lg, info.topic_id)

    async def create_logs(self, wanted: list[tuple[str, int, dict[str, str], uuid.UUID | None]]) -> None:
        """Make the missing logs of `wanted` (topic, partition, config overrides, topic id to write in its
        partition.metadata) in chunks on worker threads: what the controller's LeaderAndIsr hands this
        broker may be thousands of new partitions. A failure is logged and left to the caller, which tries
        that partition again itself and reports its error."""
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
                        ensure_log_topic_id(lg, topic_id)
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
        """A topic's overrides checked as Kafka checks them (INVALID_CONFIG naming the key); a deprecated key that
        changes nothing is accepted with a WARNING naming it."""
        try:
            parsed = LogConfig.from_props(configs, self.logs.default_config)
        except InvalidConfigError:
            raise
        except (ValueError, TypeError) as exc:
            raise InvalidConfigError(str(exc)) from None
        for warning in deprecation_warnings(configs):
            log.warning("%s", warning)
        return parsed

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        self.validate_topic_configs(configs)
        if validate_only:
            return
        self.metadata.set_configs(name, configs)
        self.logs.update_topic_config(name, configs)
        log.info("Updated the configs of topic %s: %s", name, configs or "(all defaults)")
