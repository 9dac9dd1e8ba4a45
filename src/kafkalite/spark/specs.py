"""Picklable descriptions of where the data is; Spark ships these, and each process opens its own backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkalite.spark.backend import SinkBackend, SourceBackend
from kafkalite.spark.broker_settings import BrokerSettings


@dataclass(frozen=True, slots=True)
class EmbeddedSpec:
    """Data dirs on a filesystem shared by the driver and every executor."""

    paths: tuple[str, ...]

    def open_source(self) -> SourceBackend:
        from kafkalite.spark.embedded import EmbeddedSource

        return EmbeddedSource(self.paths)

    def open_sink(self, topic_configs: Mapping[str, str] | None = None, lock_timeout_ms: int = 60_000) -> SinkBackend:
        from kafkalite.spark.embedded_sink import EmbeddedSink

        return EmbeddedSink(self.paths, topic_configs, lock_timeout_ms)


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """A Kafka cluster (kafkalite's broker or Apache Kafka) reached through `kafka.bootstrap.servers`.

    `params` are the `kafka.*` options without the prefix (lower-cased, as Spark hands options over);
    they are checked here, when the options are parsed, so a bad value fails the query before any
    connection is made. Each process that plans, reads or writes opens its own connections from
    this spec: the backends are in `broker_source.py` and `broker_sink.py`.
    """

    bootstrap_servers: str
    params: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        self.settings()

    def settings(self) -> BrokerSettings:
        return BrokerSettings.parse(self.bootstrap_servers, dict(self.params))

    def open_source(self) -> SourceBackend:
        from kafkalite.spark.broker_source import BrokerSource

        return BrokerSource(self.settings())

    def open_sink(self, topic_configs: Mapping[str, str] | None = None, lock_timeout_ms: int = 60_000) -> SinkBackend:
        from kafkalite.spark.broker_sink import BrokerSink

        return BrokerSink(self.settings(), topic_configs)
