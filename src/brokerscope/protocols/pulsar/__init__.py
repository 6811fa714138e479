"""Apache Pulsar binary protocol decoder (see docs/protocols/pulsar.md)."""

from __future__ import annotations

import struct

from ..base import ConnInfo, Context, Protocol
from . import framing
from .conversation import PulsarConversation
from .gen import pulsar_api_pb2 as pb

__all__ = ["PROTOCOL", "PulsarProtocol", "PulsarConversation"]


def _first_command(head: bytes) -> tuple[int | None, pb.BaseCommand | None, int]:
    """(type, command, total_size) of the frame at the start of `head`, as far as it goes."""
    if len(head) < framing.HEADER + 2:
        return None, None, 0
    total, cmd_size = struct.unpack_from(">II", head, 0)
    if total < 6 or cmd_size < 2 or cmd_size > total - 4 or total > 5 * 1024 * 1024:
        return None, None, total
    t = framing.peek_type(head[framing.HEADER : framing.HEADER + 3])
    if t is None or len(head) < framing.HEADER + cmd_size:
        return t, None, total
    cmd, _ = framing.parse_command(head[framing.HEADER : framing.HEADER + cmd_size])
    return t, cmd, total


class PulsarProtocol(Protocol):
    name = "pulsar"
    default_ports = (6650,)
    options = {"max_frame_bytes": 5 * 1024**2}  # Pulsar's default maxMessageSize and its frame padding
    journeys = "journeys"  # its journeys identity rule (docs/protocols/pulsar.md "Journeys")

    def sniff(self, client_head: bytes, server_head: bytes) -> float:
        """A CONNECT frame with sane sizes opens the client side; CONNECTED / AUTH_CHALLENGE /
        ERROR opens the server side."""
        score = 0.0
        t, cmd, total = _first_command(client_head)
        if t == pb.BaseCommand.CONNECT:
            score = 0.6
            if cmd is not None and cmd.type == t and cmd.HasField("connect") and cmd.connect.client_version:
                score = 0.95 if total < 64 * 1024 else 0.8
        st, scmd, _ = _first_command(server_head)
        if st in (pb.BaseCommand.CONNECTED, pb.BaseCommand.AUTH_CHALLENGE, pb.BaseCommand.ERROR):
            ok = scmd is not None and scmd.type == st
            if score:
                score = min(1.0, score + (0.05 if ok else 0.0))
            elif not client_head:
                score = 0.8 if ok and st == pb.BaseCommand.CONNECTED else 0.5 if ok else 0.3
        return score

    def conversation(self, conn: ConnInfo, ctx: Context) -> PulsarConversation:
        return PulsarConversation(conn, ctx)


PROTOCOL = PulsarProtocol()
