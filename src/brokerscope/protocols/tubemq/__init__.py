"""Apache InLong TubeMQ: frames, protobuf RPC envelope, producer and consumer calls.

See docs/protocols/tubemq.md. `PROTOCOL` is what the registry loads.
"""

from __future__ import annotations

import struct

from ..base import ConnInfo, Context, Protocol
from .conversation import TubeMQConversation
from .framing import HEADER_LEN, MAX_BLOCK, MAX_LIST_SIZE, TOKEN


def _plausible_at(head: bytes, i: int) -> bool:
    """A frame header at `i`: token, a list size in range, and a first block length in range."""
    if head[i : i + 4] != TOKEN:
        return False
    if len(head) < i + HEADER_LEN:
        return True  # the token alone: cannot check more
    (list_size,) = struct.unpack_from(">i", head, i + 8)
    if not 0 < list_size <= MAX_LIST_SIZE:
        return False
    if len(head) >= i + HEADER_LEN + 4:
        (first,) = struct.unpack_from(">i", head, i + HEADER_LEN)
        return 0 < first <= MAX_BLOCK
    return True


def _score(head: bytes) -> float:
    if not head:
        return 0.0
    if _plausible_at(head, 0):
        return 0.95 if len(head) >= HEADER_LEN + 4 else 0.7
    # mid-stream start: look for a plausible header further on
    i = head.find(TOKEN, 1)
    while i >= 0:
        if len(head) >= i + HEADER_LEN + 4 and _plausible_at(head, i):
            return 0.6
        i = head.find(TOKEN, i + 1)
    return 0.0


class TubeMQProtocol(Protocol):
    name = "tubemq"
    default_ports = (8715, 8123)  # master, broker
    options = {"schema_file": ""}
    schema_option = "schema_file"  # a MasterService.proto whose messages replace the built-in ones
    journeys = "journeys"  # its journeys identity rule (docs/protocols/tubemq.md "Journeys")

    def sniff(self, client_head: bytes, server_head: bytes) -> float:
        """Both directions start every frame with the begin token 0xFF7FF4FE."""
        c = _score(bytes(client_head or b""))
        s = _score(bytes(server_head or b""))
        if c and s:
            return min(1.0, max(c, s) + 0.04)
        return max(c, s)

    def conversation(self, conn: ConnInfo, ctx: Context) -> TubeMQConversation:
        return TubeMQConversation(conn, ctx)


PROTOCOL = TubeMQProtocol()

__all__ = ["PROTOCOL", "TubeMQProtocol", "TubeMQConversation"]
