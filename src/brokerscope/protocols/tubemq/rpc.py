"""TubeMQ's RPC layer: the envelope inside a frame, the method table, message bodies.

The joined blocks of a frame (see `framing`) hold protobuf messages back to back, each prefixed
with its length as a varint ("delimited" encoding):

    request  (RpcConnHeader.flag == 0): RpcConnHeader, RequestHeader, RequestBody
    response (RpcConnHeader.flag == 1): RpcConnHeader, ResponseHeader,
                                        RspResponseBody (status SUCCESS) | RspExceptionBody

RequestBody.request / RspResponseBody.data hold the method's own message, chosen by the method
id (table below, from TubeMQ's RpcConstants). Nothing here raises on bad bytes: decoding returns
an error text instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from ... import native
from .. import base, pbcheck
from ..base import text
from ..schema import MessagePool
from .gen import tubemq_broker_pb2 as brk
from .gen import tubemq_master_pb2 as mst
from .gen import tubemq_rpc_pb2 as rpc

_rpc = native.load(__package__, "_rpc")  # compiled from _rpc.c: the envelope of a frame

FLAG_REQUEST = 0
FLAG_RESPONSE = 1

# RequestHeader.serviceType
SERVICES = {
    1: "master",
    2: "broker_read",
    3: "broker_write",
    4: "broker_admin",
    5: "master_admin",
}

STATUS = {0: "SUCCESS", 1: "ERROR", 2: "FATAL"}

# RegisterRequestC2B.opType
OP_TYPES = {31: "register", 32: "unregister"}

# EventProto.status (TubeMQ's EventStatus, from the protocol guide)
EVENT_STATUS = {0: "TODO", 1: "PROCESSING", 2: "DONE", -1: "UNKNOWN", -2: "FAILED"}

# TubeMQ's success errCode in response bodies
ERR_SUCCESS = 200


@dataclass(frozen=True)
class Method:
    """One RPC: its id, TubeMQ's method name, the services that accept it, its message classes."""

    id: int
    name: str
    services: tuple[int, ...]
    request: type[Message] | None
    response: type[Message] | None

    def message_name(self, is_request: bool) -> str | None:
        """TubeMQ's name of the message, looked up in a user schema (schema_file)."""
        cls = self.request if is_request else self.response
        return cls.DESCRIPTOR.name if cls is not None else None


_MASTER = (1,)
_BROKER = (2, 3)

METHODS: dict[int, Method] = {
    m.id: m
    for m in (
        Method(1, "producerRegisterP2M", _MASTER, mst.RegisterRequestP2M, mst.RegisterResponseM2P),
        Method(2, "producerHeartbeatP2M", _MASTER, mst.HeartRequestP2M, mst.HeartResponseM2P),
        Method(3, "producerCloseClientP2M", _MASTER, mst.CloseRequestP2M, mst.CloseResponseM2P),
        Method(4, "consumerRegisterC2M", _MASTER, mst.RegisterRequestC2M, mst.RegisterResponseM2C),
        Method(5, "consumerHeartbeatC2M", _MASTER, mst.HeartRequestC2M, mst.HeartResponseM2C),
        Method(6, "consumerCloseClientC2M", _MASTER, mst.CloseRequestC2M, mst.CloseResponseM2C),
        Method(7, "brokerRegisterB2M", _MASTER, mst.RegisterRequestB2M, mst.RegisterResponseM2B),
        Method(8, "brokerHeartbeatB2M", _MASTER, mst.HeartRequestB2M, mst.HeartResponseM2B),
        Method(9, "brokerCloseClientB2M", _MASTER, mst.CloseRequestB2M, mst.CloseResponseM2B),
        # broker methods 11, 12, 14 and 19 are reserved ids with no message defined by TubeMQ
        Method(11, "producerRegisterP2B", _BROKER, None, None),
        Method(12, "producerHeartbeatP2B", _BROKER, None, None),
        Method(13, "sendMessageP2B", _BROKER, brk.SendMessageRequestP2B, brk.SendMessageResponseB2P),
        Method(14, "producerCloseP2B", _BROKER, None, None),
        Method(15, "consumerRegisterC2B", _BROKER, brk.RegisterRequestC2B, brk.RegisterResponseB2C),
        Method(16, "consumerHeartbeatC2B", _BROKER, brk.HeartBeatRequestC2B, brk.HeartBeatResponseB2C),
        Method(
            17,
            "getMessagesC2B",
            _BROKER,
            brk.GetMessageRequestC2B,
            brk.GetMessageResponseB2C,
        ),
        Method(
            18,
            "consumerCommitC2B",
            _BROKER,
            brk.CommitOffsetRequestC2B,
            brk.CommitOffsetResponseB2C,
        ),
        Method(19, "consumerCloseC2B", _BROKER, None, None),
        # the V2 (client-balance) consumer calls
        Method(20, "consumerRegisterC2MV2", _MASTER, mst.RegisterRequestC2MV2, mst.RegisterResponseM2CV2),
        Method(21, "consumerHeartbeatC2MV2", _MASTER, mst.HeartRequestC2MV2, mst.HeartResponseM2CV2),
        Method(
            22, "consumerGetPartMetaInfoC2M", _MASTER, mst.GetPartMetaRequestC2M, mst.GetPartMetaResponseM2C
        ),
    )
}


def method_name(method_id: int | None) -> str:
    if method_id is None:
        return "unknown"
    m = METHODS.get(method_id)
    return m.name if m else f"method_{method_id}"


# ---------------------------------------------------------------------------------------------
# varints and delimited messages


# (value, next position) of the varint at `pos`; raises ValueError (base.VarintError) if cut or too long
read_varint = base.read_uvarint


def read_delimited(buf: bytes, pos: int, cls: type[Message]) -> tuple[Message, int]:
    """Parse one varint-length-prefixed message of `cls` at `pos`; raise ValueError on bad bytes."""
    n, start = read_varint(buf, pos)
    end = start + n
    if end > len(buf):
        raise ValueError(
            f"{cls.__name__}: length {n} runs past the end of the frame ({len(buf) - start} left)"
        )
    msg = cls()
    wire = buf[start:end]
    try:
        msg.ParseFromString(wire)
    except DecodeError as e:
        raise ValueError(f"{cls.__name__}: {e}") from None
    # not as a client writes it (pbcheck.py): a damaged byte, the body it frames may not be
    # where it says (its strings, an exception's, are the server's prose: left as they are)
    why = pbcheck.reencoded(msg, wire)
    if why is None and start - pos != max(1, (n.bit_length() + 6) // 7):
        why = "its length is a varint longer than its value needs"
    if why is not None:
        raise ValueError(f"{cls.__name__} seems damaged ({why})")
    return msg, end


# ---------------------------------------------------------------------------------------------
# envelope


@dataclass(slots=True)
class Envelope:
    """The decoded envelope of one frame (request or response)."""

    flag: int | None = None
    is_request: bool = True
    service_type: int | None = None
    protocol_ver: int | None = None
    method_id: int | None = None
    timeout: int | None = None
    status: int | None = None  # responses
    exception_name: str | None = None
    stack_trace: str | None = None
    body: bytes | None = None  # the method's serialized message
    trailing: int = 0  # bytes left after the envelope's messages
    conn_header: dict = field(default_factory=dict)


def decode_envelope(data: bytes) -> Envelope:
    """Split the joined blocks of a frame into the RPC envelope. Raises ValueError on bad bytes.
    The compiled _rpc.envelope reads it; what it leaves (damage, an error response) is read
    here with protobuf."""
    got = _rpc.envelope(data)
    return envelope_of(got) if got is not None else read_envelope(data)


def read_envelope(data: bytes) -> Envelope:
    """decode_envelope with protobuf alone (what the compiled reader leaves)."""
    env = Envelope()
    head, pos = read_delimited(data, 0, rpc.RpcConnHeader)
    env.flag = head.flag if head.HasField("flag") else None
    env.conn_header = message_to_dict(head)
    env.is_request = env.flag != FLAG_RESPONSE
    if env.is_request:
        rh, pos = read_delimited(data, pos, rpc.RequestHeader)
        env.service_type = rh.serviceType if rh.HasField("serviceType") else None
        env.protocol_ver = rh.protocolVer if rh.HasField("protocolVer") else None
        rb, pos = read_delimited(data, pos, rpc.RequestBody)
        env.method_id = rb.method if rb.HasField("method") else None
        env.timeout = rb.timeout if rb.HasField("timeout") else None
        env.body = rb.request if rb.HasField("request") else None
    else:
        rh, pos = read_delimited(data, pos, rpc.ResponseHeader)
        env.status = rh.status if rh.HasField("status") else 0
        env.service_type = rh.serviceType if rh.HasField("serviceType") else None
        env.protocol_ver = rh.protocolVer if rh.HasField("protocolVer") else None
        if env.status == 0:
            rb, pos = read_delimited(data, pos, rpc.RspResponseBody)
            env.method_id = rb.method if rb.HasField("method") else None
            env.body = rb.data if rb.HasField("data") else None
        else:
            ex, pos = read_delimited(data, pos, rpc.RspExceptionBody)
            # proto2 strings: bytes when they are not UTF-8 (content.text keeps them visible)
            env.exception_name = text(ex.exceptionName) if ex.HasField("exceptionName") else None
            env.stack_trace = text(ex.stackTrace) if ex.HasField("stackTrace") else None
    env.trailing = len(data) - pos
    return env


# ---------------------------------------------------------------------------------------------
# message bodies -> dicts (secrets redacted)

# Field names whose values are credentials or access tokens.
SECRET_FIELDS = frozenset(
    {"signature", "othParams", "authorizedToken", "authAuthorizedToken", "visitAuthorizedToken", "sessionKey"}
)
# Text fields that may hold tabs and line ends (error messages, stack traces, JSON settings):
# control characters elsewhere mark a damaged message (pbcheck.odd_values)
PROSE = frozenset(
    {"errMsg", "failureInfo", "exceptionName", "stackTrace", "flowControlInfo", "defFlowControlInfo"}
)
# Large byte fields summarised by size in details (the bytes go to the messages table).
PAYLOAD_FIELDS = frozenset({"data", "payLoadData"})
# Checksums of the payload field beside them (CRC32 of data / payLoadData): payload-derived, in
# details only where the payload policy keeps payloads whole (PayloadPolicy.checksums_kept).
PAYLOAD_SUMS = frozenset({"checkSum"})


def _secret(value) -> str | None:
    if isinstance(value, bytes | str):
        return base.redacted(value)
    return base.redacted(str(value))


# how message_to_dict and plain read a field, by its descriptor: (name, kind, is a string,
# has presence); descriptors of user schemas come and go with their pools, so the table is bounded
_FIELDS: dict = {}
_FIELDS_MAX = 4096
PLAIN, SECRET, MESSAGE, MESSAGES, REPEATED, PAYLOAD = range(6)


def _field(fd) -> tuple[str, int, bool, bool]:
    name = fd.name
    if name in SECRET_FIELDS:
        kind = SECRET
    elif fd.message_type is not None:
        kind = MESSAGES if fd.is_repeated else MESSAGE
    elif fd.is_repeated:
        kind = REPEATED
    elif name in PAYLOAD_FIELDS:
        kind = PAYLOAD
    else:
        kind = PLAIN
    if len(_FIELDS) >= _FIELDS_MAX:
        _FIELDS.clear()
    got = _FIELDS[fd] = (name, kind, fd.type == FieldDescriptor.TYPE_STRING, fd.has_presence)
    return got


def message_to_dict(msg: Message) -> dict:
    """Every set field of `msg` as plain Python values (int64 stay ints, enums as numbers),
    with secret fields replaced by their size and payload bytes by their size."""
    out: dict = {}
    for fd, value in msg.ListFields():
        name, kind, _s, _p = _FIELDS.get(fd) or _field(fd)
        if kind == PLAIN:
            out[name] = value
        elif kind == SECRET:
            out[name] = _secret(value)
        elif kind == MESSAGE:
            out[name] = message_to_dict(value)
        elif kind == MESSAGES:
            out[name] = [message_to_dict(v) for v in value]
        elif kind == REPEATED:
            out[name] = list(value)
        else:  # PAYLOAD
            out[name] = {"size": len(value)} if isinstance(value, bytes) else value
    return out


def plain(msg: Message) -> dict:
    """What _rpc.body gives for a message, read from a protobuf one (a user's schema, bytes the
    compiled reader leaves): the set fields by name, strings as text (base.text), nested messages
    as such dicts, repeated fields as lists, bytes whole, secrets as rpc._secret writes them."""
    out: dict = {}
    for fd, value in msg.ListFields():
        name, kind, is_str, presence = _FIELDS.get(fd) or _field(fd)
        if kind == SECRET:
            out[name] = _secret(value)
        elif kind == MESSAGE:
            out[name] = plain(value)
        elif kind == MESSAGES:
            out[name] = [plain(v) for v in value]
        elif kind == REPEATED:
            out[name] = [text(v) for v in value] if is_str else list(value)
        elif presence:  # a user's proto3 scalar has none: left out, as `values` leaves it
            out[name] = text(value) if is_str and value.__class__ is bytes else value
    return out


# The compiled reader's table (_rpc.body): every built-in message of METHODS and the messages
# they hold, read from the generated descriptors (the declaration is protos/tubemq): per message,
# (field number, name, kind) in field-number order. A message with a field of a type or label
# the table has no kind for (none of TubeMQ's) is left to protobuf.
_K_INT32, _K_INT64, _K_BOOL, _K_STRING, _K_BYTES, _K_MESSAGE = range(6)
_F_REPEATED, _F_SECRET, _F_SIZED = 0x10000, 0x20000, 0x40000  # _rpc.c's F_REPEATED, F_SECRET, F_SIZED
_KIND = {
    FieldDescriptor.TYPE_INT32: _K_INT32,
    FieldDescriptor.TYPE_INT64: _K_INT64,
    FieldDescriptor.TYPE_BOOL: _K_BOOL,
    FieldDescriptor.TYPE_STRING: _K_STRING,
    FieldDescriptor.TYPE_BYTES: _K_BYTES,
    FieldDescriptor.TYPE_MESSAGE: _K_MESSAGE,
}


@dataclass(frozen=True)
class BodySchema:
    """The compiled reader's table (`table`, from _rpc.schema), each message's entry by full name,
    and per entry the fields `details` shows by size (PAYLOAD_FIELDS) or that hold such fields:
    (name, entry of the nested message or None for the payload itself, repeated)."""

    table: object
    index: dict[str, int]
    sized: tuple[tuple[tuple[str, int | None, bool], ...], ...]


def body_schema(classes) -> BodySchema:
    """The table of `classes`' messages and every message they hold (those it can read)."""
    order: list = []
    entry: dict[str, int] = {}

    def add(desc) -> bool:
        if desc.full_name in entry:
            return True
        entry[desc.full_name] = len(order)
        order.append(desc)
        for fd in desc.fields:
            if fd.type not in _KIND or (fd.is_repeated and fd.type not in (fd.TYPE_STRING, fd.TYPE_MESSAGE)):
                return False
            if fd.name in SECRET_FIELDS and (fd.is_repeated or fd.type == fd.TYPE_MESSAGE):
                return False
            if fd.message_type is not None and not add(fd.message_type):
                return False
        return True

    readable = set()
    for cls in classes:
        order_len, known = len(order), dict(entry)
        if add(cls.DESCRIPTOR):
            readable.add(cls.DESCRIPTOR.full_name)
        else:  # drop what this message added
            del order[order_len:]
            entry.clear()
            entry.update(known)
    table, sized = [], []
    for desc in order:
        fields, shown = [], []
        for fd in sorted(desc.fields, key=lambda f: f.number):
            kind = _KIND[fd.type]
            if kind == _K_MESSAGE:
                kind += 8 * entry[fd.message_type.full_name]
            kind |= (_F_REPEATED if fd.is_repeated else 0) | (_F_SECRET if fd.name in SECRET_FIELDS else 0)
            payload = fd.type == fd.TYPE_BYTES and fd.name in PAYLOAD_FIELDS and fd.name not in SECRET_FIELDS
            fields.append((fd.number, fd.name, kind | (_F_SIZED if payload else 0)))
            if payload:
                shown.append((fd.name, None, False))
            elif fd.message_type is not None:
                shown.append((fd.name, entry[fd.message_type.full_name], fd.is_repeated))
        table.append(fields)
        sized.append(tuple(shown))
    # keep only the nested entries that lead to a payload
    changed = True
    leads = [any(sub is None for _n, sub, _r in s) for s in sized]
    while changed:
        changed = False
        for i, s in enumerate(sized):
            if not leads[i] and any(sub is not None and leads[sub] for _n, sub, _r in s):
                leads[i] = changed = True
    sized = [tuple(x for x in s if x[1] is None or leads[x[1]]) for s in sized]
    index = {name: i for name, i in entry.items() if name in readable}
    return BodySchema(_rpc.schema(table), index, tuple(sized))


def without_sums(values: object) -> object:
    """`values` (a body's details, as sized or decode_body give them) without PAYLOAD_SUMS fields
    at any depth; the same object where there are none."""
    if isinstance(values, dict):
        out = {k: without_sums(v) for k, v in values.items() if k not in PAYLOAD_SUMS}
        same = len(out) == len(values) and all(out[k] is v for k, v in values.items())
        return values if same else out
    if isinstance(values, list):
        out = [without_sums(v) for v in values]
        return values if all(a is b for a, b in zip(out, values)) else out
    return values


def sized(values: dict, schema: BodySchema, i: int) -> dict:
    """`values` of entry `i` (_rpc.body) as `details` shows them: payload bytes by their size."""
    out = values
    for name, sub, many in schema.sized[i]:
        v = values.get(name)
        if v is None:
            continue
        if out is values:
            out = dict(values)
        if sub is None:
            out[name] = {"size": len(v)}
        elif many:
            out[name] = [sized(x, schema, sub) for x in v]
        else:
            out[name] = sized(v, schema, sub)
    return out


BUILTIN = body_schema([c for m in METHODS.values() for c in (m.request, m.response) if c is not None])


def body_entries(schema: MessagePool | None = None) -> tuple[dict[int, int], dict[int, int]]:
    """BUILTIN's entry of each method's request and of its response (method id -> entry), for
    _rpc.read; a message of the same name in `schema` (the user's schema_file) has none."""
    out: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for m in METHODS.values():
        for is_request, entries in ((True, out[0]), (False, out[1])):
            name = m.message_name(is_request)
            if name is None or (schema is not None and schema.get(name) is not None):
                continue
            cls = m.request if is_request else m.response
            i = BUILTIN.index.get(cls.DESCRIPTOR.full_name)
            if i is not None:
                entries[m.id] = i
    return out


def envelope_of(got: tuple) -> Envelope:
    """The Envelope of a tuple _rpc.envelope (or _rpc.read) gave."""
    flag, conn, service_type, protocol_ver, method_id, timeout, status, body, trailing = got
    return Envelope(
        flag, flag != FLAG_RESPONSE, service_type, protocol_ver, method_id, timeout, status, None, None,
        body, trailing, conn,
    )  # fmt: skip


def decode_body(
    method_id: int | None, is_request: bool, body: bytes | None, schema: MessagePool | None = None
) -> tuple[dict | None, dict, str | None]:
    """(the message's fields or None, details dict, error text or None) for a method's body.

    The fields as `plain` gives them, read by the compiled reader (_rpc.body) or, where it leaves
    the bytes, by protobuf. A message of the same name in `schema` (the user's schema_file)
    replaces the built-in one; the details then name the schema file that defined it (`schema`).
    A body that is not as a client writes it (pbcheck.damage) gives no fields, and says why."""
    if body is None:
        return None, {}, None
    m = METHODS.get(method_id) if method_id is not None else None
    cls = None if m is None else (m.request if is_request else m.response)
    user = schema.get(m.message_name(is_request)) if schema is not None and m is not None else None
    if user is not None:
        cls = user
    if user is None and cls is not None:
        i = BUILTIN.index.get(cls.DESCRIPTOR.full_name)
        if i is not None:
            got = _rpc.body(body, BUILTIN.table, i)
            if got is not None:  # read as a client writes it: the compiled reader leaves the rest
                return got, sized(got, BUILTIN, i), None
    if cls is None:
        fields, err = decode_wire(body)
        return None, {"fields": fields}, err
    msg = cls()
    try:
        msg.ParseFromString(body)
    except DecodeError as e:
        return None, {}, f"{cls.DESCRIPTOR.name}: {e}"
    why = pbcheck.damage(msg, body, PROSE)
    if why is not None:  # a damaged tag or length may have put a credential in any field, a
        # damaged method id or header length a credential-carrying body under any method
        return (
            None,
            {},
            (
                f"{cls.DESCRIPTOR.name} seems damaged ({why}; or another version of the message: "
                "[protocols.tubemq] schema_file names it): none of its fields kept, a credential may be in any"
            ),
        )
    out = message_to_dict(msg)
    if user is not None:
        out["schema"] = user.DESCRIPTOR.file.name
    return plain(msg), out, None


def decode_wire(data: bytes) -> tuple[dict, str | None]:
    """Schema-less decoding of a protobuf message: {field number: [values]}, for methods whose
    message definitions are not known. Numbers (varints, fixed32, fixed64) are kept; a
    length-delimited value keeps only its size ({"size": n}): what it holds (a signature, a
    token, a message's payload) cannot be told apart here, so none of its bytes are kept, in
    clear or encoded (found by a user trial: a heartbeat's authInfo under a reserved id)."""
    out: dict[str, list] = {}
    pos = 0
    try:
        while pos < len(data):
            key, pos = read_varint(data, pos)
            num, wt = key >> 3, key & 7
            if num == 0:
                raise ValueError("field number 0")
            if wt == 0:
                v, pos = read_varint(data, pos)
            elif wt == 1:
                if pos + 8 > len(data):
                    raise ValueError("fixed64 runs past the end")
                v = int.from_bytes(data[pos : pos + 8], "little")
                pos += 8
            elif wt == 5:
                if pos + 4 > len(data):
                    raise ValueError("fixed32 runs past the end")
                v = int.from_bytes(data[pos : pos + 4], "little")
                pos += 4
            elif wt == 2:
                n, pos = read_varint(data, pos)
                if pos + n > len(data):
                    raise ValueError("length-delimited field runs past the end")
                v = {"size": n}
                pos += n
            else:
                raise ValueError(f"unsupported wire type {wt}")
            out.setdefault(str(num), []).append(v)
    except ValueError as e:
        return out, f"wire decoding stopped at byte {pos}: {e}"
    return out, None
