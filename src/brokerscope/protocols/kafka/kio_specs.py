"""Message specs for the Kafka APIs kafka-python does not ship, rebuilt from kio's schema classes.

kafka-python carries the official JSON message specs of the client APIs it implements. Newer and
broker-side APIs (ConsumerGroupHeartbeat, GetTelemetrySubscriptions/PushTelemetry, share groups,
KRaft, delegation tokens, ...) are absent from it. The `kio` package (PyPI) generates one frozen
dataclass per (API, version, request|response) from the same JSON specs, with each field's Kafka
type, nullability (`X | None`) and tag in its metadata. This module turns those classes back into
spec dicts of the JSON form `schema.py` compiles (fields with `versions`, `nullableVersions`,
`tag`/`taggedVersions`, nested `fields`), so every API is decoded by the same code.

What kio does not keep is recovered as follows (checked against every API both packages describe,
tests/unit/kafka/test_kafka_kio_specs.py):
- field names: kio's snake_case back to the specs' CamelCase; kio drops the `Ms` of durations
  and times (`timedelta_*`, `datetime_i64` types), so it is put back;
- `entityType: topicName`: fields typed with kio's `TopicName`.
"""

from __future__ import annotations

import dataclasses
import importlib
import types
import typing
from functools import lru_cache

# kio's kafka_type -> the specs' type
_TYPES = {
    "bool": "bool",
    "bytes": "bytes",
    "records": "records",
    "string": "string",
    "uuid": "uuid",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint16": "uint16",
    "float64": "float64",
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
    "datetime_i64": "int64",
}


# fixed-size types: a `None` in kio stands for a sentinel value, never a null on the wire
_FIXED = {t for t in _TYPES if t not in ("bytes", "records", "string")}


def available() -> bool:
    try:
        import kio.schema.index  # noqa: F401
    except ImportError:
        return False
    return True


def _camel(name: str, kafka_type: str | None) -> str:
    out = "".join(p[:1].upper() + p[1:] for p in name.split("_"))
    if kafka_type in ("timedelta_i32", "timedelta_i64", "datetime_i64") and not out.endswith("Ms"):
        out += "Ms"
    return out


def _unwrap(t) -> tuple[object, bool, bool]:
    """(inner type, is array, nullable) of a kio field annotation."""
    nullable = False
    if typing.get_origin(t) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(t))
        t = args[0]
    if typing.get_origin(t) is tuple:
        elem = typing.get_args(t)[0]
        if typing.get_origin(elem) in (types.UnionType, typing.Union):
            elem = [a for a in typing.get_args(elem) if a is not type(None)][0]
        return elem, True, nullable
    return t, False, nullable


def _is_topic_name(t) -> bool:
    return isinstance(t, type) and t.__name__ == "TopicName" and t.__module__ == "kio.schema.types"


def _fields(cls) -> list[dict]:
    """One version's fields of a kio entity class, in wire order, as spec-like dicts."""
    out = []
    for f in dataclasses.fields(cls):
        inner, is_array, nullable = _unwrap(f.type)
        kt = f.metadata.get("kafka_type")
        d: dict = {"name": _camel(f.name, kt), "nullable": nullable}
        if kt in _FIXED and not is_array:
            d["nullable"] = False  # kio's `None` for a null uuid or a -1 time: not a wire null
        if dataclasses.is_dataclass(inner):
            d["type"] = ("[]" if is_array else "") + inner.__name__
            d["fields"] = _fields(inner)
        else:
            if kt not in _TYPES:
                raise ValueError(f"{cls.__name__}.{f.name}: unknown kio type {kt!r}")
            d["type"] = ("[]" if is_array else "") + _TYPES[kt]
            if _is_topic_name(inner):
                d["entityType"] = "topicName"
        if "tag" in f.metadata:
            d["tag"] = int(f.metadata["tag"])
        out.append(d)
    return out


def _range(vs: set[int]) -> str:
    if not vs:
        return "none"
    lo, hi = min(vs), max(vs)
    if len(vs) != hi - lo + 1:
        raise ValueError(f"versions {sorted(vs)} are not one range")
    return f"{lo}-{hi}"


def _merge(per_version: dict[int, list[dict]]) -> list[dict]:
    """Per-version field lists -> one list with version ranges (wire order kept for each version)."""
    order: list[str] = []
    seen: dict[str, dict] = {}
    for v in sorted(per_version):
        prev = None
        for f in per_version[v]:
            name = f["name"]
            if name not in seen:
                seen[name] = {"versions": set(), "nullable": set(), "tagged": set(), "subs": {}, "f": f}
                order.insert(order.index(prev) + 1 if prev is not None else 0, name)
            m = seen[name]
            if m["f"]["type"] != f["type"]:
                raise ValueError(f"field {name} changes type between versions")
            m["versions"].add(v)
            if f["nullable"]:
                m["nullable"].add(v)
            if "tag" in f:
                m["tagged"].add(v)
                m["tag"] = f["tag"]
            if "fields" in f:
                m["subs"][v] = f["fields"]
            prev = name
    out = []
    for name in order:
        m = seen[name]
        d = {"name": name, "type": m["f"]["type"], "versions": _range(m["versions"])}
        if m["nullable"]:
            d["nullableVersions"] = _range(m["nullable"])
        if m["tagged"]:
            d["tag"] = m["tag"]
            d["taggedVersions"] = _range(m["tagged"])
        if "entityType" in m["f"]:
            d["entityType"] = m["f"]["entityType"]
        if m["subs"]:
            d["fields"] = _merge(m["subs"])
        out.append(d)
    return out


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def spec(api_key: int) -> tuple[dict, dict] | None:
    """(request spec, response spec) for `api_key` from kio, or None."""
    from kio.schema.index import api_key_map, schema_name_map
    from kio.static.constants import EntityType

    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name]
    out = []
    for kind in (EntityType.request, EntityType.response):
        per_version = {}
        flexible = set()
        cls = None
        for v, paths in versions.items():
            if kind not in paths:
                continue
            cls = _load(paths[kind])
            per_version[int(v)] = _fields(cls)
            if cls.__flexible__:
                flexible.add(int(v))
        if cls is None:
            return None
        out.append(
            {
                "apiKey": api_key,
                "type": kind.name,
                "name": cls.__name__,
                "validVersions": _range(set(per_version)),
                "flexibleVersions": f"{min(flexible)}+" if flexible else "none",
                "fields": _merge(per_version),
            }
        )
    return out[0], out[1]


def api_keys() -> list[int]:
    """The api keys kio describes (cheap: no schema class is imported)."""
    if not available():
        return []
    from kio.schema.index import api_key_map

    return sorted(api_key_map)


@lru_cache(maxsize=1)
def all_specs() -> dict[int, tuple[dict, dict]]:
    """Every API kio describes, by api key (imports all of kio's classes: seconds)."""
    out = {}
    for key in api_keys():
        s = spec(key)
        if s is not None:
            out[key] = s
    return out
