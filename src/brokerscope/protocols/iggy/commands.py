"""Payload decoders for every Iggy command (requests) and the responses that carry structure.

Each decoder takes the payload bytes and returns a dict of decoded fields (for `details`), or
raises DecodeError. Where Iggy changed a layout between versions the decoder tries each known
variant and keeps the one that consumes the payload exactly (`layout` in details says which).
Secrets (passwords, tokens) are replaced with `base.redacted(...)` here, so they never leave.
"""

from __future__ import annotations

from collections.abc import Callable

from ..base import redacted
from .codes import COMMANDS, HEADER_KINDS
from .messages import parse_polled, parse_send
from .wire import DecodeError, Reader, consumer, header_value, identifier, polling_strategy

# Codes whose frames carry secrets: never keep their raw bytes.
SECRET_REQUESTS = frozenset({33, 37, 38, 40, 44, 45})
SECRET_RESPONSES = frozenset({42})


def _variants(payload, *parsers: Callable[[Reader], dict]) -> dict:
    """Run each parser over the whole payload; the first that consumes it exactly wins."""
    err: Exception | None = None
    for p in parsers:
        r = Reader(payload)
        try:
            out = p(r)
            r.done()
            return out
        except DecodeError as e:
            err = e
    raise DecodeError(str(err))


def _empty(payload) -> dict:
    if len(payload):
        raise DecodeError(f"{len(payload)} unexpected payload bytes")
    return {}


def _ids(r: Reader, *names: str) -> dict:
    return {n: identifier(r) for n in names}


def _st(r: Reader) -> dict:
    return _ids(r, "stream_id", "topic_id")


# ---------------------------------------------------------------------------------------------
# requests


def login_user(payload) -> dict:
    """username (u8 len), password (u8 len), then since 0.4: version (u32 len), context (u32 len)."""

    def full(r: Reader) -> dict:
        d = {"username": r.str8(), "password": redacted(r.bytes(r.u8()))}
        if r.remaining:
            d["version"] = r.str32()
            d["context"] = r.str32()
        return d

    return _variants(payload, full)


def login_pat(payload) -> dict:
    def p(r: Reader) -> dict:
        return {"token": redacted(r.bytes(r.u8()))}

    return _variants(payload, p)


def create_pat(payload) -> dict:
    def p(r: Reader) -> dict:
        return {"name": r.str8(), "expiry": r.u64()}

    return _variants(payload, p)


def name_only(payload) -> dict:
    return _variants(payload, lambda r: {"name": r.str8()})


def _permissions(r: Reader) -> dict:
    has = r.u8()
    if not has:
        return {"permissions": None}
    n = r.u32()
    r.bytes(n)
    return {"permissions": {"size": n}}


def create_user(payload) -> dict:
    def p(r: Reader) -> dict:
        d = {"username": r.str8(), "password": redacted(r.bytes(r.u8())), "status": r.u8()}
        d.update(_permissions(r))
        return d

    return _variants(payload, p)


def update_user(payload) -> dict:
    def p(r: Reader) -> dict:
        d = {"user_id": identifier(r)}
        if r.u8():
            d["username"] = r.str8()
        if r.u8():
            d["status"] = r.u8()
        return d

    return _variants(payload, p)


def update_permissions(payload) -> dict:
    def p(r: Reader) -> dict:
        d = {"user_id": identifier(r)}
        d.update(_permissions(r))
        return d

    return _variants(payload, p)


def change_password(payload) -> dict:
    def p(r: Reader) -> dict:
        return {
            "user_id": identifier(r),
            "current_password": redacted(r.bytes(r.u8())),
            "new_password": redacted(r.bytes(r.u8())),
        }

    return _variants(payload, p)


def one_identifier(field: str) -> Callable:
    return lambda payload: _variants(payload, lambda r: {field: identifier(r)})


def u32_field(field: str) -> Callable:
    return lambda payload: _variants(payload, lambda r: {field: r.u32()})


def stream_topic(payload) -> dict:
    return _variants(payload, _st)


def snapshot(payload) -> dict:
    def p(r: Reader) -> dict:
        comp = r.u8()
        types = list(r.bytes(r.remaining))
        return {"compression": comp, "snapshot_types": types}

    return _variants(payload, p)


def create_stream(payload) -> dict:
    """Spec / pre-0.6: stream_id u32 (0 = server assigns) + name; later: name only."""

    def with_id(r: Reader) -> dict:
        sid = r.u32()
        return {"stream_id": sid or None, "name": r.str8(), "layout": "with_id"}

    def name(r: Reader) -> dict:
        return {"name": r.str8(), "layout": "name_only"}

    return _variants(payload, with_id, name)


def update_stream(payload) -> dict:
    return _variants(payload, lambda r: {"stream_id": identifier(r), "name": r.str8()})


def _topic_tail(r: Reader, d: dict) -> dict:
    d["compression_algorithm"] = r.u8()
    d["message_expiry"] = r.u64()
    d["max_topic_size"] = r.u64()
    d["replication_factor"] = r.u8()
    d["name"] = r.str8()
    return d


def create_topic(payload) -> dict:
    """stream Identifier, topic_id u32 (0 = assigned), partitions u32, then the 0.4+ settings
    (compression u8, message_expiry u64, max_topic_size u64, replication_factor u8) and name;
    the spec's layout has only partitions and name (and a message_expiry u32 in between)."""

    def current(r: Reader) -> dict:
        d = {"stream_id": identifier(r), "topic_id": r.u32() or None}
        d["partitions_count"] = r.u32()
        d["layout"] = "0.4+"
        return _topic_tail(r, d)

    def spec_expiry(r: Reader) -> dict:
        d = {"stream_id": identifier(r), "topic_id": r.u32() or None, "partitions_count": r.u32()}
        d["message_expiry"] = r.u32()
        d["name"] = r.str8()
        d["layout"] = "spec_with_expiry"
        return d

    def spec(r: Reader) -> dict:
        d = {"stream_id": identifier(r), "topic_id": r.u32() or None, "partitions_count": r.u32()}
        d["name"] = r.str8()
        d["layout"] = "spec"
        return d

    def with_options(r: Reader) -> dict:
        d = {"stream_id": identifier(r), "partitions_count": r.u32(), "name": r.str8()}
        d["options"] = options(r)
        d["layout"] = "options"
        return d

    return _variants(payload, current, spec_expiry, spec, with_options)


def options(r: Reader) -> dict:
    """apache-iggy 0.9 settings: typed key/value pairs to the end of the payload
    ([kind u8][length u32][bytes] for the key, then the same for the value)."""
    out: dict = {}
    while r.remaining:
        vals = []
        for _ in range(2):
            kind = r.u8()
            if kind not in HEADER_KINDS:
                raise DecodeError(f"option kind {kind}")
            vals.append(header_value(kind, r.bytes(r.u32())))
        out[str(vals[0])] = vals[1]
    return out


def register_reply(payload) -> dict:
    """VSR REGISTER reply payload (after the result section): `LoginRegisterResponse` = user id
    u32, session u64, server protocol version u32, server version (u8 length). Confirmed from
    apache/iggy core/server-ng (build_login_register_reply) and the SDK's register decode."""

    def p(r: Reader) -> dict:
        d = {"user_id": r.u32(), "session": r.u64(), "server_protocol_version": r.u32()}
        d["server_version"] = r.str8()
        return d

    return _variants(payload, p)


# ClusterNode role and status (apache/iggy core/common/src/types/cluster/node.rs)
NODE_ROLES = {0: "leader", 1: "follower"}
NODE_STATUSES = {0: "healthy", 1: "starting", 2: "stopping", 3: "unreachable", 4: "maintenance"}


def cluster_metadata(payload) -> dict:
    """GET_CLUSTER_METADATA reply (apache/iggy responses/system/get_cluster_metadata.rs): name
    (u32 len), node count u32, per node: name (u32 len), ip (u32 len), tcp/quic/http/websocket
    ports u16 each, role u8, status u8."""

    def p(r: Reader) -> dict:
        d: dict = {"name": r.str32(), "nodes": []}
        for _ in range(r.u32()):
            node = {"name": r.str32(), "ip": r.str32()}
            for transport in ("tcp", "quic", "http", "websocket"):
                node[f"{transport}_port"] = r.u16()
            node["role"] = r.u8()
            node["role_name"] = NODE_ROLES.get(node["role"], "unknown")
            node["status"] = r.u8()
            node["status_name"] = NODE_STATUSES.get(node["status"], "unknown")
            d["nodes"].append(node)
        return d

    return _variants(payload, p)


def protocol_version_text(v: int) -> str:
    """major<<20 | minor<<10 | patch, 10 bits each, bits 31-30 reserved (binary_protocol
    version.rs): 0.11.0 = 11264."""
    return f"{(v >> 20) & 1023}.{(v >> 10) & 1023}.{v & 1023}"


def register(payload) -> dict:
    """VSR REGISTER body (the login of apache-iggy 0.9 clients): ClientVersionInfo (protocol
    version u32, SDK name (u8 len), SDK version (u8 len); apache/iggy binary_protocol
    version.rs), then either username (u8 len) and password (u8 len) or a personal access token
    (u8 len), then context (u32 len). The header does not say which: the layout that consumes
    the body exactly wins, and when both would, the username is redacted too (it may be a
    token read as a name)."""

    def client(r: Reader) -> dict:
        v = r.u32()
        d = {"protocol_version": v, "protocol_version_text": protocol_version_text(v)}
        d["sdk"] = r.str8()
        d["sdk_version"] = r.str8()
        return d

    def with_password(r: Reader) -> dict:
        d = client(r)
        d["username"] = r.str8()
        d["password"] = redacted(r.bytes(r.u8()))
        if r.remaining:
            d["context"] = r.str32()
        return d

    def with_token(r: Reader) -> dict:
        d = client(r)
        d["login"] = "personal_access_token"
        d["token"] = redacted(r.bytes(r.u8()))
        d["context"] = r.str32()
        return d

    fits = []
    for p in (with_password, with_token):
        try:
            fits.append(_variants(payload, p))
        except DecodeError as e:
            err = e
    if not fits:
        raise err
    if len(fits) == 2:
        fits[0]["username"] = redacted(fits[0]["username"].encode())
        fits[0]["login"] = "ambiguous: username and password, or a personal access token"
    return fits[0]


def update_topic(payload) -> dict:
    def p(r: Reader) -> dict:
        return _topic_tail(r, _st(r))

    return _variants(payload, p)


def partitions(payload) -> dict:
    def p(r: Reader) -> dict:
        d = _st(r)
        d["partitions_count"] = r.u32()
        return d

    return _variants(payload, p)


def delete_segments(payload) -> dict:
    def p(r: Reader) -> dict:
        d = _st(r)
        d["partition_id"] = r.u32()
        d["segments_count"] = r.u32()
        return d

    return _variants(payload, p)


def group_op(payload) -> dict:
    """stream, topic, then the group as an Identifier (0.4+) or a u32 id (the spec)."""

    def ident(r: Reader) -> dict:
        d = _st(r)
        d["group_id"] = identifier(r)
        return d

    def legacy(r: Reader) -> dict:
        d = _st(r)
        d["group_id"] = r.u32()
        return d

    return _variants(payload, ident, legacy)


def create_group(payload) -> dict:
    """0.4+: stream, topic, group_id u32 (0 = assigned), name; the spec: stream, topic, group_id."""

    def named(r: Reader) -> dict:
        d = _st(r)
        d["group_id"] = r.u32() or None
        d["name"] = r.str8()
        return d

    def named_no_id(r: Reader) -> dict:
        d = _st(r)
        d["name"] = r.str8()
        return d

    def legacy(r: Reader) -> dict:
        d = _st(r)
        d["group_id"] = r.u32()
        return d

    return _variants(payload, named, legacy, named_no_id)


def _consumer_st_partition(r: Reader, legacy: bool, flagged: bool) -> dict:
    """consumer, stream, topic, partition: u32 (0 = none), or since apache-iggy 0.9 an
    Option as [present u8][u32]."""
    d = {"consumer": consumer(r, legacy)}
    d.update(_st(r))
    if flagged:
        present = r.u8()
        if present > 1:
            raise DecodeError(f"partition presence flag {present}")
        pid = r.u32()
        d["partition_id"] = pid if present else None
        d["_flagged"] = True  # the 0.9+ layout: only it may end with an ack level
    else:
        pid = r.u32()
        d["partition_id"] = pid if (legacy or pid) else None
    return d


def _with_consumer(tail: Callable[[Reader, dict], dict] | None = None) -> Callable:
    def dec(payload) -> dict:
        def mk(legacy: bool, flagged: bool):
            def p(r: Reader) -> dict:
                d = _consumer_st_partition(r, legacy, flagged)
                d = tail(r, d) if tail else d
                d.pop("_flagged", None)
                return d

            return p

        return _variants(payload, mk(False, False), mk(True, False), mk(False, True))

    return dec


def _poll_tail(r: Reader, d: dict) -> dict:
    d["strategy"] = polling_strategy(r)
    d["count"] = r.u32()
    ac = r.u8()
    if ac > 1:
        raise DecodeError(f"auto_commit {ac}")
    d["auto_commit"] = bool(ac)
    return d


ACK_LEVELS = {0: "no_ack", 1: "quorum"}


def _ack_tail(r: Reader, d: dict) -> dict:
    """0.9-era sources end the consumer-offset writes with an AckLevel u8, always the last byte
    (0 no_ack, 1 quorum; apache/iggy primitives/ack_level.rs, requests/consumer_offsets/
    store_consumer_offset.rs); older clients send none, and such bodies are accepted too."""
    if r.remaining == 1 and d.get("_flagged"):
        level = r.u8()
        if level not in ACK_LEVELS:
            raise DecodeError(f"ack level {level}")
        d["ack_level"] = ACK_LEVELS[level]
    return d


def _store_tail(r: Reader, d: dict) -> dict:
    d["offset"] = r.u64()
    return _ack_tail(r, d)


poll_messages = _with_consumer(_poll_tail)
get_consumer_offset = _with_consumer()
store_consumer_offset = _with_consumer(_store_tail)
delete_consumer_offset = _with_consumer(_ack_tail)


def flush(payload) -> dict:
    def p(r: Reader) -> dict:
        d = _st(r)
        d["partition_id"] = r.u32()
        d["fsync"] = bool(r.u8())
        return d

    return _variants(payload, p)


REQUESTS: dict[int, Callable] = {
    1: _empty,
    10: _empty,
    11: snapshot,
    12: _empty,
    20: _empty,
    21: u32_field("client_id"),
    22: _empty,
    31: one_identifier("user_id"),
    32: _empty,
    33: create_user,
    34: one_identifier("user_id"),
    35: update_user,
    36: update_permissions,
    37: change_password,
    38: login_user,
    39: _empty,
    41: _empty,
    42: create_pat,
    43: name_only,
    40: login_user,
    44: login_pat,
    45: login_pat,
    100: poll_messages,
    101: parse_send,
    102: flush,
    120: get_consumer_offset,
    121: store_consumer_offset,
    122: delete_consumer_offset,
    200: one_identifier("stream_id"),
    201: _empty,
    202: create_stream,
    203: one_identifier("stream_id"),
    204: update_stream,
    205: one_identifier("stream_id"),
    300: stream_topic,
    301: one_identifier("stream_id"),
    302: create_topic,
    303: stream_topic,
    304: update_topic,
    305: stream_topic,
    402: partitions,
    403: partitions,
    503: delete_segments,
    600: group_op,
    601: stream_topic,
    602: create_group,
    603: group_op,
    604: group_op,
    605: group_op,
    606: group_op,  # SYNC_CONSUMER_GROUP: stream, topic, group (apache/iggy SyncConsumerGroupRequest)
}


# ---------------------------------------------------------------------------------------------
# responses


def _stream(r: Reader) -> dict:
    return {
        "id": r.u32(),
        "created_at": r.u64(),
        "topics_count": r.u32(),
        "size": r.u64(),
        "messages_count": r.u64(),
        "name": r.str8(),
    }


def _topic(r: Reader) -> dict:
    return {
        "id": r.u32(),
        "created_at": r.u64(),
        "partitions_count": r.u32(),
        "message_expiry": r.u64(),
        "compression_algorithm": r.u8(),
        "max_topic_size": r.u64(),
        "replication_factor": r.u8(),
        "size": r.u64(),
        "messages_count": r.u64(),
        "name": r.str8(),
    }


def _partition(r: Reader) -> dict:
    return {
        "id": r.u32(),
        "created_at": r.u64(),
        "segments_count": r.u32(),
        "current_offset": r.u64(),
        "size": r.u64(),
        "messages_count": r.u64(),
    }


def _many(fn: Callable[[Reader], dict], key: str) -> Callable:
    def p(payload) -> dict:
        r = Reader(payload)
        items = []
        while r.remaining:
            items.append(fn(r))
        return {key: items}

    return p


def _prefixed_options(r: Reader) -> dict:
    """A u32-length-prefixed options block (responses; apache/iggy primitives/options.rs):
    user-header TLV entries, string keys."""
    n = r.u32()
    if n > r.remaining:
        raise DecodeError(f"options block of {n} bytes, {r.remaining} left")
    sub = Reader(r.bytes(n))
    return options(sub)


def _stream_vsr(r: Reader) -> dict:
    """`StreamResponse` of the VSR generation: the classic stream fields then an options block."""
    d = _stream(r)
    d["options"] = _prefixed_options(r)
    return d


def _topic_vsr(r: Reader) -> dict:
    """`TopicHeader` (apache/iggy responses/streams/get_stream.rs): id u32, created_at u64,
    partitions_count u32, message_expiry u64, compression u8, max_topic_size u64, size u64,
    messages_count u64, name (u8 len), options and derived options (u32-prefixed blocks)."""
    d = {
        "id": r.u32(),
        "created_at": r.u64(),
        "partitions_count": r.u32(),
        "message_expiry": r.u64(),
        "compression_algorithm": r.u8(),
        "max_topic_size": r.u64(),
        "size": r.u64(),
        "messages_count": r.u64(),
        "name": r.str8(),
    }
    d["options"] = _prefixed_options(r)
    d["derived_options"] = _prefixed_options(r)
    return d


def _partitions_vsr(r: Reader, count: int) -> list[dict]:
    """`count` partition records: 40 bytes (what apache-iggy 0.9 decodes) or 64 bytes (newer
    servers append a 24-byte partition context, kept as hex)."""
    size = 40 if r.remaining == 40 * count else 64 if r.remaining == 64 * count else 40
    out = []
    for _ in range(count):
        p = _partition(r)
        if size == 64:
            p["context"] = r.bytes(24).hex()
        out.append(p)
    return out


def stream_details_vsr(payload) -> dict:
    """GET_STREAM / CREATE_STREAM reply payload: StreamResponse then topics_count TopicHeaders."""

    def p(r: Reader) -> dict:
        d = _stream_vsr(r)
        d["topics"] = [_topic_vsr(r) for _ in range(d["topics_count"])]
        d["layout"] = "vsr"
        return d

    return _variants(payload, p)


def topic_details_vsr(payload) -> dict:
    """GET_TOPIC / CREATE_TOPIC reply payload: TopicHeader then partitions_count partitions."""

    def p(r: Reader) -> dict:
        d = _topic_vsr(r)
        d["partitions"] = _partitions_vsr(r, d["partitions_count"])
        d["layout"] = "vsr"
        return d

    return _variants(payload, p)


def send_confirmations(payload) -> dict:
    """SEND_MESSAGES reply of the VSR generation (apache/iggy responses/messages/
    send_messages.rs): count u32, then per partition written stream_id u32, topic_id u32,
    partition_id u32, base_offset u64."""

    def p(r: Reader) -> dict:
        n = r.u32()
        r.need(20 * n)
        items = [
            {"stream_id": r.u32(), "topic_id": r.u32(), "partition_id": r.u32(), "base_offset": r.u64()}
            for _ in range(n)
        ]
        return {"confirmations": items}

    return _variants(payload, p)


def _head_and_list(head: Callable[[Reader], dict], key: str, item: Callable[[Reader], dict]) -> Callable:
    """A record (`head`) followed by records of another kind to the end of the payload."""

    def dec(payload) -> dict:
        def p(r: Reader) -> dict:
            d = head(r)
            d[key] = []
            while r.remaining:
                d[key].append(item(r))
            return d

        return _variants(payload, p)

    return dec


stream_details = _head_and_list(_stream, "topics", _topic)  # a stream and its topics
topic_details = _head_and_list(_topic, "partitions", _partition)  # a topic and its partitions


def offset_info(payload) -> dict:
    return _variants(
        payload,
        lambda r: {"partition_id": r.u32(), "current_offset": r.u64(), "stored_offset": r.u64()},
    )


def user_id(payload) -> dict:
    return _variants(payload, lambda r: {"user_id": r.u32()})


def _client(r: Reader) -> dict:
    return {
        "client_id": r.u32(),
        "user_id": r.u32(),
        "transport": {1: "tcp", 2: "quic", 3: "http", 4: "websocket"}.get(t := r.u8(), t),
        "address": _addr(r),
        "consumer_groups_count": r.u32(),
    }


def _addr(r: Reader) -> str:
    return r.str32()


def client_details(payload) -> dict:
    def p(r: Reader) -> dict:
        d = _client(r)
        d["consumer_groups"] = [
            {"stream_id": r.u32(), "topic_id": r.u32(), "group_id": r.u32()}
            for _ in range(d["consumer_groups_count"])
        ]
        return d

    return _variants(payload, p)


def clients(payload) -> dict:
    return _many(_client, "clients")(payload)


def stats(payload) -> dict:
    """Server stats; fields read in order while bytes remain (later versions append fields)."""
    r = Reader(payload)
    fields = [
        ("process_id", r.u32),
        ("cpu_usage", r.f32),
        ("total_cpu_usage", r.f32),
        ("memory_usage", r.u64),
        ("total_memory", r.u64),
        ("available_memory", r.u64),
        ("run_time", r.u64),
        ("start_time", r.u64),
        ("read_bytes", r.u64),
        ("written_bytes", r.u64),
        ("messages_size_bytes", r.u64),
        ("streams_count", r.u32),
        ("topics_count", r.u32),
        ("partitions_count", r.u32),
        ("segments_count", r.u32),
        ("messages_count", r.u64),
        ("clients_count", r.u32),
        ("consumer_groups_count", r.u32),
        ("hostname", r.str32),
        ("os_name", r.str32),
        ("os_version", r.str32),
        ("kernel_version", r.str32),
        ("iggy_server_version", r.str32),
    ]
    d: dict = {}
    for name, fn in fields:
        if not r.remaining:
            break
        d[name] = fn()
    if r.remaining:
        d["unparsed_bytes"] = r.remaining
    return d


def pat_token(payload) -> dict:
    return _variants(payload, lambda r: {"token": redacted(r.bytes(r.u8()))})


def group_details(payload) -> dict:
    def p(r: Reader) -> dict:
        d = {"id": r.u32(), "partitions_count": r.u32(), "members_count": r.u32(), "name": r.str8()}
        d["members"] = []
        while r.remaining:
            m = {"id": r.u32(), "partitions_count": r.u32()}
            m["partitions"] = [r.u32() for _ in range(m["partitions_count"])]
            d["members"].append(m)
        return d

    return _variants(payload, p)


def sync_group(payload) -> dict:
    """SYNC_CONSUMER_GROUP reply (apache/iggy responses/consumer_groups/sync_consumer_group.rs):
    generation u64, partition count u32, partition ids u32. An empty reply (no details) means
    the client is not a member of the group."""

    def p(r: Reader) -> dict:
        d: dict = {"generation": r.u64()}
        d["partitions"] = [r.u32() for _ in range(r.u32())]
        return d

    return _variants(payload, p)


def groups(payload) -> dict:
    def g(r: Reader) -> dict:
        return {"id": r.u32(), "partitions_count": r.u32(), "members_count": r.u32(), "name": r.str8()}

    return _many(g, "consumer_groups")(payload)


RESPONSES: dict[int, Callable] = {
    10: stats,
    20: client_details,
    21: client_details,
    22: clients,
    38: user_id,
    42: pat_token,
    44: user_id,
    100: parse_polled,
    120: offset_info,
    200: stream_details,
    201: _many(_stream, "streams"),
    202: stream_details,
    300: topic_details,
    301: _many(_topic, "topics"),
    302: topic_details,
    600: group_details,
    601: groups,
    602: group_details,
    606: sync_group,
}


def login_register(payload) -> dict:
    """LOGIN_REGISTER (40): the VSR register body, or a LOGIN_USER-shaped payload."""
    try:
        return register(payload)
    except DecodeError:
        return login_user(payload)


REQUESTS[40] = login_register


# one decoder per secret body layout (LOGIN_REGISTER's decoder reads LOGIN_USER's layout too,
# LOGIN_REGISTER_WITH_PERSONAL_ACCESS_TOKEN's is LOGIN_WITH_PERSONAL_ACCESS_TOKEN's)
_SECRET_LAYOUTS = (40, 44, 33, 37)
# a reading whose secrets are all shorter is not taken as a secret's: a numeric Identifier
# (01 04 01 00 00 00, stream 1) reads as a CREATE_USER whose password is one byte
SECRET_MIN = 3


def _longest_secret(fields) -> int:
    """The size of the longest secret a decoder redacted in `fields` (base.redacted's text)."""
    if isinstance(fields, str):
        if fields.startswith("<redacted ") and fields.endswith(" bytes>"):
            return int(fields[10:-7])
        return 0
    if isinstance(fields, dict):
        return max(map(_longest_secret, fields.values()), default=0)
    return 0


def secret_reading(payload) -> str | None:
    """The secret command (SECRET_REQUESTS) whose body `payload` also reads as, whatever the
    frame's code (a damaged code reads a login, a password change or a token as another command: its fields,
    or its bytes in `raw`, would hold the secret), or None. By the content alone: a token's layout
    (a length and a string) is every name's, and a damaged code may be anything. Readings whose
    secrets are all shorter than SECRET_MIN bytes do not count."""
    for s in _SECRET_LAYOUTS:
        try:
            fields = REQUESTS[s](payload)
        except (DecodeError, ValueError, IndexError):
            continue
        if _longest_secret(fields) >= SECRET_MIN:
            return COMMANDS[s]
    return None


def reads_as_token(payload) -> bool:
    """Whether a response payload reads as CREATE_PERSONAL_ACCESS_TOKEN's (the token, u8 length):
    under a damaged request code, or paired with the wrong request, it is a token all the same."""
    try:
        pat_token(payload)
    except (DecodeError, ValueError, IndexError):
        return False
    return True


def decode_request(code: int, payload, sums: bool = True) -> dict:
    """Fields of a request payload; codes whose layout is not known keep only the size. `sums`
    false leaves sent messages' checksums out (PayloadPolicy.checksums_kept)."""
    fn = REQUESTS.get(code)
    if fn is None:
        return {"payload_size": len(payload)} if len(payload) else {}
    return fn(payload, sums) if fn is parse_send else fn(payload)


def decode_response(code: int | None, payload, sums: bool = True) -> dict:
    """Structured responses; an empty payload is always fine, others are kept as a size. `sums`
    false leaves polled messages' checksums out (PayloadPolicy.checksums_kept)."""
    if not len(payload):
        return {}
    fn = RESPONSES.get(code) if code is not None else None
    if fn is None:
        return {"payload_size": len(payload)}
    return fn(payload, sums) if fn is parse_polled else fn(payload)
