"""Iggy command codes and names (as apache/iggy's `types/command` module defines them)."""

from __future__ import annotations

import struct

# code -> name. Codes 1..605 from the binary transport spec plus those added since.
COMMANDS: dict[int, str] = {
    1: "PING",
    10: "GET_STATS",
    11: "GET_SNAPSHOT_FILE",
    12: "GET_CLUSTER_METADATA",
    13: "DESCRIBE_OPTIONS",
    20: "GET_ME",
    21: "GET_CLIENT",
    22: "GET_CLIENTS",
    31: "GET_USER",
    32: "GET_USERS",
    33: "CREATE_USER",
    34: "DELETE_USER",
    35: "UPDATE_USER",
    36: "UPDATE_PERMISSIONS",
    37: "CHANGE_PASSWORD",
    38: "LOGIN_USER",
    39: "LOGOUT_USER",
    40: "LOGIN_REGISTER",
    41: "GET_PERSONAL_ACCESS_TOKENS",
    42: "CREATE_PERSONAL_ACCESS_TOKEN",
    43: "DELETE_PERSONAL_ACCESS_TOKEN",
    44: "LOGIN_WITH_PERSONAL_ACCESS_TOKEN",
    45: "LOGIN_REGISTER_WITH_PERSONAL_ACCESS_TOKEN",
    100: "POLL_MESSAGES",
    101: "SEND_MESSAGES",
    102: "FLUSH_UNSAVED_BUFFER",
    120: "GET_CONSUMER_OFFSET",
    121: "STORE_CONSUMER_OFFSET",
    122: "DELETE_CONSUMER_OFFSET",
    200: "GET_STREAM",
    201: "GET_STREAMS",
    202: "CREATE_STREAM",
    203: "DELETE_STREAM",
    204: "UPDATE_STREAM",
    205: "PURGE_STREAM",
    300: "GET_TOPIC",
    301: "GET_TOPICS",
    302: "CREATE_TOPIC",
    303: "DELETE_TOPIC",
    304: "UPDATE_TOPIC",
    305: "PURGE_TOPIC",
    402: "CREATE_PARTITIONS",
    403: "DELETE_PARTITIONS",
    503: "DELETE_SEGMENTS",
    600: "GET_CONSUMER_GROUP",
    601: "GET_CONSUMER_GROUPS",
    602: "CREATE_CONSUMER_GROUP",
    603: "DELETE_CONSUMER_GROUP",
    604: "JOIN_CONSUMER_GROUP",
    605: "LEAVE_CONSUMER_GROUP",
    606: "SYNC_CONSUMER_GROUP",
}
NAMES: dict[str, int] = {v: k for k, v in COMMANDS.items()}

# Commands whose request payload is empty (used to tell the two length-prefixed framings apart).
EMPTY_REQUEST = frozenset({1, 10, 12, 20, 22, 32, 39, 41, 201})

# VSR framing: the request header's `operation` byte. 1 and 2 are the client session operations
# (apache-iggy 0.9 clients: REGISTER carries the login, NON_REPLICATED carries a classic command
# whose code sits in the header at offset 196); 128+ are replicated state-machine operations.
VSR_REGISTER = 1
VSR_NON_REPLICATED = 2


class Layout:
    """A header's fields {name: (offset, struct format)}, little-endian, read with one
    precompiled struct (pad bytes between the fields)."""

    def __init__(self, fields: dict[str, tuple[int, str]]):
        items = sorted(fields.items(), key=lambda kv: kv[1][0])
        fmt, pos = "<", 0
        for _name, (off, f) in items:
            fmt += (f"{off - pos}x" if off > pos else "") + f
            pos = off + struct.calcsize("<" + f)
        self.fields = fields
        self.names = [name for name, _ in items]
        self.struct = struct.Struct(fmt)

    def read(self, buf, pos: int = 0) -> dict:
        """The fields read from `buf` at `pos` (the caller checked the length)."""
        return dict(zip(self.names, self.struct.unpack_from(buf, pos)))


read_layout = Layout.read  # read_layout(LAYOUT, buf, pos): the fields as a dict


# The length-prefixed framings' headers, little-endian: {name: (offset, struct format)}.
# Classic request: [length = 4 + payload][code][payload]; the request-id framing puts a request id
# after the code (length = 12 + payload). Response: [status][length = payload][payload], the
# request-id framing's payload leading with the request id.
REQUEST_HEADER = Layout({"length": (0, "I"), "code": (4, "I")})
RESPONSE_HEADER = Layout({"status": (0, "I"), "length": (4, "I")})
REQUEST_ID = Layout({"request_id": (8, "Q")})  # both directions, request-id framing

# The VSR (consensus) header: 256 bytes, little-endian (apache/iggy types/consensus/header.rs).
# The fields brokerscope reads, as {name: (offset, struct format)}; u128s are read as 16 bytes.
VSR_HEADER_LEN = 256
VSR_COMMON = Layout(
    {
        "size": (48, "I"),  # the whole frame, this header included
        "view": (52, "I"),
        "release": (56, "I"),
        "command": (60, "B"),  # VSR_COMMANDS
        "replica": (61, "B"),
    }
)
VSR_REQUEST = Layout(
    {  # command 5, as a client sends it (no namespace field)
        "client": (128, "16s"),
        # request_checksum u128 @144 is not read: XXH3-64 of the body, which for a login
        # (REGISTER) holds the password, an unkeyed hash a guess can be checked against
        "timestamp": (160, "Q"),
        "request": (168, "Q"),
        "operation": (176, "B"),  # VSR_OPERATIONS
        "session": (184, "Q"),
        "header_user_id": (192, "I"),
        "code": (196, "I"),  # the classic command code, for operation NON_REPLICATED
    }
)
VSR_REPLY = Layout(
    {  # command 8
        "op": (176, "Q"),
        "commit": (184, "Q"),
        "request": (200, "Q"),
        "operation": (208, "B"),
        "status": (216, "I"),
    }
)
VSR_EVICTION = Layout(
    {  # command 13
        "client": (128, "16s"),
        "protocol_max": (144, "I"),  # the server's accepted window, for reasons 14 and 15
        "protocol_min": (148, "I"),
        "reason": (255, "B"),  # EVICTION_REASONS
    }
)


# VSR (consensus) header `command` byte values (apache/iggy types/consensus/header.rs).
VSR_COMMANDS: dict[int, str] = {
    0: "RESERVED",
    1: "PING",
    2: "PONG",
    3: "PING_CLIENT",
    4: "PONG_CLIENT",
    5: "REQUEST",
    6: "PREPARE",
    7: "PREPARE_OK",
    8: "REPLY",
    9: "COMMIT",
    10: "START_VIEW_CHANGE",
    11: "DO_VIEW_CHANGE",
    12: "START_VIEW",
    13: "EVICTION",
}
# EvictionHeader reason byte @255 (apache/iggy consensus header EvictionReason). Reasons 14 and
# 15 carry the server's accepted protocol window: max u32 @144, min u32 @148 (binary_protocol
# version.rs).
EVICTION_REASONS: dict[int, str] = {
    0: "reserved",
    1: "no_session",
    2: "client_release_too_low",
    3: "client_release_too_high",
    4: "invalid_request_operation",
    5: "invalid_request_body",
    6: "invalid_request_body_size",
    7: "session_too_low",
    8: "session_release_mismatch",
    9: "invalid_credentials",
    10: "invalid_token",
    11: "user_inactive",
    12: "session_error",
    13: "stale_client",
    14: "incompatible_protocol",
    15: "malformed_login",
}
# VSR `operation` byte values (apache/iggy core/binary_protocol/src/consensus/operation.rs).
VSR_OPERATIONS: dict[int, str] = {
    1: "REGISTER",
    2: "NON_REPLICATED",
    3: "LOGOUT",
    64: "CREATE_TOPIC_WITH_ASSIGNMENTS",  # replica-internal
    65: "CREATE_PARTITIONS_WITH_ASSIGNMENTS",  # replica-internal
    128: "CREATE_STREAM",
    129: "UPDATE_STREAM",
    130: "DELETE_STREAM",
    131: "PURGE_STREAM",
    132: "CREATE_TOPIC",
    133: "UPDATE_TOPIC",
    134: "DELETE_TOPIC",
    135: "PURGE_TOPIC",
    136: "CREATE_PARTITIONS",
    137: "DELETE_PARTITIONS",
    138: "DELETE_SEGMENTS",
    139: "CREATE_CONSUMER_GROUP",
    140: "DELETE_CONSUMER_GROUP",
    141: "CREATE_USER",
    142: "UPDATE_USER",
    143: "DELETE_USER",
    144: "CHANGE_PASSWORD",
    145: "UPDATE_PERMISSIONS",
    146: "CREATE_PERSONAL_ACCESS_TOKEN",
    147: "DELETE_PERSONAL_ACCESS_TOKEN",
    148: "JOIN_CONSUMER_GROUP",
    149: "LEAVE_CONSUMER_GROUP",
    160: "SEND_MESSAGES",
    161: "STORE_CONSUMER_OFFSET",
    162: "DELETE_CONSUMER_OFFSET",
    164: "STORE_CONSUMER_OFFSET2",
    165: "DELETE_CONSUMER_OFFSET2",
}
# VSR operations whose body is the classic payload of this command code
VSR_OPERATION_CODES: dict[int, int] = {
    3: 39,
    128: 202,
    129: 204,
    130: 203,
    131: 205,
    132: 302,
    133: 304,
    134: 303,
    135: 305,
    136: 402,
    137: 403,
    138: 503,
    139: 602,
    140: 603,
    141: 33,
    142: 35,
    143: 34,
    144: 37,
    145: 36,
    146: 42,
    147: 43,
    148: 604,
    149: 605,
    160: 101,
    161: 121,
    162: 122,
    164: 121,
    165: 122,
}

# Replies whose body leads with a result section ([count u32] then count x {index u32,
# result u32}; success = count 0 then the payload): `Operation::is_result_framed` = every
# metadata operation (internal 64-65 and 128-149) plus the four consumer-offset writes, and a
# non-empty REGISTER reply (apache/iggy consensus/reply_result.rs, the SDK's reply decode).
_RESULT_FRAMED = frozenset({64, 65, *range(128, 150), 161, 162, 164, 165})


def result_framed(operation: int, body_size: int) -> bool:
    return operation in _RESULT_FRAMED or (operation == VSR_REGISTER and body_size > 0)


HEADER_KINDS: dict[int, str] = {
    1: "raw",
    2: "string",
    3: "bool",
    4: "int8",
    5: "int16",
    6: "int32",
    7: "int64",
    8: "int128",
    9: "uint8",
    10: "uint16",
    11: "uint32",
    12: "uint64",
    13: "uint128",
    14: "float32",
    15: "float64",
}
POLLING_KINDS = {1: "offset", 2: "timestamp", 3: "first", 4: "last", 5: "next"}
PARTITIONING_KINDS = {1: "balanced", 2: "partition_id", 3: "messages_key"}
CONSUMER_KINDS = {1: "consumer", 2: "consumer_group"}
MESSAGE_STATES = {1: "available", 10: "unavailable", 20: "poisoned", 30: "marked_for_deletion"}
