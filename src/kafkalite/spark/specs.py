"""Picklable descriptions of where the data is; Spark ships these, and each process opens its own backend."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkalite.spark.backend import SinkBackend, SourceBackend
from kafkalite.spark.errors import OptionError


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

    The broker implementation of the backend protocols is not written yet; the option is parsed
    so that queries fail with a clear message rather than a missing-option one.
    """

    bootstrap_servers: str
    params: tuple[tuple[str, str], ...] = ()

    def _unavailable(self) -> OptionError:
        return OptionError(f"broker mode (kafka.bootstrap.servers={self.bootstrap_servers}) is not available in "
                           "this version of kafkalite's Spark connector; read the data dirs directly with "
                           "option path instead")

    def open_source(self) -> SourceBackend:
        raise self._unavailable()

    def open_sink(self, topic_configs: Mapping[str, str] | None = None, lock_timeout_ms: int = 60_000) -> SinkBackend:
        raise self._unavailable()
