"""The `--property` / `--producer-property` settings of the console clients, as Kafka's console tools name
them, parsed once and checked by name: an unknown name is an error that lists the known ones."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# kafka-console-producer.sh's LineMessageReader properties and their defaults.
PRODUCER_PROPERTIES: dict[str, str] = {
    "parse.key": "false",
    "key.separator": "\t",
    "parse.headers": "false",
    "headers.delimiter": "\t",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "ignore.error": "false",
    "null.marker": "",
}

# kafka-console-consumer.sh's DefaultMessageFormatter properties and their defaults.
CONSUMER_PROPERTIES: dict[str, str] = {
    "print.timestamp": "false",
    "print.key": "false",
    "print.offset": "false",
    "print.partition": "false",
    "print.headers": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "headers.key.separator": ":",
    "null.literal": "null",
}

# Producer client settings the console producer acts on (anything else would be silently dropped).
PRODUCER_CLIENT_PROPERTIES = frozenset({"acks", "compression.type", "client.id", "batch.size"})

_BOOLEANS = {"true": True, "false": False}


class PropertyError(ValueError):
    """A --property that names no known setting or holds a value it cannot take."""


def parse_properties(items: Iterable[str], known: Mapping[str, str] | frozenset[str], option: str) -> dict[str, str]:
    """`name=value` items (repeatable flag) to a dict, refusing names not in `known`."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise PropertyError(f"{option} expects NAME=VALUE, got {item!r}")
        if name not in known:
            raise PropertyError(f"unknown {option} {name!r}; known: {', '.join(sorted(known))}")
        out[name] = unescape(value)
    return out


def unescape(value: str) -> str:
    r"""Separators arrive from shells as `\t` or `\n` text; Kafka's tools take those escapes too."""
    return value.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


def flag(props: Mapping[str, str], name: str) -> bool:
    """A boolean property: true or false (any case), else a PropertyError naming it."""
    value = props[name].strip().lower()
    if value not in _BOOLEANS:
        raise PropertyError(f"property {name} must be true or false, not {props[name]!r}")
    return _BOOLEANS[value]
