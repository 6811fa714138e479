"""The VSR (consensus-header) framing spoken by apache-iggy 0.9 clients: what its headers say.

The header (apache/iggy core/binary_protocol/src/consensus/header.rs, client-wire version) is 256
bytes, little-endian: checksum u128, checksum_body u128, cluster u128, size u32 @48 = header +
body, view u32 @52, release u32 @56, command u8 @60, replica u8 @61, ... then the body.
Requests (command 5) carry client u128 @128, request_checksum @144, timestamp u64 @160,
request u64 @168, operation u8 @176, session u64 @184, user_id u32 @192 and (non-replicated)
the classic command code u32 @196; replies (command 8) carry op u64 @176, commit u64 @184,
request u64 @200, operation u8 @208 and status u32 @216 (codes.VSR_REQUEST, VSR_REPLY). One
request is in flight at a time: FIFO pairing. Bodies are the classic payloads; metadata /
offset-write / register replies lead with a result section (consensus/reply_result.rs).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from .codes import (
    EVICTION_REASONS,
    VSR_COMMANDS,
    VSR_HEADER_LEN,
    VSR_NON_REPLICATED,
    VSR_OPERATION_CODES,
    VSR_OPERATIONS,
    VSR_REGISTER,
)
from .commands import (
    cluster_metadata,
    decode_response,
    protocol_version_text,
    register,
    register_reply,
    send_confirmations,
    stream_details_vsr,
    topic_details_vsr,
)
from .framing import VSR
from .wire import DecodeError

MAX_RESULTS = 1024  # entries of a result section listed in details


def _vsr_or_classic(vsr_decoder, code: int):
    """The VSR-generation layout first; a reply in the classic shape still decodes."""

    def dec(payload) -> dict:
        try:
            return vsr_decoder(payload)
        except DecodeError:
            return decode_response(code, payload)

    return dec


# reply payload decoders of the VSR generation, by the request's command code
VSR_RESPONSES = {
    40: register_reply,
    12: cluster_metadata,
    101: send_confirmations,
    200: _vsr_or_classic(stream_details_vsr, 200),
    202: _vsr_or_classic(stream_details_vsr, 202),
    300: _vsr_or_classic(topic_details_vsr, 300),
    302: _vsr_or_classic(topic_details_vsr, 302),
}


def header_details(h: dict, size: int) -> dict:
    """The details every consensus frame has, from its common header fields (codes.VSR_COMMON)."""
    return {
        "framing": VSR,
        "vsr_command": VSR_COMMANDS[h["command"]],
        "size": size,
        "view": h["view"],
        "release": h["release"],
        "replica": h["replica"],
        "body_size": size - VSR_HEADER_LEN,
    }


# The header's checksums, u128 each: checksum @0 and checksum_body @16 (over the header and the
# body), and the request's checksum @144 of a request, repeated @128 of its reply (XXH3-64 of the
# request's body). For a login or a CREATE_USER the body holds a password: each is an unkeyed
# hash a guess can be checked against, so `raw` keeps none of them.
_CHECKSUMS = ((0, 32),)
_REQUEST_CHECKSUM = {True: (144, 160), False: (128, 144)}  # request (client) / reply


def without_checksums(raw: bytes, request: bool) -> bytes:
    """`raw` (the first bytes of a VSR frame) with the header's checksum fields zeroed."""
    out = bytearray(raw)
    for lo, hi in (*_CHECKSUMS, _REQUEST_CHECKSUM[request]):
        out[lo:hi] = bytes(max(0, min(hi, len(out)) - lo))
    return bytes(out)


def request_details(q: dict) -> dict:
    """The details of a Request header's fields (codes.VSR_REQUEST)."""
    operation = q["operation"]
    return {
        "client": f"{int.from_bytes(q['client'], 'little'):032x}",
        "timestamp": q["timestamp"],
        "session": q["session"],
        "header_user_id": q["header_user_id"],
        "request": q["request"],
        "operation": operation,
        "operation_name": VSR_OPERATIONS.get(operation, f"op_{operation}"),
    }


def request_command(q: dict) -> tuple[int | None, Callable | None, bool]:
    """The classic command a Request carries: (code or None when unknown, the body's decoder
    when it is not the classic request decoder, whether the body holds a secret)."""
    operation = q["operation"]
    if operation == VSR_REGISTER:  # the session's login: LOGIN_REGISTER with a password or token
        return 40, register, True
    if operation == VSR_NON_REPLICATED:  # the code sits in the header @196
        return q["code"], None, False
    return VSR_OPERATION_CODES.get(operation), None, False


def eviction_details(e: dict) -> dict:
    """The details of an Eviction header's fields (command 13, codes.VSR_EVICTION)."""
    d = {
        "client": f"{int.from_bytes(e['client'], 'little'):032x}",
        "reason": e["reason"],
        "reason_name": EVICTION_REASONS.get(e["reason"], "unknown"),
    }
    if e["reason"] in (14, 15):  # the server's accepted protocol window
        d["server_protocol_max"] = protocol_version_text(e["protocol_max"])
        d["server_protocol_min"] = protocol_version_text(e["protocol_min"])
    return d


def result_section(body: memoryview, d: dict) -> tuple[memoryview, int | None]:
    """Read the result section a successful reply's body leads with: [count u32] then count x
    {index u32, result u32}; success is count 0 followed by the typed payload (apache/iggy
    consensus/reply_result.rs). Notes it in `d`; returns the typed payload (empty after a
    rejection) and a committed rejection's error code (None when there is none)."""
    if len(body) < 4:
        d["result_section"] = "missing"
        return body, None
    count = struct.unpack_from("<I", body, 0)[0]
    d["result_count"] = count
    if count == 0:
        return body[4:], None
    listed = min(count, MAX_RESULTS)
    if len(body) < 4 + 8 * listed:
        d["result_section"] = "truncated"
        return body, None
    d["results"] = [
        dict(zip(("index", "result"), struct.unpack_from("<II", body, 4 + 8 * i))) for i in range(listed)
    ]
    if len(body) > 4 + 8 * count:
        d["payload_size"] = len(body) - 4 - 8 * count
    return body[:0], d["results"][0]["result"]
