"""Byte compatibility with an independent codec: kafka-python 3.0.12's, generated from Kafka's JSON schemas.

Three checks:
- our declarations, field by field and version by version, against the JSON schemas kafka-python
  vendors (names, types, versions, nullability, tags, defaults, field order);
- requests and responses encoded by kafka-python decode with ours, and ours decode with kafka-python,
  for every api and version both support, with bodies generated from our schema;
- our ApiKey and ErrorCode tables against kafka-python's.
"""

from __future__ import annotations

import importlib
import re
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ErrorCode,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kafkalite.protocol.messages import MESSAGES
from kafkalite.protocol.schema import STRUCT, STRUCT_ARRAY, ZERO_UUID, Field, Versions
from tests.support.protocol_strategies import DIRECTIONS, body_strategy, fields_of, normalize, rich_body

kafka_protocol = pytest.importorskip("kafka.protocol.api_message")
from kafka import __version__ as kafka_version  # noqa: E402
from kafka.protocol.api_message import ApiMessage  # noqa: E402
from kafka.protocol.schemas.fields.codecs import BitField  # noqa: E402
from kafka.protocol.schemas.load_json import load_json  # noqa: E402

for _module in ("metadata", "consumer", "producer", "admin"):
    importlib.import_module(f"kafka.protocol.{_module}")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _camel(key: ApiKey) -> str:
    return "".join(part.capitalize() for part in key.name.split("_"))


def _kp_classes() -> dict[tuple[int, str], type]:
    found: dict[tuple[int, str], type] = {}
    todo = list(ApiMessage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None) is not None:
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kp_classes()


def _require_kafka_python_schema(api_key: int, direction: str = "request") -> None:
    """kafka-python 3.0.12 vendors no schema for some APIs we declare (ConsumerGroupHeartbeat, which we
    declare only to refuse it); those are checked against real clients in tests/test_protocol_gaps.py."""
    if (api_key, direction) not in KP:
        pytest.skip(f"kafka-python {kafka_version} has no {ApiKey(api_key).name} {direction} schema")
IDS = [f"{ApiKey(k).name}-{d}" for k, d in DIRECTIONS]


# --- the declarations against Kafka's JSON schemas ----------------------------------------------


def _json_versions(spec: str | None) -> Versions | None:
    return None if spec is None else Versions.parse(spec)


def _json_default(f: dict, version: int, tagged: bool, nullable: bool) -> Any:
    """Kafka's default for a JSON field, under our rule (explicit, else null if nullable, else zero)."""
    t = f["type"]
    raw = f.get("default")
    if raw is not None and raw != "":
        if raw == "null":
            return None
        if t in ("int8", "int16", "int32", "int64", "uint16"):
            return int(raw, 16) if str(raw).lower().startswith("0x") else int(raw)
        if t == "bool":
            return str(raw).lower() == "true"
        if t == "float64":
            return float(raw)
        return raw
    if nullable and not tagged:
        return None
    if t.startswith("[]"):
        return []
    if "fields" in f:
        return {_snake(s["name"]): _json_default(s, version, "tag" in s, _nullable(s, version))
                for s in f["fields"] if version in Versions.parse(s["versions"])}
    return {"int8": 0, "int16": 0, "uint16": 0, "int32": 0, "int64": 0, "float64": 0.0, "bool": False,
            "string": "", "bytes": b"", "records": b"", "uuid": ZERO_UUID}[t]


def _nullable(f: dict, version: int) -> bool:
    nv = _json_versions(f.get("nullableVersions"))
    return nv is not None and version in nv


def _our_type(f: dict) -> str:
    t = f["type"]
    if "fields" in f:
        return STRUCT_ARRAY if t.startswith("[]") else STRUCT
    return t


def _compare(ours: tuple[Field, ...], theirs: list[dict], version: int, where: str) -> None:
    mine = [f for f in ours if f.present(version)]
    json_fields = [f for f in theirs if version in Versions.parse(f["versions"])]
    assert [f.name for f in mine] == [_snake(f["name"]) for f in json_fields], where
    for f, j in zip(mine, json_fields, strict=True):
        at = f"{where}.{f.name} v{version}"
        assert f.type == _our_type(j), at
        assert f.nullable_in(version) == _nullable(j, version), at
        tagged = "tag" in j and version in Versions.parse(j.get("taggedVersions", "none"))
        assert f.tagged_in(version) == tagged, at
        if tagged:
            assert f.tag == j["tag"], at
        if f.type not in (STRUCT, STRUCT_ARRAY):
            assert f.default(version) == _json_default(j, version, tagged, f.nullable_in(version)), at
        elif f.type == STRUCT:
            assert f.default(version) == _json_default(j, version, tagged, False), at
        if f.fields:
            _compare(f.fields, j["fields"], version, at)


@pytest.mark.parametrize("api_key", sorted(MESSAGES), ids=[ApiKey(k).name for k in sorted(MESSAGES)])
def test_declarations_match_kafka_json_schemas(api_key: ApiKey) -> None:
    _require_kafka_python_schema(api_key)
    msg = MESSAGES[api_key]
    for direction, fields in (("Request", msg.request), ("Response", msg.response)):
        schema = load_json(_camel(api_key) + direction)
        assert schema["apiKey"] == api_key
        flexible = Versions.parse(schema["flexibleVersions"])
        for version in range(msg.versions.lo, msg.versions.hi + 1):
            assert msg.is_flexible(version) == (version in flexible)
            _compare(fields, schema["fields"], version, f"{api_key.name}{direction}")


def test_api_keys_match() -> None:
    from kafka.protocol.api_key import ApiKey as KpApiKey

    for key in KpApiKey:
        assert ApiKey(key.value).name == _snake(key.name).upper()


def test_error_codes_match() -> None:
    import inspect

    import kafka.errors

    renamed = {
        "NO_ERROR": "NONE",
        "UNKNOWN": "UNKNOWN_SERVER_ERROR",
        "NOT_LEADER_FOR_PARTITION": "NOT_LEADER_OR_FOLLOWER",
        "MESSAGE_SIZE_TOO_LARGE": "MESSAGE_TOO_LARGE",
        "INVALID_TOPIC": "INVALID_TOPIC_EXCEPTION",
        "INVALID_REPLICATION_ASSIGNMENT": "INVALID_REPLICA_ASSIGNMENT",
    }
    seen = 0
    for cls in vars(kafka.errors).values():
        if inspect.isclass(cls) and isinstance(getattr(cls, "errno", None), int) and hasattr(cls, "message"):
            assert ErrorCode(cls.errno).name == renamed.get(cls.message, cls.message)
            seen += 1
    assert seen > 120 and max(ErrorCode) >= 120


# --- kafka-python's codec against ours ----------------------------------------------------------


def _bitfield(kp_field: Any) -> bool:
    return getattr(kp_field, "_type", None) is BitField


def _kp_field(kp_fields: dict, name: str) -> tuple[str, Any]:
    """kafka-python renames the *_authorized_operations fields (and reads them as bit sets)."""
    if name not in kp_fields and name.endswith("authorized_operations"):
        name = "authorized_operations"
    return name, kp_fields[name]


def to_kp(cls: Any, fields: tuple[Field, ...], version: int, body: dict, top: bool = False) -> Any:
    """Our body dict as kafka-python's data object."""
    kp_fields = cls._struct.fields
    values: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        v = body[f.name]
        kp_name, kf = _kp_field(kp_fields, f.name)
        if f.type == STRUCT_ARRAY and v is not None:
            v = [to_kp(kf.data_class, f.fields, version, e) for e in v]
        elif f.type == STRUCT:
            v = to_kp(kf.data_class, f.fields, version, v)
        elif _bitfield(kf):
            v = None if v == -2147483648 else {b for b in range(32) if (v & 0xFFFFFFFF) >> b & 1}
        values[kp_name] = v
    return cls[version](**values) if top else cls(**values)


def from_kp(obj: Any, fields: tuple[Field, ...], version: int) -> dict:
    """kafka-python's decoded object as our body dict."""
    kp_fields = obj._struct.fields
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        kp_name, kf = _kp_field(kp_fields, f.name)
        v = getattr(obj, kp_name)
        if f.type == STRUCT_ARRAY and v is not None:
            v = [from_kp(e, f.fields, version) for e in v]
        elif f.type == STRUCT:  # kafka-python leaves an absent tagged struct as None
            v = f.tag_default(version) if v is None else from_kp(v, f.fields, version)
        elif _bitfield(kf):
            bits = -2147483648 if v is None else sum(1 << b for b in v)
            v = bits - (1 << 32) if bits >= 1 << 31 else bits
        elif f.type == "uuid" and v is None:
            v = ZERO_UUID
        elif f.type in ("bytes", "records") and v is not None:
            v = bytes(v)
        out[f.name] = v
    return out


def _kp_versions(api_key: int, direction: str) -> list[int]:
    _require_kafka_python_schema(api_key, direction)
    lo, hi = SUPPORTED_VERSIONS[api_key]
    cls = KP[(api_key, direction)]
    return [v for v in range(lo, hi + 1) if v <= cls.max_version]


@pytest.mark.parametrize(("api_key", "direction"), DIRECTIONS, ids=IDS)
@settings(max_examples=20)
@given(data=st.data())
def test_kafka_python_and_we_read_each_other(api_key: int, direction: str, data: st.DataObject) -> None:
    version = data.draw(st.sampled_from(_kp_versions(api_key, direction)), label="version")
    fields = fields_of(api_key, direction)
    _cross_check(api_key, direction, version, data.draw(body_strategy(fields, version), label="body"))


@pytest.mark.parametrize(("api_key", "direction"), DIRECTIONS, ids=IDS)
def test_kafka_python_and_we_agree_on_every_field_of_every_version(api_key: int, direction: str) -> None:
    for version in _kp_versions(api_key, direction):
        _cross_check(api_key, direction, version, rich_body(fields_of(api_key, direction), version))


def _cross_check(api_key: int, direction: str, version: int, body: dict) -> None:
    fields = fields_of(api_key, direction)
    if api_key == ApiKey.API_VERSIONS and direction == "response":
        body["error_code"] = 0  # any error makes kafka-python (rightly) read the body as v0
    cls = KP[(api_key, direction)]
    expected = normalize(body)

    kp_obj = to_kp(cls, fields, version, body, top=True)
    kp_obj.with_header(correlation_id=77, client_id="kp-client")
    kp_frame = kp_obj.encode(header=True)
    if direction == "request":
        header, ours = decode_request(kp_frame)
        assert header == RequestHeader(api_key, version, 77, "kp-client")
        our_frame = encode_request(api_key, version, 77, "kp-client", body)[4:]
    else:
        correlation_id, ours = decode_response(api_key, version, kp_frame)
        assert correlation_id == 77
        our_frame = b"".join(encode_response(RequestHeader(api_key, version, 77, None), body))[4:]
    assert normalize(ours) == expected

    theirs = cls.decode(our_frame, version=version, header=True)
    assert theirs.header.correlation_id == 77
    assert normalize(from_kp(theirs, fields, version)) == expected
    # byte for byte: same bytes both ways, except where kafka-python writes tagged fields at their default
    if not _has_tagged(fields, version):
        assert our_frame == bytes(kp_frame)


def _has_tagged(fields: tuple[Field, ...], version: int) -> bool:
    return any(f.present(version) and (f.tagged_in(version) or _has_tagged(f.fields, version)) for f in fields)


def test_uuid_roundtrip_through_kafka_python() -> None:
    from kafka.protocol.metadata import MetadataResponse

    u = uuid.uuid4()
    frame = b"".join(encode_response(RequestHeader(3, 12, 1, None), {"topics": [{"name": "t", "topic_id": u}]}))
    assert MetadataResponse.decode(frame[4:], version=12, header=True).topics[0].topic_id == u
