"""Topic and user configs changed in the cluster store reach this broker (Kafka's ZkConfigManager): every change
writes /config/changes/config_change_<seq> naming the entity; each broker watches that directory and re-reads
the named topic's configs (applied to the logs it hosts) or user's SCRAM credentials. At start-up the configs of
the topics this broker hosts are synced once, covering what changed while it was down.
"""

from __future__ import annotations

import asyncio
import logging

from kafkalite.broker.metadata import MetadataStore
from kafkalite.broker.scram_admin import ScramAdmin
from kafkalite.broker.topic_admin import TopicAdmin
from kafkalite.cluster import znodes as z
from kafkalite.cluster.store import ClusterStore
from kafkalite.errors import KafkaliteError

log = logging.getLogger("kafkalite.broker.cluster")


class ConfigChangeListener:
    def __init__(self, store: ClusterStore, admin: TopicAdmin, metadata: MetadataStore, scram: ScramAdmin) -> None:
        self.store = store
        self.admin = admin
        self.metadata = metadata
        self.scram = scram
        self._seen: set[str] = set()
        self._primed = False
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Watch the change notifications, then sync the hosted topics' configs (changed while down)."""
        self.store.watch_children(z.CONFIG_CHANGES, self._on_changes)
        for name, info in list(self.metadata.topics.items()):
            if await self.store.topic_assignment(name) is None:
                continue
            configs = await self.store.topic_config(name)
            if configs != info.configs:
                self._apply(name, configs)

    def _apply(self, name: str, configs: dict[str, str]) -> None:
        try:
            self.admin.alter_topic_configs(name, configs)
        except KafkaliteError as exc:
            log.error("Cannot apply the configs of topic %s from the cluster store %s: %s", name, configs, exc)

    def _on_changes(self, children: list[str]) -> None:
        new = sorted(c for c in children if c not in self._seen)
        self._seen.update(children)
        if self._primed and new:
            task = asyncio.get_running_loop().create_task(self._process(new))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._primed = True  # changes made before start-up are covered by start()'s sync

    async def _process(self, names: list[str]) -> None:
        for child in names:
            path = f"{z.CONFIG_CHANGES}/{child}"
            try:
                data = await self.store.read(path)
                if data is None:
                    continue
                kind, name = z.decode_config_change(path, data)
                if kind == "topics" and name in self.metadata.topics:
                    self._apply(name, await self.store.topic_config(name))
                elif kind == "users":
                    await self.scram.refresh(name)
            except KafkaliteError as exc:
                log.error("Cannot process the config change %s: %s", path, exc)
