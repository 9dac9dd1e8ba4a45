"""Broker-level cleaner settings (Kafka's CleanerConfig), with Kafka's names and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from kafkalite.config import registry
from kafkalite.errors import InvalidConfigError


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The cleaner's broker settings; names, defaults and rules come from the config registry."""

    enable: bool = registry.default("log.cleaner.enable")
    threads: int = registry.default("log.cleaner.threads")
    dedupe_buffer_size: int = registry.default("log.cleaner.dedupe.buffer.size")  # total over the threads
    dedupe_buffer_load_factor: float = registry.default("log.cleaner.io.buffer.load.factor")
    io_buffer_size: int = registry.default("log.cleaner.io.buffer.size")  # total over the threads, half for reads
    max_message_size: int = registry.default("message.max.bytes")
    max_io_bytes_per_second: float = registry.default("log.cleaner.io.max.bytes.per.second")
    backoff_ms: int = registry.default("log.cleaner.backoff.ms")

    _KEYS: ClassVar[dict[str, str]] = {
        "log.cleaner.enable": "enable",
        "log.cleaner.threads": "threads",
        "log.cleaner.dedupe.buffer.size": "dedupe_buffer_size",
        "log.cleaner.io.buffer.load.factor": "dedupe_buffer_load_factor",
        "log.cleaner.io.buffer.size": "io_buffer_size",
        "message.max.bytes": "max_message_size",
        "log.cleaner.io.max.bytes.per.second": "max_io_bytes_per_second",
        "log.cleaner.backoff.ms": "backoff_ms",
    }

    def __post_init__(self) -> None:  # also for configs built in code, not only from properties
        if self.threads < 1:
            raise InvalidConfigError("log.cleaner.threads must be at least 1")
        if not 0 < self.dedupe_buffer_load_factor <= 1:
            raise InvalidConfigError("log.cleaner.io.buffer.load.factor must be in (0, 1]")
        if self.max_io_bytes_per_second <= 0:
            raise InvalidConfigError("log.cleaner.io.max.bytes.per.second must be positive")

    @classmethod
    def from_broker_props(cls, props: Mapping[str, object]) -> CleanerConfig:
        """The cleaner's keys out of broker properties, parsed and checked by the registry."""
        return cls(**{field: registry.parse(k, props[k]) for k, field in cls._KEYS.items() if k in props})

    @property
    def dedupe_buffer_per_thread(self) -> int:
        return min(self.dedupe_buffer_size // self.threads, (1 << 31) - 1)

    @property
    def io_buffer_per_thread(self) -> int:
        return self.io_buffer_size // self.threads // 2
