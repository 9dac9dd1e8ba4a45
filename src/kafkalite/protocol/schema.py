"""The schema DSL: each Kafka message is declared once, as data, and every codec is derived from it.

Declarations mirror Kafka's JSON message schemas (the format's source of truth) in a compact form:

    F("acks", "int16")                                   # a field present in all versions
    F("transactional_id", "string", "3+", null="3+", default=None)
    F("replica_nodes", "[]int32")                        # array of a primitive
    A("topic_data", "0+", [F(...), ...])                 # array of structs
    S("diverging_epoch", "12+", [F(...), ...], tag=0)    # a struct (here a tagged one)
    S("assignment", "0+", [F(...), ...], null=True)      # a nullable struct

Version ranges use Kafka's spelling ("3+", "0-4", "7", "none"); `null` gives the versions in which
the field is nullable (True = all its versions); `tag` makes the field a tagged field in all of its
versions (every tagged field in the APIs we serve is tagged in exactly its own version range).

Defaults: what a missing key encodes as, and what an absent tagged field decodes to. An explicit
`default` wins; otherwise a field takes null in the versions where it is nullable, else its type's
zero value (0, False, "", b"", [], the zero UUID, a struct of defaults). Tagged fields are compared
against Kafka's own default (explicit, else the zero value) to decide whether to write them at all,
as Kafka does: old librdkafka misreads tagged fields, so we write none that are at their default.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kafkalite.protocol.api_keys import ApiKey

# primitive type -> (struct format char, width) for the fixed-width ones
FIXED_TYPES: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "bool": ("?", 1),
}
VARIABLE_TYPES = frozenset({"string", "bytes", "records", "uuid"})
PRIMITIVES = frozenset(FIXED_TYPES) | VARIABLE_TYPES
STRUCT = "struct"
STRUCT_ARRAY = "[]struct"
ZERO_UUID = uuid.UUID(int=0)

_MISSING: Any = object()
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MAX_VERSION = 0x7FFF


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; empty when lo > hi (Kafka's "none")."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, spec: str) -> Versions:
        spec = spec.strip()
        if spec == "none":
            return cls(1, 0)
        if spec.endswith("+"):
            return cls(int(spec[:-1]), _MAX_VERSION)
        if "-" in spec:
            lo, hi = spec.split("-")
            return cls(int(lo), int(hi))
        return cls(int(spec), int(spec))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    def __str__(self) -> str:
        if self.lo > self.hi:
            return "none"
        if self.hi == _MAX_VERSION:
            return f"{self.lo}+"
        return f"{self.lo}-{self.hi}" if self.lo != self.hi else str(self.lo)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a struct. `type` is a primitive, "[]<primitive>", "struct" or "[]struct"."""

    name: str
    type: str
    versions: Versions
    nullable: Versions | None = None
    tag: int | None = None
    explicit_default: Any = _MISSING
    fields: tuple[Field, ...] = ()

    # --- version predicates ------------------------------------------------------------------

    def present(self, version: int) -> bool:
        return version in self.versions

    def nullable_in(self, version: int) -> bool:
        return self.nullable is not None and version in self.nullable

    def tagged_in(self, version: int) -> bool:
        return self.tag is not None and version in self.versions

    # --- type predicates ---------------------------------------------------------------------

    @property
    def is_fixed(self) -> bool:
        return self.type in FIXED_TYPES

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:]

    @property
    def has_default(self) -> bool:
        return self.explicit_default is not _MISSING

    # --- defaults ----------------------------------------------------------------------------

    def default(self, version: int) -> Any:
        """What a missing key encodes as in `version` (tagged fields: see `tag_default`)."""
        if self.tagged_in(version):
            return self.tag_default(version)
        if self.has_default:
            return self.explicit_default
        if self.nullable_in(version):
            return None
        return self.zero(version)

    def tag_default(self, version: int) -> Any:
        """Kafka's default, against which a tagged field is compared before it is written."""
        return self.explicit_default if self.has_default else self.zero(version)

    def zero(self, version: int) -> Any:
        if self.is_array:
            return []
        if self.type == STRUCT:
            return {f.name: f.default(version) for f in self.fields if f.present(version)}
        return _ZEROS[self.type]


_ZEROS: dict[str, Any] = {
    "int8": 0, "int16": 0, "uint16": 0, "int32": 0, "int64": 0, "float64": 0.0, "bool": False,
    "string": "", "bytes": b"", "records": b"", "uuid": ZERO_UUID,
}


def _versions(spec: str | bool | None, field_versions: Versions) -> Versions | None:
    if spec is None or spec is False:
        return None
    if spec is True:
        return field_versions
    return Versions.parse(spec)


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"field name {name!r} is not snake_case")


def F(name: str, type_: str, v: str = "0+", *, null: str | bool | None = None, tag: int | None = None,
      default: Any = _MISSING) -> Field:
    """A primitive field, or an array of a primitive ("[]int32", "[]string")."""
    _check_name(name)
    base = type_[2:] if type_.startswith("[]") else type_
    if base not in PRIMITIVES:
        raise ValueError(f"{name}: unknown type {type_!r}")
    versions = Versions.parse(v)
    return Field(name, type_, versions, _versions(null, versions), tag, default)


def A(name: str, v: str, fields: Sequence[Field], *, null: str | bool | None = None, tag: int | None = None) -> Field:
    """An array of structs, whose element fields are `fields`."""
    _check_name(name)
    versions = Versions.parse(v)
    return Field(name, STRUCT_ARRAY, versions, _versions(null, versions), tag, _MISSING, tuple(fields))


def S(name: str, v: str, fields: Sequence[Field], *, null: str | bool | None = None, tag: int | None = None
      ) -> Field:
    """A single struct; a nullable one (ConsumerGroupHeartbeat's assignment) is preceded by an int8
    marker, -1 for null and 1 for present, as Kafka writes it."""
    _check_name(name)
    versions = Versions.parse(v)
    if null is not None and tag is not None:
        raise ValueError(f"{name}: a nullable tagged struct is not supported")
    return Field(name, STRUCT, versions, _versions(null, versions), tag, _MISSING, tuple(fields))


@dataclass(frozen=True, slots=True)
class Message:
    """One API: the versions we serve, where flexible encoding starts, and both bodies' fields."""

    api_key: ApiKey
    versions: Versions
    flexible: Versions
    request: tuple[Field, ...]
    response: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible


def message(api_key: ApiKey, versions: str, flexible: str, request: Sequence[Field],
            response: Sequence[Field]) -> Message:
    """Declare an API; checks the declaration's consistency once, at import."""
    msg = Message(api_key, Versions.parse(versions), Versions.parse(flexible), tuple(request), tuple(response))
    for body in (msg.request, msg.response):
        _check_struct(body, f"{api_key.name}")
    return msg


def _check_struct(fields: tuple[Field, ...], where: str) -> None:
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: duplicate field names {names}")
    tags = [f.tag for f in fields if f.tag is not None]
    if len(set(tags)) != len(tags):
        raise ValueError(f"{where}: duplicate tags {tags}")
    for f in fields:
        if f.fields:
            _check_struct(f.fields, f"{where}.{f.name}")
