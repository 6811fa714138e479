"""Decoded Pulsar values as row values: protobuf messages as plain dicts and JSON, credentials
redacted, text columns made text; topic partitions, message ids and ack bit sets."""

from __future__ import annotations

import re

import pyarrow as pa

from ...tables import Block
from .. import base, pbcheck
from ..base import Row, text
from .gen import pulsar_api_pb2 as pb
from .messages import numbered

T = pb.BaseCommand
SECRET_KEYS = frozenset({"auth_data", "original_auth_data"})
# the command types that may carry credentials: never kept raw, their details scrubbed
SECRET_TYPES = frozenset({T.CONNECT, T.AUTH_CHALLENGE, T.AUTH_RESPONSE, T.LOOKUP, T.PARTITIONED_METADATA})
# an auth method named without its data, in a command that may carry credentials: a damaged tag
# moved the data into another field (the method's field, the data's)
_AUTH_PAIRS = (("auth_method_name", "auth_data"), ("original_auth_method", "original_auth_data"))
STR_COLS = ("topic", "client_id", "producer_name", "consumer", "decode_error")
to_json = base.to_json
_PARTITION_SUFFIX = re.compile(r"-partition-(\d+)$")
_MASK64 = (1 << 64) - 1


def to_dict(msg) -> dict:
    """Every set field of a protobuf message as plain Python values (enums by name)."""
    out: dict = {}
    for fd, v in msg.ListFields():
        if fd.type == fd.TYPE_MESSAGE:
            v = [to_dict(x) for x in v] if fd.is_repeated else to_dict(v)
        elif fd.type == fd.TYPE_ENUM:
            ev = fd.enum_type.values_by_number
            if fd.is_repeated:
                v = [ev[x].name if x in ev else x for x in v]
            else:
                v = ev[v].name if v in ev else v
        elif fd.is_repeated:
            v = list(v)
        out[fd.name] = v
    return out


def scrub(d):
    """Replace secrets (auth data) anywhere in a decoded dict by their size."""
    if isinstance(d, dict):
        for k, v in d.items():
            if k in SECRET_KEYS and isinstance(v, bytes | str):
                d[k] = base.redacted(v)
            else:
                scrub(v)
    elif isinstance(d, list):
        for x in d:
            scrub(x)
    return d


def damaged(pf, cmd_bytes: bytes | memoryview) -> str | None:
    """Why a command that may carry credentials (SECRET_TYPES) seems damaged, or None: it is not
    as a client writes it (pbcheck.damage: a credential's tag or length damaged can leave its
    bytes in another field), or it names an auth method without its data (moved into another
    field). Then none of its text is kept."""
    why = pbcheck.damage(pf.cmd, cmd_bytes)
    if why is not None:
        return why
    stack = [pf.body()]
    while stack:
        m = stack.pop()
        if m is None:
            continue
        for method, data in _AUTH_PAIRS:
            fields = m.DESCRIPTOR.fields_by_name
            if method in fields and data in fields and m.HasField(method) and not m.HasField(data):
                if getattr(m, method) not in ("", "none"):  # clients without auth name "none"
                    return f"{method} without {data}"
        stack.extend(v for fd, v in m.ListFields() if fd.type == fd.TYPE_MESSAGE and not fd.is_repeated)
    return None


def sanitize(rows: list[Row]) -> list[Row]:
    """The rows (dicts or blocks) with their text columns (STR_COLS) made text."""
    for _t, r in rows:
        if r.__class__ is Block:
            for c in STR_COLS:
                v = r.const.get(c)
                if v is not None and not isinstance(v, str):
                    r.const[c] = text(v)
                col = r.cols.get(c)
                if isinstance(col, list) and any(x is not None and not isinstance(x, str) for x in col):
                    r.cols[c] = [text(x) for x in col]
            continue
        for c in STR_COLS:
            v = r.get(c)
            if v is not None and not isinstance(v, str):
                r[c] = text(v)
    return rows


def partition_of(topic: str | None) -> int | None:
    """The partition a topic name ends with (`...-partition-3`), if any."""
    if not topic:
        return None
    topic = text(topic)
    m = _PARTITION_SUFFIX.search(topic)
    return int(m.group(1)) if m else None


def mid_str(ledger: int, entry: int, batch_index: int) -> str:
    """The message_id column: ledger:entry:batch_index (-1 for a message not in a batch)."""
    return f"{ledger}:{entry}:{batch_index}"


def mid_strs(ledger: int, entry: int, bis: range) -> pa.Array | list[str]:
    """The message_id column of the messages `bis` of entry (ledger, entry), as mid_str writes it."""
    return numbered(f"{ledger}:{entry}:", bis)


def bit_set(ack_set, i: int) -> bool:
    """Bit `i` of an ack set (int64 words, least significant bit first)."""
    w = i // 64
    return w < len(ack_set) and bool(((ack_set[w] & _MASK64) >> (i % 64)) & 1)


def highest_bit(ack_set) -> int:
    """One past the highest bit set in an ack set."""
    return max((w & _MASK64).bit_length() + 64 * k for k, w in enumerate(ack_set))


def joined(parts: list[pa.Array | list]) -> pa.Array | list:
    """Columns of consecutive blocks as one column (Arrow where every part is)."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, pa.Array) for p in parts):
        return pa.concat_arrays(parts)
    return [v for p in parts for v in (p.to_pylist() if isinstance(p, pa.Array) else p)]
