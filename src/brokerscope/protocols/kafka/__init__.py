"""Apache Kafka: the wire protocol decoded from the official JSON message specs.

Modules: `schema` (spec loading, compiled decode plans, headers), `records` (record batches and
message sets, codecs, shared with the segment reader), `framing` (frames for the shared framer),
`conversation` (pairing, the commands and latencies rows), `apis` (per-API semantics, keyed by
`names.ApiKey`), `rows` (row builders), `inference` (responses whose request is missing).
"""

from __future__ import annotations

import struct

from ..base import ConnInfo, Context, Conversation, Protocol
from . import schema
from .conversation import KafkaConversation
from .framing import plausible_request

_I32 = struct.Struct(">i")


class KafkaProtocol(Protocol):
    name = "kafka"
    default_ports = (9092,)
    segments = "segments"  # log segments (<topic>-<partition>/<base offset>.log)

    def sniff(self, client_head: bytes, server_head: bytes) -> float:
        """Recognise Kafka from the first request: sane size, known api key and version, a
        printable client id; a request that decodes completely under its spec scores highest.
        Without a request, a response head whose size fields chain exactly gives a low score."""
        if client_head:
            return _sniff_request(client_head, server_head)
        if server_head:
            return _sniff_response(server_head)
        return 0.0

    def conversation(self, conn: ConnInfo, ctx: Context) -> Conversation:
        return KafkaConversation(conn, ctx)


def _sniff_request(head: bytes, server_head: bytes = b"") -> float:
    conf = plausible_request(head, 0, 64 * 1024 * 1024)
    if not conf:
        return 0.0
    size = _I32.unpack_from(head, 0)[0]
    if conf == 1:
        return 0.5
    if len(head) < 4 + size:
        # A broker answers only a complete request: an answered first request that is still
        # incomplete in a short head is not Kafka (the driver sniffs up to 4 KiB per direction),
        # unless the answer is Kafka's to it (its correlation id, sizes that chain): then its
        # size was damaged, larger (the conversation reads the frames it took in again)
        if server_head and len(head) < 4096:
            return 0.8 if _answered_in_kind(head, server_head) else 0.2
        return 0.8
    frame = bytes(head[4 : 4 + size])
    try:
        h = schema.read_request_header(frame)
        p = schema.plan(h.api_key, h.api_version, "request")
        if p is None:
            return 0.5
        schema.decode_body(p, frame, h.body_offset)
    except schema.DecodeError:
        # a request whose size was damaged, larger, takes the requests after it in: one of the
        # same client that decodes whole inside it says Kafka as well (the conversation reads it
        # again: Framer.reread_if_swallowed)
        return 0.8 if _request_inside(head, size, h.client_id) else 0.3
    return 0.95


def _answered_in_kind(head: bytes, server_head: bytes) -> bool:
    """Does `server_head` start with Kafka responses (sizes that chain) the first of which has
    the correlation id of the request `head` starts with (size u32 @0, api key @4, version @6,
    correlation id @8)?"""
    return (
        len(head) >= 12
        and len(server_head) >= 8
        and _I32.unpack_from(server_head, 4)[0] == _I32.unpack_from(head, 8)[0]
        and _sniff_response(server_head) > 0
    )


def _request_inside(head: bytes, size: int, client_id: str | None) -> bool:
    """Does a request of `client_id` that decodes whole under its spec start inside the first
    frame of `head` (of `size` bytes after its size field)?"""
    for i in range(8, min(4 + size, len(head) - 14)):
        if plausible_request(head, i, 64 * 1024 * 1024) < 2:
            continue
        n = _I32.unpack_from(head, i)[0]
        if i + 4 + n > len(head):
            continue
        frame = bytes(head[i + 4 : i + 4 + n])
        try:
            h = schema.read_request_header(frame)
            p = schema.plan(h.api_key, h.api_version, "request")
            if p is not None and h.client_id == client_id:
                schema.decode_body(p, frame, h.body_offset)
                return True
        except schema.DecodeError:
            continue
    return False


def _sniff_response(head: bytes) -> float:
    """Responses carry no api key: accept only frames whose sizes chain to the end of the head."""
    pos = 0
    frames = 0
    while pos + 8 <= len(head):
        size, corr = struct.unpack_from(">ii", head, pos)
        if size < 4 or size > 64 * 1024 * 1024 or corr < 0:
            return 0.0
        pos += 4 + size
        frames += 1
    if pos != len(head) or frames == 0:
        return 0.0
    return 0.2


PROTOCOL = KafkaProtocol()

__all__ = ["PROTOCOL", "KafkaProtocol", "KafkaConversation"]
