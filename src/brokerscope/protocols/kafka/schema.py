"""Kafka message decoding driven by the official Kafka JSON message specs.

The specs ship inside the kafka-python package (`kafka/protocol/schemas/resources/*.json`, the
files Apache Kafka generates its own serializers from). They are read at run time from the
installed package (located with importlib, see `spec_dir`) and never copied into this repository.
APIs kafka-python lacks are rebuilt in the same form from the `kio` package (kio_specs.py), and
the ZooKeeper-era inter-broker APIs 4-7, in neither package, from interbroker_specs.py.

For every (api_key, version, request|response) a decode plan is compiled once per process: the
spec's fields at that version become shapes (StructShape, FieldShape: each field's wire form),
and the shapes two readers, `reader(buf, pos) -> (value, new_pos)`: the compiled one (`_body.c`,
given a table of the shapes: Plan.read, what decoding uses) and a tree of small closures, one per
field, with precompiled `struct.Struct`s (Plan.read_py: the reference the tests and the
`kafka_body` fuzz target hold the compiled one to, and where it hands a body back, a varint past
64 bits, the reader). Neither interprets the JSON per message.

Wire rules implemented (Kafka protocol guide, KIP-482 for flexible versions):
- int8/int16/int32/int64/uint16/uint32/float64 big-endian, bool one byte, uuid 16 bytes;
- classic string: int16 length (-1 = null); classic bytes/records: int32 length (-1 = null);
  classic array: int32 count (-1 = null);
- flexible (compact) string/bytes/records/array: unsigned varint length+1 (0 = null);
- a nullable struct (non-array) is preceded by an int8 marker (-1 null, 1 present);
- in flexible versions every struct ends with a tagged-field section: uvarint count, then per field
  uvarint tag, uvarint size, value. Known tags decode with their field's reader; unknown ones are
  kept raw (base64 in details) under `_unknown_tagged_fields`.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import logging
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ... import native
from .. import base
from ..base import DecodeError, Truncated
from . import interbroker_specs, kio_specs
from .names import CREDENTIAL_API_KEYS

_body = native.load(__package__, "_body")  # compiled from _body.c: message bodies by a field table

SPEC_PACKAGE = "kafka.protocol.schemas.resources"
log = logging.getLogger(__name__)

Reader = Callable[[bytes, int], tuple[object, int]]


# a message that does not match its spec raises base.DecodeError (or Truncated), re-exported here


# ---------------------------------------------------------------------------------------------
# versions


@dataclass(frozen=True)
class Versions:
    """A spec version range: "0+", "3-13", "5", "none"."""

    lo: int
    hi: int  # inclusive; a large number for "N+"

    @classmethod
    def parse(cls, s: str | None) -> Versions:
        if s is None or s == "none" or s == "":
            return cls(1, 0)  # empty
        if s.endswith("+"):
            return cls(int(s[:-1]), 1 << 15)
        if "-" in s:
            a, b = s.split("-")
            return cls(int(a), int(b))
        return cls(int(s), int(s))

    def __contains__(self, v: int) -> bool:
        return self.lo <= v <= self.hi


# ---------------------------------------------------------------------------------------------
# spec loading

_COMMENT = re.compile(r"(?m)^\s*//.*$")


@dataclass
class ApiSpec:
    api_key: int
    name: str  # "Produce"
    valid: Versions
    flexible: Versions
    request: dict
    response: dict
    request_structs: dict = field(default_factory=dict)
    response_structs: dict = field(default_factory=dict)
    # or "interbroker" (interbroker_specs.py), or "kio": rebuilt from kio's classes (kio_specs.py)
    source: str = "kafka-python"


def spec_dir() -> Path:
    """The directory of the JSON specs inside the installed kafka-python package.

    Found through the import system (`importlib.util.find_spec`) without importing `kafka`:
    its `__init__` pulls in the whole client (a quarter of a second and deprecation warnings in
    every worker process), and the specs are plain data files.
    """
    spec = importlib.util.find_spec("kafka")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("kafka-python is not installed: it ships the Kafka message specs")
    for loc in spec.submodule_search_locations:
        d = Path(loc, *SPEC_PACKAGE.split(".")[1:])
        if d.is_dir():
            return d
    raise ImportError(f"no {SPEC_PACKAGE} in the installed kafka-python")


def _load_json(path: Path) -> dict:
    return json.loads(_COMMENT.sub("", path.read_text(encoding="utf-8")))


def _api_spec(req: dict, resp: dict, source: str) -> ApiSpec:
    """An ApiSpec from a (request, response) pair of spec dicts in the JSON form."""
    return ApiSpec(
        api_key=int(req["apiKey"]),
        name=req["name"].removesuffix("Request"),
        valid=Versions.parse(req["validVersions"]),
        flexible=Versions.parse(req.get("flexibleVersions")),
        request=req,
        response=resp,
        request_structs={s["name"]: s["fields"] for s in req.get("commonStructs", [])},
        response_structs={s["name"]: s["fields"] for s in resp.get("commonStructs", [])},
        source=source,
    )


@lru_cache(maxsize=1)
def _shipped() -> dict[int, ApiSpec]:
    """Every API in kafka-python's specs, by api key (loaded once per process)."""
    out: dict[int, ApiSpec] = {}
    by_key: dict[int, dict[str, dict]] = {}
    for path in sorted(spec_dir().glob("*.json")):
        j = _load_json(path)
        if "apiKey" not in j or j.get("type") not in ("request", "response"):
            continue
        by_key.setdefault(int(j["apiKey"]), {})[j["type"]] = j
    for key, pair in sorted(by_key.items()):
        if "request" not in pair or "response" not in pair:
            continue
        out[key] = _api_spec(pair["request"], pair["response"], "kafka-python")
    return out


@lru_cache(maxsize=1)
def _interbroker() -> dict[int, ApiSpec]:
    """The ZooKeeper-era inter-broker APIs (4-7) from interbroker_specs.py, by api key."""
    return {k: _api_spec(*interbroker_specs.spec(k), "interbroker") for k in interbroker_specs.api_keys()}


_from_kio: dict[int, ApiSpec | None] = {}


def spec(api_key: int) -> ApiSpec | None:
    """The spec of `api_key`: kafka-python's, else the inter-broker APIs 4-7 (interbroker_specs),
    else rebuilt from kio (newer client APIs, KRaft, share groups, ...), built on first use:
    importing all of kio's classes takes seconds."""
    s = _shipped().get(api_key)
    if s is None:
        s = _interbroker().get(api_key)
    if s is not None:
        return s
    if api_key not in _from_kio:
        try:
            k = kio_specs.spec(api_key) if kio_specs.available() else None
        except (ValueError, KeyError, TypeError, ImportError) as e:  # a kio this code does not know
            log.warning("kafka api key %d: cannot rebuild its spec from kio: %s", api_key, e)
            k = None
        _from_kio[api_key] = None if k is None else _api_spec(k[0], k[1], "kio")
    return _from_kio[api_key]


def specs() -> dict[int, ApiSpec]:
    """Every API any source describes, by api key (builds every kio spec: tests and tools)."""
    keys = set(_shipped()) | set(_interbroker()) | set(kio_specs.api_keys())
    return {k: s for k in sorted(keys) if (s := spec(k)) is not None}


def api_name(api_key: int) -> str | None:
    s = spec(api_key)
    return s.name if s else None


def spec_versions(api_key: int) -> tuple[int, int] | None:
    s = spec(api_key)
    return (s.valid.lo, s.valid.hi) if s else None


def is_flexible(api_key: int, version: int) -> bool:
    s = spec(api_key)
    return bool(s and version in s.flexible)


def request_header_version(api_key: int, version: int) -> int:
    """2 for flexible request versions, else 1 (0 only for ControlledShutdown v0, key 7)."""
    if api_key == 7 and version == 0:
        return 0
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """1 for flexible versions, except ApiVersions (key 18) whose response header is always v0."""
    if api_key == 18:
        return 0
    return 1 if is_flexible(api_key, version) else 0


# ---------------------------------------------------------------------------------------------
# primitive readers

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint (at most 5 bytes for the 32-bit values Kafka uses, 10 for 64)."""
    try:
        return base.read_uvarint(buf, pos)
    except base.VarintError as e:
        raise (Truncated if e.truncated else DecodeError)(str(e)) from None


def _fixed(st: struct.Struct) -> Reader:
    size = st.size
    unpack = st.unpack_from

    def r(buf: bytes, pos: int):
        if pos + size > len(buf):
            raise Truncated()
        return unpack(buf, pos)[0], pos + size

    return r


def _read_bool(buf: bytes, pos: int):
    if pos >= len(buf):
        raise Truncated()
    return buf[pos] != 0, pos + 1


def _read_uuid(buf: bytes, pos: int):
    if pos + 16 > len(buf):
        raise Truncated()
    return str(uuid.UUID(bytes=bytes(buf[pos : pos + 16]))), pos + 16


def _len_classic16(buf: bytes, pos: int) -> tuple[int, int]:
    if pos + 2 > len(buf):
        raise Truncated()
    return _I16.unpack_from(buf, pos)[0], pos + 2


def _len_classic32(buf: bytes, pos: int) -> tuple[int, int]:
    if pos + 4 > len(buf):
        raise Truncated()
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _len_compact(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def _blob_reader(length: Callable, nullable: bool, as_text: bool) -> Reader:
    def r(buf: bytes, pos: int):
        n, pos = length(buf, pos)
        if n < 0:
            if n == -1 and nullable:
                return None, pos
            if n == -1:
                # a non-nullable field sent as null: tolerated by Kafka's own readers only for
                # nullable fields; report it rather than guess
                raise DecodeError("null in a non-nullable field")
            raise DecodeError(f"negative length {n}")
        end = pos + n
        if end > len(buf):
            raise Truncated(f"length {n} runs past the end")
        b = bytes(buf[pos:end])
        if as_text:
            return b.decode("utf-8", errors="backslashreplace"), end
        return b, end

    return r


_PRIMITIVES: dict[str, Reader] = {
    "int8": _fixed(_I8),
    "int16": _fixed(_I16),
    "int32": _fixed(_I32),
    "int64": _fixed(_I64),
    "uint16": _fixed(_U16),
    "uint32": _fixed(_U32),
    "float64": _fixed(_F64),
    "bool": _read_bool,
    "uuid": _read_uuid,
}


# ---------------------------------------------------------------------------------------------
# compiling a plan


@dataclass
class Plan:
    """The compiled decoder of one (api_key, version, kind)."""

    api_key: int
    version: int
    kind: str  # request | response
    name: str
    flexible: bool
    read: Reader  # the compiled reader (_body.c)
    below_baseline: bool  # version older than the spec's validVersions (decoded from field ranges)
    records_fields: tuple[str, ...]
    meta: object  # the compiled summary's table (_body.meta): topics, partition, error codes
    read_py: Reader  # the Python reader `read` equals: the reference, and its fallback
    meta_py: Callable[[dict, dict, int], None]  # the walk _body.summary equals: the reference

    def summarize(self, d: dict) -> dict:
        """topics (names in order), topic_ids, partition (first), error_code (top-level, else the
        first non-zero nested one, else 0 when the message has any error code)."""
        return _error_code(dict(zip(_SUMMARY_KEYS, _body.summary(self.meta, d))))

    def summarize_py(self, d: dict) -> dict:
        """summarize by the Python walk (meta_py): the reference."""
        out: dict = {k: None for k in _SUMMARY_KEYS}
        out.update(topics=[], topic_ids=[], any_error=False)
        self.meta_py(d, out, 0)
        return _error_code(out)


_SUMMARY_KEYS = ("topics", "topic_ids", "partition", "top_error", "nested_error", "any_error")


def _error_code(out: dict) -> dict:
    """`out` with its error_code: the top-level one, unless it is 0 and a nested one is not;
    else the first non-zero nested one, else 0 when the message has any error code."""
    err = out["top_error"]
    if err is None:
        err = out["nested_error"] if out["nested_error"] is not None else (0 if out["any_error"] else None)
    elif err == 0 and out["nested_error"] is not None:
        err = out["nested_error"]
    out["error_code"] = err
    return out


# A plan is compiled in two steps: the spec's fields at one version become shapes (what each
# field is on the wire: FieldShape, StructShape), then the shapes become a reader. Both readers
# are built from the same shapes: the Python closures below (the reference, and the fallback the
# compiled reader hands rare inputs to) and the compiled one's field table (_body_table).


@dataclass(frozen=True)
class StructShape:
    """A struct at one version: its fields in wire order, and its tagged fields by tag."""

    flexible: bool  # ends with a tagged-field section
    regular: tuple[tuple[str, FieldShape], ...]
    tagged: tuple[tuple[int, str, FieldShape], ...]


@dataclass(frozen=True)
class FieldShape:
    """One field's wire form: `kind` a primitive of _PRIMITIVES, "string", "bytes" (records too)
    or "struct"; an array's elements have this form, never null, with the array's encoding."""

    kind: str
    compact: bool  # varint lengths and counts (flexible versions)
    nullable: bool  # of the array itself for an array
    array: bool = False
    struct: StructShape | None = None


def _shape_struct(
    fields: list[dict], version: int, flexible: bool, structs: dict, records: set
) -> StructShape:
    regular: list[tuple[str, FieldShape]] = []
    tagged: list[tuple[int, str, FieldShape]] = []
    for f in fields:
        if version not in Versions.parse(f["versions"]):
            continue
        fflex = flexible
        if "flexibleVersions" in f:
            fflex = version in Versions.parse(f["flexibleVersions"])
        shape = _shape_field(f, version, fflex, flexible, structs, records)
        if flexible and "tag" in f and version in Versions.parse(f.get("taggedVersions", f["versions"])):
            tagged.append((int(f["tag"]), f["name"], shape))
        else:
            regular.append((f["name"], shape))
    return StructShape(flexible, tuple(regular), tuple(tagged))


def _shape_field(
    f: dict, version: int, compact: bool, flexible: bool, structs: dict, records: set
) -> FieldShape:
    """The shape of field `f` at `version`; `compact` = compact encoding for this field."""
    t: str = f["type"]
    nullable = version in Versions.parse(f.get("nullableVersions"))
    if t.startswith("[]"):
        inner_t = t[2:]
        if inner_t in _PRIMITIVES or inner_t in ("string", "bytes"):
            return FieldShape(inner_t, compact, nullable, array=True)
        sub = f.get("fields") or structs.get(inner_t)
        if sub is None:
            raise ValueError(f"unknown struct type {inner_t}")
        return FieldShape(
            "struct", compact, nullable, True, _shape_struct(sub, version, flexible, structs, records)
        )
    if t in _PRIMITIVES or t in ("string", "bytes"):
        return FieldShape(t, compact, nullable)
    if t == "records":
        records.add(f["name"])
        return FieldShape("bytes", compact, nullable)
    # a single (non-array) struct
    sub = f.get("fields") or structs.get(t)
    if sub is None:
        raise ValueError(f"unknown type {t}")
    return FieldShape(
        "struct", compact, nullable, False, _shape_struct(sub, version, flexible, structs, records)
    )


def _struct_reader(shape: StructShape) -> Reader:
    regular_t = tuple((name, _field_reader(f)) for name, f in shape.regular)
    tagged = {tag: (name, _field_reader(f)) for tag, name, f in shape.tagged}

    if not shape.flexible:

        def read_struct(buf: bytes, pos: int):
            d = {}
            for name, r in regular_t:
                d[name], pos = r(buf, pos)
            return d, pos

        return read_struct

    def read_flex(buf: bytes, pos: int):
        d = {}
        for name, r in regular_t:
            d[name], pos = r(buf, pos)
        count, pos = read_uvarint(buf, pos)
        if count > len(buf) - pos:
            raise DecodeError(f"tagged field count {count} exceeds the message")
        unknown = None
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise Truncated("tagged field runs past the end")
            known = tagged.get(tag)
            if known is not None:
                value, used = known[1](bytes(buf[pos:end]), 0)
                if used != size:
                    raise DecodeError(f"tagged field {known[0]} size {size} but value used {used}")
                d[known[0]] = value
            else:
                if unknown is None:
                    unknown = {}
                unknown[str(tag)] = {"base64": base64.b64encode(bytes(buf[pos:end])).decode("ascii")}
            pos = end
        if unknown is not None:
            d["_unknown_tagged_fields"] = unknown
        return d, pos

    return read_flex


def _field_reader(shape: FieldShape) -> Reader:
    if shape.array:
        elem = _field_reader(FieldShape(shape.kind, shape.compact, False, False, shape.struct))
        length = _len_compact if shape.compact else _len_classic32
        nullable = shape.nullable

        def read_array(buf: bytes, pos: int):
            n, pos = length(buf, pos)
            if n < 0:
                if n == -1 and nullable:
                    return None, pos
                if n == -1:
                    raise DecodeError("null array in a non-nullable field")
                raise DecodeError(f"negative array length {n}")
            if n > len(buf) - pos:
                raise DecodeError(f"array length {n} exceeds the remaining {len(buf) - pos} bytes")
            out = []
            append = out.append
            for _ in range(n):
                v, pos = elem(buf, pos)
                append(v)
            return out, pos

        return read_array
    if shape.kind in _PRIMITIVES:
        return _PRIMITIVES[shape.kind]
    if shape.kind == "string":
        return _blob_reader(_len_compact if shape.compact else _len_classic16, shape.nullable, True)
    if shape.kind == "bytes":
        return _blob_reader(_len_compact if shape.compact else _len_classic32, shape.nullable, False)
    inner = _struct_reader(shape.struct)
    if not shape.nullable:
        return inner

    def read_nullable_struct(buf: bytes, pos: int):
        if pos >= len(buf):
            raise Truncated()
        marker = _I8.unpack_from(buf, pos)[0]
        if marker < 0:
            return None, pos + 1
        return inner(buf, pos + 1)

    return read_nullable_struct


# The compiled reader's field table (_body.table): every struct of a plan as (flexible, regular
# fields as (name, type), tagged fields as (tag, name, type)), the plan's own struct first; a type
# is an int: the kind in the low bits, the flags, and a struct kind's entry above TYPE_STRUCT_SHIFT.
_BODY_KINDS = {  # _body.c's KIND_* in order
    k: i
    for i, k in enumerate(
        "int8 int16 int32 int64 uint16 uint32 float64 bool uuid string bytes struct".split()
    )
}
TYPE_COMPACT, TYPE_NULLABLE, TYPE_ARRAY = 0x20, 0x40, 0x80
TYPE_STRUCT_SHIFT = 8


def _body_table(root: StructShape):
    """The compiled reader's table of `root` and every struct it holds (equal structs share one
    entry)."""
    entries: list[tuple] = []
    index: dict[StructShape, int] = {}

    def add(s: StructShape) -> int:
        i = index.get(s)
        if i is None:
            i = index[s] = len(entries)
            entries.append(())
            entries[i] = (
                s.flexible,
                [(name, type_of(f)) for name, f in s.regular],
                [(tag, name, type_of(f)) for tag, name, f in s.tagged],
            )
        return i

    def type_of(f: FieldShape) -> int:
        t = _BODY_KINDS[f.kind]
        t |= (
            (TYPE_COMPACT if f.compact else 0)
            | (TYPE_NULLABLE if f.nullable else 0)
            | (TYPE_ARRAY if f.array else 0)
        )
        if f.struct is not None:
            t |= add(f.struct) << TYPE_STRUCT_SHIFT
        return t

    add(root)
    return _body.table(entries, DecodeError, Truncated)


def _compiled_reader(root: StructShape, fallback: Reader) -> Reader:
    """The compiled reader of `root` (_body.read); what it leaves to Python (a varint past 64
    bits) goes to `fallback`, the closures' reader."""
    table = _body_table(root)
    read = _body.read

    def r(buf: bytes, pos: int):
        got = read(table, buf, pos)
        return fallback(buf, pos) if got is None else got

    return r


_plans: dict[tuple[int, int, str], Plan | None] = {}


def plan(api_key: int, version: int, kind: str) -> Plan | None:
    """The compiled plan, or None when the api key is unknown or the version is newer than the spec.

    Versions older than the spec's baseline (Kafka 4.0 dropped e.g. Produce v0-2 from the specs
    but kept the field version ranges) are compiled from the field ranges and flagged
    `below_baseline`; the caller checks that such a decode consumes the frame exactly.
    """
    k = (api_key, version, kind)
    p = _plans.get(k, False)
    if p is not False:
        return p  # type: ignore[return-value]
    s = spec(api_key)
    if s is None or version < 0 or version > s.valid.hi:
        _plans[k] = None
        return None
    msg = s.request if kind == "request" else s.response
    structs = s.request_structs if kind == "request" else s.response_structs
    flexible = version in s.flexible
    records: set = set()
    shape = _shape_struct(msg.get("fields", []), version, flexible, structs, records)
    read_py = _struct_reader(shape)
    meta = _meta_shape(msg.get("fields", []), version, structs)
    p = Plan(
        api_key,
        version,
        kind,
        s.name,
        flexible,
        _compiled_reader(shape, read_py),
        version < s.valid.lo,
        tuple(sorted(records)),
        _meta_table(meta),
        read_py,
        _meta_walker(meta),
    )
    _plans[k] = p
    return p


_PARTITION_KEYS = ("PartitionIndex", "Partition", "Index", "PartitionId")


@dataclass(frozen=True)
class MetaShape:
    """What the commands row takes from a struct at one version (its fields' names): a topic name
    (a string field whose entityType is topicName), topic names (such a []string), a topic id, the
    first of the partition fields, its error code field (ErrorCode, else one named ...ErrorCode:
    AddPartitionsToTxn's PartitionErrorCode), and the structs it holds as (name, shape, is an
    array)."""

    topic: str | None
    topics: str | None
    topic_id: str | None
    partition: str | None
    error: str | None
    children: tuple[tuple[str, MetaShape, bool], ...]


def _meta_shape(fields: list[dict], version: int, structs: dict) -> MetaShape:
    topic_key = topics_key = topic_id_key = part_key = error_key = None
    children: list[tuple[str, MetaShape, bool]] = []
    for f in fields:
        if version not in Versions.parse(f["versions"]):
            continue
        t, name = f["type"], f["name"]
        if f.get("entityType") == "topicName":
            if t == "string":
                topic_key = name
            elif t == "[]string":
                topics_key = name
        elif t == "uuid" and name == "TopicId":
            topic_id_key = name
        elif t == "int32" and name in _PARTITION_KEYS and part_key is None:
            part_key = name
        elif t == "int16" and (name == "ErrorCode" or name.endswith("ErrorCode") and error_key is None):
            error_key = name
        elif t.startswith("[]") and (f.get("fields") or t[2:] in structs):
            children.append((name, _meta_shape(f.get("fields") or structs[t[2:]], version, structs), True))
        elif t[:1].isupper() and (f.get("fields") or t in structs):
            children.append((name, _meta_shape(f.get("fields") or structs[t], version, structs), False))
    return MetaShape(topic_key, topics_key, topic_id_key, part_key, error_key, tuple(children))


def _meta_walker(shape: MetaShape) -> Callable[[dict, dict, int], None]:
    """A walker over a decoded struct that collects what the commands row names: topics, topic
    ids, the first partition and the error codes (the reference of the compiled _body.summary)."""
    topic_key, topics_key, topic_id_key, part_key = shape.topic, shape.topics, shape.topic_id, shape.partition
    error_key = shape.error
    children = [(name, _meta_walker(sub), is_array) for name, sub, is_array in shape.children]

    def walk(d: dict, out: dict, depth: int) -> None:
        if topic_key is not None:
            v = d.get(topic_key)
            if v and v not in out["topics"]:
                out["topics"].append(v)
        if topics_key is not None:
            for v in d.get(topics_key) or ():
                if v and v not in out["topics"]:
                    out["topics"].append(v)
        if topic_id_key is not None:
            v = d.get(topic_id_key)
            if v and v not in out["topic_ids"]:
                out["topic_ids"].append(v)
        if part_key is not None and out["partition"] is None and (topic_key or topic_id_key or depth > 1):
            out["partition"] = d.get(part_key)
        if error_key is not None:
            v = d.get(error_key)
            if v is not None:
                if depth == 0:
                    out["top_error"] = v
                else:
                    out["any_error"] = True
                    if v != 0 and out["nested_error"] is None:
                        out["nested_error"] = v
        for name, sub, is_array in children:
            v = d.get(name)
            if not v:
                continue
            if is_array:
                for item in v:
                    sub(item, out, depth + 1)
            else:
                sub(v, out, depth + 1)

    return walk


def _meta_table(root: MetaShape):
    """The compiled summary's table (_body.meta): every struct of `root` as (topic, topics,
    topic_id, partition, error, [(name, entry, is an array)]), `root` first."""
    entries: list[tuple] = []
    index: dict[MetaShape, int] = {}

    def add(m: MetaShape) -> int:
        i = index.get(m)
        if i is None:
            i = index[m] = len(entries)
            entries.append(())
            kids = [(name, add(sub), is_array) for name, sub, is_array in m.children]
            entries[i] = (m.topic, m.topics, m.topic_id, m.partition, m.error, kids)
        return i

    add(root)
    return _body.meta(entries)


MAX_TRAILING = 64


def decode_body(p: Plan, buf: bytes, pos: int) -> dict:
    """Decode a message body. Kafka brokers ignore bytes after a request's last field, and some
    clients send a few (old librdkafka's ApiVersions v0 carries 4 zero bytes, librdkafka 2.x an
    extra tagged-field section in Metadata v13 for all topics; librdkafka's mock broker an extra
    byte after Metadata v13 responses): up to MAX_TRAILING such bytes are kept in
    `_trailing_bytes`; more mean the frame is not what its header says. Versions older than the
    specs' baseline must end exactly (that is the check that the field ranges still hold)."""
    d, end = p.read(buf, pos)
    extra = len(buf) - end
    if extra:
        if extra > MAX_TRAILING or p.below_baseline:
            raise DecodeError(f"{extra} bytes left after the {p.name} v{p.version} {p.kind}")
        d["_trailing_bytes"] = {"base64": base64.b64encode(bytes(buf[end:])).decode("ascii")}
    return sizes_only(d) if p.api_key in CREDENTIAL_API_KEYS else d


def sizes_only(o):
    """`o` (a decoded body or header's tagged fields) with every run of bytes no spec names
    ({"base64": ...}: unknown tagged fields, trailing bytes) replaced by its size: all a frame
    that carries credentials keeps of them (a client may send a credential there)."""
    if isinstance(o, dict):
        if "base64" in o:
            return {"size": len(base64.b64decode(o["base64"]))}
        return {k: sizes_only(v) for k, v in o.items()}
    if isinstance(o, list):
        return [sizes_only(v) for v in o]
    return o


# ---------------------------------------------------------------------------------------------
# headers


@dataclass
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    tagged: dict | None
    body_offset: int


def read_request_header(buf: bytes, pos: int = 0) -> RequestHeader:
    """Request header v0/v1/v2 (the version follows from the api key and version)."""
    if pos + 8 > len(buf):
        raise Truncated("request header")
    api_key, api_version, corr = struct.unpack_from(">hhi", buf, pos)
    pos += 8
    hv = request_header_version(api_key, api_version)
    client_id = None
    tagged = None
    if hv >= 1:
        client_id, pos = _CLIENT_ID(buf, pos)
    if hv >= 2:
        tagged, pos = _EMPTY_FLEX(buf, pos)
        tagged = (sizes_only(tagged) if api_key in CREDENTIAL_API_KEYS else tagged) or None
    return RequestHeader(api_key, api_version, corr, client_id, hv, tagged, pos)


_CLIENT_ID = _blob_reader(_len_classic16, True, True)
_EMPTY_FLEX = _struct_reader(StructShape(True, (), ()))


def read_response_header(
    buf: bytes, api_key: int, version: int, pos: int = 0
) -> tuple[int, dict | None, int]:
    """(correlation_id, tagged fields or None, body offset)."""
    if pos + 4 > len(buf):
        raise Truncated("response header")
    corr = _I32.unpack_from(buf, pos)[0]
    pos += 4
    tagged = None
    if response_header_version(api_key, version) >= 1:
        tagged, pos = _EMPTY_FLEX(buf, pos)
        tagged = (sizes_only(tagged) if api_key in CREDENTIAL_API_KEYS else tagged) or None
    return corr, tagged, pos
