"""Broker-level cleaner settings (Kafka's CleanerConfig), with Kafka's names and defaults."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from kafkalite.errors import InvalidConfigError


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 128 * 1024 * 1024  # total over the threads
    dedupe_buffer_load_factor: float = 0.9
    io_buffer_size: int = 512 * 1024  # total over the threads, half for reads
    max_message_size: int = 1048588
    max_io_bytes_per_second: float = math.inf
    backoff_ms: int = 15_000

    _KEYS: ClassVar[dict[str, tuple[str, str]]] = {
        "log.cleaner.enable": ("enable", "bool"),
        "log.cleaner.threads": ("threads", "int"),
        "log.cleaner.dedupe.buffer.size": ("dedupe_buffer_size", "int"),
        "log.cleaner.io.buffer.load.factor": ("dedupe_buffer_load_factor", "float"),
        "log.cleaner.io.buffer.size": ("io_buffer_size", "int"),
        "message.max.bytes": ("max_message_size", "int"),
        "log.cleaner.io.max.bytes.per.second": ("max_io_bytes_per_second", "float"),
        "log.cleaner.backoff.ms": ("backoff_ms", "int"),
    }

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise InvalidConfigError("log.cleaner.threads must be at least 1")
        if not 0 < self.dedupe_buffer_load_factor <= 1:
            raise InvalidConfigError("log.cleaner.io.buffer.load.factor must be in (0, 1]")
        if self.max_io_bytes_per_second <= 0:
            raise InvalidConfigError("log.cleaner.io.max.bytes.per.second must be positive")

    @classmethod
    def from_broker_props(cls, props: Mapping[str, object]) -> CleanerConfig:
        values: dict[str, object] = {}
        for key, (field, kind) in cls._KEYS.items():
            if key not in props:
                continue
            raw = str(props[key]).strip()
            try:
                if kind == "bool":
                    if raw.lower() not in ("true", "false"):
                        raise ValueError(raw)
                    values[field] = raw.lower() == "true"
                elif kind == "int":
                    values[field] = int(raw)
                else:
                    values[field] = float(raw)
            except ValueError:
                raise InvalidConfigError(f"Invalid value {raw!r} for configuration {key}") from None
        return cls(**values)  # type: ignore[arg-type]

    @property
    def dedupe_buffer_per_thread(self) -> int:
        return min(self.dedupe_buffer_size // self.threads, (1 << 31) - 1)

    @property
    def io_buffer_per_thread(self) -> int:
        return self.io_buffer_size // self.threads // 2
