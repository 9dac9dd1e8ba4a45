"""Hypothesis strategies derived from our own schema declarations, shared by the protocol tests.

A body is generated field by field from the declaration at one version, so every api/version/
direction is covered without writing a generator per message. (No tests here.)
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from kafkalite.protocol.messages import MESSAGES
from kafkalite.protocol.schema import STRUCT, STRUCT_ARRAY, ZERO_UUID, Field

_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}

# (api key, "request" | "response") for every message we declare
DIRECTIONS = [(key, d) for key in sorted(MESSAGES) for d in ("request", "response")]


def fields_of(api_key: int, direction: str) -> tuple[Field, ...]:
    msg = MESSAGES[api_key]  # type: ignore[index]
    return msg.request if direction == "request" else msg.response


def _primitive(type_: str) -> st.SearchStrategy[Any]:
    if type_ in _INTS:
        bits = _INTS[type_]
        edges = st.sampled_from([0, -1, -(1 << (bits - 1)), (1 << (bits - 1)) - 1])
        return st.one_of(edges, st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1))
    if type_ == "uint16":
        return st.integers(0, 0xFFFF)
    if type_ == "float64":
        return st.floats(allow_nan=False)
    if type_ == "bool":
        return st.booleans()
    if type_ == "string":
        return st.text(max_size=8)
    if type_ in ("bytes", "records"):
        return st.binary(max_size=24)
    if type_ == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    raise AssertionError(type_)


def value_strategy(f: Field, version: int) -> st.SearchStrategy[Any]:
    if f.type == STRUCT:
        inner = body_strategy(f.fields, version)
    elif f.type == STRUCT_ARRAY:
        inner = st.lists(body_strategy(f.fields, version), max_size=2)
    elif f.is_array:
        inner = st.lists(_primitive(f.element_type), max_size=3)
    else:
        inner = _primitive(f.type)
    if f.nullable_in(version):
        return st.one_of(st.none(), inner)
    return inner


def body_strategy(fields: tuple[Field, ...], version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Every field present in `version`, with any legal value (tagged ones included)."""
    return st.fixed_dictionaries({f.name: value_strategy(f, version) for f in fields if f.present(version)})


def defaults(fields: tuple[Field, ...], version: int) -> dict[str, Any]:
    """What decoding an all-defaults encoding must give: the schema's defaults, per version."""
    return {f.name: f.default(version) for f in fields if f.present(version)}


def rich_body(fields: tuple[Field, ...], version: int, counter: list[int] | None = None) -> dict[str, Any]:
    """A deterministic body with no field at its default: two elements per array, distinct values,
    non-null nullables. One per version catches any field that is in the wrong place or version."""
    counter = counter if counter is not None else [0]

    def nxt() -> int:
        counter[0] += 1
        return counter[0]

    def value(type_: str) -> Any:
        n = nxt()
        if type_ in _INTS:
            return (n * 37) % (1 << (_INTS[type_] - 2)) + 2
        return {"uint16": n + 2, "float64": n + 0.5, "bool": True, "string": f"s{n}-é", "bytes": bytes([n % 256]) * 3,
                "records": bytes([n % 256]) * 7, "uuid": uuid.UUID(int=n * 0x10001 + 1)}[type_]

    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        if f.type == STRUCT:
            out[f.name] = rich_body(f.fields, version, counter)
        elif f.type == STRUCT_ARRAY:
            out[f.name] = [rich_body(f.fields, version, counter) for _ in range(2)]
        elif f.is_array:
            out[f.name] = [value(f.element_type) for _ in range(2)]
        else:
            out[f.name] = value(f.type)
    return out


def normalize(value: Any) -> Any:
    """Decoded records are memoryviews; compare them as bytes."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def random_uuid() -> uuid.UUID:
    return uuid.uuid4()
