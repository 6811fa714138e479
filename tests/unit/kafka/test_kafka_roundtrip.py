"""Round trip: bytes encoded by kafka-python decode to the same field values.

For every request and response class kafka-python ships (its `kafka.protocol` ApiMessage
classes) and every version it can encode, a message is filled with deterministic pseudo-random
values (nulls where the version allows them, tagged fields set), encoded by kafka-python with its
header and size prefix, and decoded by brokerscope's compiled plans. A second set uses the
hand-written legacy classes in `kafka.protocol.old` (an independent encoder) for the versions
older than the specs' baseline.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import struct
import uuid
import warnings

import kafka.protocol
import pytest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.schemas.fields.base import BaseField

from brokerscope.protocols.kafka import schema


def _subclasses(c):
    for s in c.__subclasses__():
        yield s
        yield from _subclasses(s)


def _message_classes() -> dict[tuple[int, str], type]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's importlib.resources use
        for m in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol."):
            if ".old" in m.name or "generate" in m.name:
                continue
            importlib.import_module(m.name)
    return {
        (c.API_KEY, c.type): c
        for c in _subclasses(ApiMessage)
        if getattr(c, "_class_version", None) is None and c.__dict__.get("_json") is not None
    }


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CLASSES = _message_classes()
CASES = [
    (key, kind, v)
    for (key, kind), cls in sorted(CLASSES.items())
    for v in range(cls._valid_versions[0], cls._valid_versions[1] + 1)
]


def _value(f, version: int, rnd: random.Random, owner, depth: int = 0):
    if f.nullable_for_version_q(version) and f.type_str != "bitfield" and rnd.random() < 0.25:
        return None
    if f.is_struct_array():
        return [
            _struct(f, version, rnd, owner, depth + 1) for _ in range(rnd.randint(0, 2 if depth < 3 else 0))
        ]
    if f.is_struct():
        return _struct(f, version, rnd, owner, depth + 1)
    t = f.type_str
    if f.is_array():
        inner = t[2:]
        return [_simple(inner, rnd) for _ in range(rnd.randint(0, 3))]
    return _simple(t, rnd)


def _simple(t: str, rnd: random.Random):
    if t == "int8":
        return rnd.randint(-128, 127)
    if t == "int16":
        return rnd.randint(-32768, 32767)
    if t == "int32":
        return rnd.randint(-(2**31), 2**31 - 1)
    if t == "int64":
        return rnd.randint(-(2**63), 2**63 - 1)
    if t == "bitfield":  # kafka-python's view of an int32 of authorized-operation bits
        return {b for b in range(31) if rnd.random() < 0.2}
    if t == "uint16":
        return rnd.randint(0, 65535)
    if t == "float64":
        return rnd.random() * 1e6
    if t == "bool":
        return rnd.random() < 0.5
    if t == "uuid":
        return uuid.UUID(int=rnd.getrandbits(128))
    if t == "string":
        return "".join(rnd.choice("abcxyz-_.é0") for _ in range(rnd.randint(0, 12)))
    if t in ("bytes", "records"):
        return bytes(rnd.getrandbits(8) for _ in range(rnd.randint(0, 20)))
    raise AssertionError(f"type {t}")


def _struct(f, version: int, rnd: random.Random, owner, depth: int):
    # nested data classes hang off their parent class (kafka-python keeps only weak references)
    cls = getattr(owner, f.type_str)
    vals = {
        sub.name: _value(sub, version, rnd, cls, depth) for sub in f._fields if sub.for_version_q(version)
    }
    return cls(version=version, **vals)


def _expected(obj, struct_field, version: int, spec_fields: list[dict], structs: dict):
    """kafka-python's object as a plain dict with the spec's field names (kafka-python renames a
    few fields it patches, so names come from the spec's field at the same position)."""
    out = {}
    for f, sf in zip(struct_field._fields, spec_fields, strict=True):
        if not f.for_version_q(version):
            continue
        name = sf["name"]
        sub_fields = sf.get("fields") or structs.get(sf["type"].removeprefix("[]"))
        v = getattr(obj, f.name)
        if f.tagged_field_q(version) and v == f.default:
            continue  # tagged fields at their default value are not sent
        if v is None:
            out[name] = None
        elif f.is_struct_array():
            out[name] = [_expected(x, f, version, sub_fields, structs) for x in v]
        elif f.is_struct():
            out[name] = _expected(v, f, version, sub_fields, structs)
        elif f.type_str == "bitfield":
            bits = sum(1 << b for b in v)
            out[name] = bits - (1 << 32) if bits >= 1 << 31 else bits
        elif isinstance(v, uuid.UUID):
            out[name] = str(v)
        elif isinstance(v, list):
            out[name] = [str(x) if isinstance(x, uuid.UUID) else x for x in v]
        else:
            out[name] = v
    return out


@pytest.mark.parametrize(("api_key", "kind", "version"), CASES, ids=[f"{k}-{t}-v{v}" for k, t, v in CASES])
def test_kafka_python_encoding_decodes_to_same_values(api_key, kind, version):
    cls = CLASSES[(api_key, kind)]
    rnd = random.Random(api_key * 1000 + version * 2 + (kind == "response"))
    vals = {f.name: _value(f, version, rnd, cls) for f in cls._struct._fields if f.for_version_q(version)}
    msg = cls(version=version, **vals)
    msg.with_header(correlation_id=4242 + version, client_id="rt-client")
    wire = msg.encode(header=True, framed=True)
    assert struct.unpack_from(">i", wire, 0)[0] == len(wire) - 4
    frame = bytes(wire[4:])
    p = schema.plan(api_key, version, kind)
    assert p is not None
    if kind == "request":
        h = schema.read_request_header(frame)
        assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (
            api_key,
            version,
            4242 + version,
            "rt-client",
        )
        pos = h.body_offset
    else:
        corr, _tagged, pos = schema.read_response_header(frame, api_key, version)
        assert corr == 4242 + version
    got = schema.decode_body(p, frame, pos)
    spec = schema.specs()[api_key]
    msg_spec = spec.request if kind == "request" else spec.response
    structs = spec.request_structs if kind == "request" else spec.response_structs
    want = _expected(msg, cls._struct, version, msg_spec["fields"], structs)
    assert _norm(got) == _norm(want)


def _norm(o):
    if isinstance(o, dict):
        return {k: _norm(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_norm(v) for v in o]
    if isinstance(o, bytes | bytearray | memoryview):
        return bytes(o)
    return o


def test_every_spec_api_is_covered():
    """Every api key in kafka-python's specs has a kafka-python class pair, so the round trip covers
    them all (the APIs rebuilt from kio are checked in test_kafka_kio_specs.py)."""
    shipped = {k: s for k, s in schema.specs().items() if s.source == "kafka-python"}
    covered = {k for k, _ in CLASSES}
    assert set(shipped) <= covered
    assert len(CASES) >= 2 * sum(s.valid.hi - s.valid.lo + 1 for s in shipped.values())


def test_underscore_names_match():
    # our details use the spec names; kafka-python snake-cases them the same way
    assert BaseField.underscore_name("ThrottleTimeMs") == "throttle_time_ms"


# -- versions older than the specs' baseline ---------------------------------------------------
# Kafka 4.0 removed e.g. Produce v0-2 and Fetch v0-3 from the specs; the field version ranges
# still describe them. kafka-python keeps hand-written classes for them (kafka.protocol.old), an
# independent encoder: every such version decodes to the same values, field by field.


def _old_cases():
    import kafka.protocol.old as old
    from kafka.protocol.old.api import Request, Response

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for m in pkgutil.iter_modules(old.__path__):
            importlib.import_module(f"kafka.protocol.old.{m.name}")
    out = {}
    for base_cls, kind in ((Request, "request"), (Response, "response")):
        for c in _subclasses(base_cls):
            k, v = getattr(c, "API_KEY", None), getattr(c, "API_VERSION", None)
            if not isinstance(k, int) or not isinstance(v, int):
                continue
            s = schema.specs().get(k)
            if s is not None and v < s.valid.lo:
                out[(k, kind, v)] = c
    return out


OLD = _old_cases()


def _old_value(t, rnd: random.Random):
    from kafka.protocol.old import types as T

    if isinstance(t, T.Schema):
        return tuple(_old_value(f, rnd) for f in t.fields)
    if isinstance(t, T.Array):
        return [_old_value(t.array_of, rnd) for _ in range(rnd.randint(0, 2))]
    if isinstance(t, T.String):
        return "".join(rnd.choice("abc-_.") for _ in range(rnd.randint(0, 8)))
    name = t.__name__ if isinstance(t, type) else type(t).__name__
    return _simple(
        {
            "Int8": "int8",
            "Int16": "int16",
            "Int32": "int32",
            "Int64": "int64",
            "Boolean": "bool",
            "Bytes": "bytes",
            "Float64": "float64",
        }[name],
        rnd,
    )


def _flatten(d):
    """Our decoded dict as nested tuples/lists of values in field order (the old classes' shape)."""
    if isinstance(d, dict):
        return tuple(_flatten(v) for k, v in d.items() if not k.startswith("_"))
    if isinstance(d, list):
        return [_flatten(v) for v in d]
    return d


# kafka-python's hand-written DescribeLogDirsRequest_v0 has Partitions as one int32; the spec (and
# Kafka's own DescribeLogDirsRequest v0) has []int32, so that class's bytes are not valid Kafka.
_OLD_BUGS = {
    (35, "request", 0): "kafka-python's old class encodes Partitions as int32, the spec says []int32"
}
OLD_CASES = [
    pytest.param(
        *c,
        id=f"{c[0]}-{c[1]}-v{c[2]}",
        marks=[pytest.mark.xfail(strict=True, reason=_OLD_BUGS[c])] if c in _OLD_BUGS else [],
    )
    for c in sorted(OLD)
]


@pytest.mark.parametrize(("api_key", "kind", "version"), OLD_CASES)
def test_versions_below_the_spec_baseline(api_key, kind, version):
    cls = OLD[(api_key, kind, version)]
    rnd = random.Random(api_key * 100 + version)
    values = [_old_value(f, rnd) for f in cls.SCHEMA.fields]
    body = cls(*values).encode()
    p = schema.plan(api_key, version, kind)
    assert p is not None and p.below_baseline
    got = schema.decode_body(p, body, 0)  # must consume the body exactly
    assert _flatten(got) == _norm(tuple(values))
