"""Turn a struct's declared fields, at one version, into a generated decoder and encoder.

Interpreting the schema per request would cost a Python dispatch per field; instead each
(message, version, direction) is compiled once into straight-line Python functions, one per
struct, and cached by `codec`. What the generated code does per field:

- a run of adjacent fixed-width fields is one `struct.unpack_from` / `pack` call;
- variable-length fields call the checked readers/writers of `primitives`;
- a struct array reads its count, checks it against the remaining bytes, and loops;
- flexible versions end each struct with its tagged-field section: known tags are decoded by
  name (absent ones take their default), unknown ones are skipped; on encode only tagged fields
  that differ from Kafka's default are written, in tag order.

Decoders return a dict holding exactly the fields present in the version; encoders read a dict
with `d.get(name, default)`, so a handler fills only the fields that matter.
"""

from __future__ import annotations

import struct
import uuid
from copy import deepcopy
from typing import Any

import kafkalite.protocol.primitives as p
from kafkalite.protocol.exceptions import ProtocolDecodeError
from kafkalite.protocol.schema import FIXED_TYPES, STRUCT, Field

Decoder = Any  # (buf: memoryview, pos: int) -> (dict, int)
Encoder = Any  # (d: dict, out: bytearray, parts: list | None) -> None

_HELPERS: dict[str, Any] = {
    name: getattr(p, name)
    for name in (
        "read_uvarint", "read_string", "read_nullable_string", "read_compact_string",
        "read_compact_nullable_string", "read_bytes", "read_nullable_bytes", "read_compact_bytes",
        "read_compact_nullable_bytes", "read_records", "read_compact_records", "read_uuid",
        "read_array_len", "read_compact_array_len", "read_fixed_array", "skip_tagged_fields",
        "write_string", "write_nullable_string", "write_compact_string", "write_compact_nullable_string",
        "write_bytes", "write_nullable_bytes", "write_compact_bytes", "write_compact_nullable_bytes",
        "write_records", "write_uuid", "write_fixed_array", "write_tagged_fields", "uvarint",
    )
}
_HELPERS["pack_i32"] = p.I32.pack
_HELPERS["ProtocolDecodeError"] = ProtocolDecodeError
_HELPERS["deepcopy"] = deepcopy
_HELPERS["EMPTY"] = {}

# (type, compact, nullable) -> helper name
_READERS = {
    ("string", False, False): "read_string",
    ("string", False, True): "read_nullable_string",
    ("string", True, False): "read_compact_string",
    ("string", True, True): "read_compact_nullable_string",
    ("bytes", False, False): "read_bytes",
    ("bytes", False, True): "read_nullable_bytes",
    ("bytes", True, False): "read_compact_bytes",
    ("bytes", True, True): "read_compact_nullable_bytes",
    ("records", False, False): "read_records",
    ("records", False, True): "read_records",
    ("records", True, False): "read_compact_records",
    ("records", True, True): "read_compact_records",
    ("uuid", False, False): "read_uuid",
    ("uuid", True, False): "read_uuid",
}
_WRITERS = {
    ("string", False, False): "write_string",
    ("string", False, True): "write_nullable_string",
    ("string", True, False): "write_compact_string",
    ("string", True, True): "write_compact_nullable_string",
    ("bytes", False, False): "write_bytes",
    ("bytes", False, True): "write_nullable_bytes",
    ("bytes", True, False): "write_compact_bytes",
    ("bytes", True, True): "write_compact_nullable_bytes",
}
_IMMUTABLE = (int, float, str, bytes, uuid.UUID, type(None))


def compile_decoder(fields: tuple[Field, ...], version: int, flexible: bool, label: str) -> Decoder:
    unit = _Unit(version, flexible)
    top = unit.decoder(fields)
    return unit.build(top, label)


def compile_encoder(fields: tuple[Field, ...], version: int, flexible: bool, label: str) -> Encoder:
    unit = _Unit(version, flexible)
    top = unit.encoder(fields)
    return unit.build(top, label)


def _tag_of(f: Field) -> int:
    """The tag of a field tagged in the version at hand (`tagged_in` holds only for fields with a tag)."""
    if f.tag is None:
        raise ValueError(f"field {f.name} has no tag")
    return f.tag


class _Unit:
    """One generated module: the functions for every struct of a body at one version."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.v = version
        self.flex = flexible
        self.ns: dict[str, Any] = dict(_HELPERS)
        self.src: list[str] = []
        self.count = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, value: Any) -> str:
        name = self.fresh("K")
        self.ns[name] = value
        return name

    def build(self, top: str, label: str) -> Any:
        code = compile("\n".join(self.src) + "\n", f"<kafkalite.protocol {label}>", "exec")
        exec(code, self.ns)
        return self.ns[top]

    # --- shared -------------------------------------------------------------------------------

    def split(self, fields: tuple[Field, ...]) -> tuple[list[Field], list[Field]]:
        present = [f for f in fields if f.present(self.v)]
        regular = [f for f in present if not f.tagged_in(self.v)]
        tagged = sorted((f for f in present if f.tagged_in(self.v)), key=_tag_of)
        if tagged and not self.flex:
            raise ValueError(f"tagged fields {[f.name for f in tagged]} in a non-flexible version {self.v}")
        return regular, tagged

    def min_size(self, type_: str, fields: tuple[Field, ...] = ()) -> int:
        """The fewest bytes one value of the type can take: bounds array counts before looping."""
        if type_ in FIXED_TYPES:
            return FIXED_TYPES[type_][1]
        if type_ == "uuid":
            return 16
        if type_ == STRUCT:
            regular, _ = self.split(fields)
            return sum(1 if f.type == STRUCT and f.nullable_in(self.v) else self.min_size(f.type, f.fields)
                       for f in regular) + (1 if self.flex else 0)
        if type_ == "string":
            return 1 if self.flex else 2
        return 1 if self.flex else 4  # bytes, records, arrays

    def runs(self, regular: list[Field]) -> list[list[Field]]:
        """Group adjacent fixed-width fields; every other field is a run of its own."""
        out: list[list[Field]] = []
        for f in regular:
            if f.is_fixed and out and out[-1][0].is_fixed:
                out[-1].append(f)
            else:
                out.append([f])
        return out

    def literal(self, value: Any) -> str:
        if isinstance(value, bool | int | float) or value is None:
            return repr(value)
        if isinstance(value, list) and not value:
            return "()"  # encoders only read defaults, so an immutable empty sequence will do
        return self.const(value)

    # --- decoding -----------------------------------------------------------------------------

    def decoder(self, fields: tuple[Field, ...]) -> str:
        name = self.fresh("dec")
        regular, tagged = self.split(fields)
        lines = [f"def {name}(buf, pos):"]
        items: list[tuple[str, str]] = []
        for run in self.runs(regular):
            if run[0].is_fixed:
                st = struct.Struct(">" + "".join(FIXED_TYPES[f.type][0] for f in run))
                names = [self.fresh("v") for _ in run]
                lines.append(f"    {', '.join(names)}, = {self.const(st)}.unpack_from(buf, pos)")
                lines.append(f"    pos += {st.size}")
                items.extend((f.name, n) for f, n in zip(run, names, strict=True))
            else:
                var = self.fresh("v")
                self.emit_read(lines, "    ", run[0], var)
                items.append((run[0].name, var))
        if self.flex:
            items.extend(self.emit_read_tags(lines, tagged))
        body = ", ".join(f"{n!r}: {v}" for n, v in items)
        lines.append(f"    return {{{body}}}, pos")
        self.src.extend(lines)
        return name

    def emit_read(self, lines: list[str], ind: str, f: Field, var: str) -> None:
        t = f.type
        nullable = f.nullable_in(self.v)
        if t in FIXED_TYPES:
            code, size = FIXED_TYPES[t]
            lines.append(f"{ind}{var} = {self.const(struct.Struct('>' + code))}.unpack_from(buf, pos)[0]")
            lines.append(f"{ind}pos += {size}")
        elif t == STRUCT and nullable:
            lines.append(f"{ind}if {self.const(struct.Struct('>b'))}.unpack_from(buf, pos)[0] < 0:")
            lines.append(f"{ind}    {var}, pos = None, pos + 1")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    {var}, pos = {self.decoder(f.fields)}(buf, pos + 1)")
        elif t == STRUCT:
            lines.append(f"{ind}{var}, pos = {self.decoder(f.fields)}(buf, pos)")
        elif not f.is_array:
            lines.append(f"{ind}{var}, pos = {_READERS[(t, self.flex, nullable)]}(buf, pos)")
        else:
            et = f.element_type
            count = "read_compact_array_len" if self.flex else "read_array_len"
            min_item = max(1, self.min_size("struct" if et == "struct" else et, f.fields))
            lines.append(f"{ind}n, pos = {count}(buf, pos, {min_item}, {nullable})")
            if et in FIXED_TYPES:
                code, size = FIXED_TYPES[et]
                lines.append(f"{ind}if n < 0:")
                lines.append(f"{ind}    {var} = None")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {var}, pos = read_fixed_array(buf, pos, n, {code!r}, {size})")
                return
            element = (f"{self.decoder(f.fields)}(buf, pos)" if et == "struct"
                       else f"{_READERS[(et, self.flex, False)]}(buf, pos)")
            lines.append(f"{ind}if n < 0:")
            lines.append(f"{ind}    {var} = None")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    {var} = []")
            lines.append(f"{ind}    for _ in range(n):")
            lines.append(f"{ind}        e, pos = {element}")
            lines.append(f"{ind}        {var}.append(e)")

    def emit_read_tags(self, lines: list[str], tagged: list[Field]) -> list[tuple[str, str]]:
        if not tagged:
            lines.append("    if buf[pos] == 0:")
            lines.append("        pos += 1")
            lines.append("    else:")
            lines.append("        pos = skip_tagged_fields(buf, pos)")
            return []
        items = []
        for f in tagged:
            var = self.fresh("t")
            items.append((f.name, var))
            lines.append(f"    {var} = {self.default_expr(f.tag_default(self.v))}")
        lines.append("    nt, pos = read_uvarint(buf, pos)")
        lines.append("    if nt:")
        lines.append("        if 2 * nt > len(buf) - pos:")
        lines.append("            raise ProtocolDecodeError(f'{nt} tagged fields in {len(buf) - pos} bytes')")
        lines.append("        for _ in range(nt):")
        lines.append("            tag, pos = read_uvarint(buf, pos)")
        lines.append("            size, pos = read_uvarint(buf, pos)")
        lines.append("            end = pos + size")
        lines.append("            if end > len(buf):")
        lines.append("                raise ProtocolDecodeError('tagged field runs past the end of the frame')")
        for i, (f, (_, var)) in enumerate(zip(tagged, items, strict=True)):
            lines.append(f"            {'if' if i == 0 else 'elif'} tag == {f.tag}:")
            lines.append(f"                {var}, _ = {self.value_decoder(f)}(buf[:end], pos)")
        lines.append("            pos = end")
        return items

    def value_decoder(self, f: Field) -> str:
        name = self.fresh("tdec")
        lines = [f"def {name}(buf, pos):"]
        self.emit_read(lines, "    ", f, "v")
        lines.append("    return v, pos")
        self.src.extend(lines)
        return name

    def default_expr(self, value: Any) -> str:
        """A fresh default for a decoded dict: mutable defaults are never shared between messages."""
        if isinstance(value, _IMMUTABLE):
            return repr(value) if isinstance(value, bool | int | float | None) else self.const(value)
        if isinstance(value, list) and not value:
            return "[]"
        return f"deepcopy({self.const(value)})"

    # --- encoding -----------------------------------------------------------------------------

    def encoder(self, fields: tuple[Field, ...]) -> str:
        name = self.fresh("enc")
        regular, tagged = self.split(fields)
        lines = [f"def {name}(d, out, parts):", "    g = d.get"]
        for run in self.runs(regular):
            if run[0].is_fixed:
                st = struct.Struct(">" + "".join(FIXED_TYPES[f.type][0] for f in run))
                args = ", ".join(f"g({f.name!r}, {self.literal(f.default(self.v))})" for f in run)
                lines.append(f"    out += {self.const(st)}.pack({args})")
            else:
                f = run[0]
                self.emit_write(lines, "    ", f, f"g({f.name!r}, {self.literal(f.default(self.v))})", "out", "parts")
        if self.flex:
            self.emit_write_tags(lines, tagged)
        self.src.extend(lines)
        return name

    def emit_write(self, lines: list[str], ind: str, f: Field, expr: str, out: str, parts: str) -> None:
        t = f.type
        nullable = f.nullable_in(self.v)
        if t in FIXED_TYPES:
            lines.append(f"{ind}{out} += {self.const(struct.Struct('>' + FIXED_TYPES[t][0]))}.pack({expr})")
        elif t == STRUCT and nullable:
            lines.append(f"{ind}x = {expr}")
            lines.append(f"{ind}if x is None:")
            lines.append(f"{ind}    {out} += b'\\xff'")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    {out} += b'\\x01'")
            lines.append(f"{ind}    {self.encoder(f.fields)}(x, {out}, {parts})")
        elif t == STRUCT:
            lines.append(f"{ind}{self.encoder(f.fields)}({expr} or EMPTY, {out}, {parts})")
        elif t == "records":
            lines.append(f"{ind}write_records({out}, {parts}, {expr}, {self.flex})")
        elif t == "uuid":
            lines.append(f"{ind}write_uuid({out}, {expr})")
        elif not f.is_array:
            lines.append(f"{ind}{_WRITERS[(t, self.flex, nullable)]}({out}, {expr})")
        else:
            et = f.element_type
            if nullable:
                null = "b'\\x00'" if self.flex else "b'\\xff\\xff\\xff\\xff'"
            else:  # None where the schema allows no null: an empty array
                null = "b'\\x01'" if self.flex else "b'\\x00\\x00\\x00\\x00'"
            lines.append(f"{ind}x = {expr}")
            lines.append(f"{ind}if x is None:")
            lines.append(f"{ind}    {out} += {null}")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    {out} += {'uvarint(len(x) + 1)' if self.flex else 'pack_i32(len(x))'}")
            if et in FIXED_TYPES:
                lines.append(f"{ind}    write_fixed_array({out}, x, {FIXED_TYPES[et][0]!r})")
                return
            if et == "struct":
                element = f"{self.encoder(f.fields)}(e, {out}, {parts})"
            elif et == "uuid":
                element = f"write_uuid({out}, e)"
            else:
                element = f"{_WRITERS[(et, self.flex, False)]}({out}, e)"
            lines.append(f"{ind}    for e in x:")
            lines.append(f"{ind}        {element}")

    def emit_write_tags(self, lines: list[str], tagged: list[Field]) -> None:
        """Tagged fields differing from Kafka's default, in tag order; one test when none do."""
        if not tagged:
            lines.append("    out += b'\\x00'")
            return
        conds = []
        for i, f in enumerate(tagged):
            var = f"tg{i}"
            default = f.tag_default(self.v)
            if f.type == STRUCT:  # a missing or empty dict: nothing to compare
                lines.append(f"    {var} = g({f.name!r})")
                conds.append(var)
            else:
                lines.append(f"    {var} = g({f.name!r}, {self.literal(default)})")
                if f.is_array:
                    conds.append(var if default == [] else f"{var} is not None")
                elif default is None:
                    conds.append(f"{var} is not None")
                else:
                    conds.append(f"{var} != {self.literal(default)}")
        lines.append(f"    if {' or '.join(conds)}:")
        lines.append("        tags = []")
        for i, (f, cond) in enumerate(zip(tagged, conds, strict=True)):
            var = f"tg{i}"
            lines.append(f"        if {cond}:")
            lines.append("            tb = bytearray()")
            if f.type == STRUCT:
                # written when its bytes differ from those of the all-defaults struct
                default_bytes = bytearray()
                compile_encoder(f.fields, self.v, self.flex, f"default {f.name}")(
                    f.tag_default(self.v), default_bytes, None)
                lines.append(f"            {self.encoder(f.fields)}({var}, tb, None)")
                lines.append(f"            if tb != {self.const(bytes(default_bytes))}:")
                lines.append(f"                tags.append(({f.tag}, tb))")
            else:
                self.emit_write(lines, "            ", f, var, "tb", "None")
                lines.append(f"            tags.append(({f.tag}, tb))")
        lines.append("        if tags:")
        lines.append("            write_tagged_fields(out, tags)")
        lines.append("        else:")
        lines.append("            out += b'\\x00'")
        lines.append("    else:")
        lines.append("        out += b'\\x00'")
