"""Apache Iggy binary TCP protocol: every command, messages, offsets, three framings."""

from __future__ import annotations

import struct

from ..base import ConnInfo, Context, Protocol
from .codes import COMMANDS, EMPTY_REQUEST
from .conversation import IggyConversation
from .framing import plausible_request, plausible_vsr

__all__ = ["PROTOCOL", "IggyProtocol", "IggyConversation"]


class IggyProtocol(Protocol):
    name = "iggy"
    default_ports = (8090,)
    segments = "segments"  # partition segments (streams/*/topics/*/partitions/*/*.log)
    journeys = "journeys"  # its journeys identity rule (docs/protocols/iggy.md "Journeys")

    def sniff(self, client_head: bytes, server_head: bytes) -> float:
        """Confidence from content: a request header with a plausible length and a known code
        (and, for a whole first frame, a payload that decodes), a VSR request header, or a
        response shaped [status u32 small][length u32 = rest]."""
        score = 0.0
        c = client_head
        if len(c) >= 8 and plausible_request(c, 0, 64 * 1024 * 1024):
            length, code = struct.unpack_from("<II", c, 0)
            score = 0.5
            if code in EMPTY_REQUEST and length in (4, 12):
                score = 0.7
            elif len(c) >= 4 + length:
                from .commands import decode_request

                for hdr in (8, 16):
                    try:
                        decode_request(code, memoryview(c)[hdr : 4 + length])
                        score = 0.8
                        break
                    except Exception:  # noqa: BLE001 - not this layout
                        continue
            if len(c) > 4 + length and not plausible_request(c, 4 + length, 64 * 1024 * 1024):
                score -= 0.3
        elif len(c) >= 64 and plausible_vsr(c) and c[60] == 5:
            score = 0.7
        s = server_head
        if len(s) >= 8:
            status, length = struct.unpack_from("<II", s, 0)
            if status < 10_000 and length <= 64 * 1024 * 1024:
                if 8 + length == len(s) or (status and length == 0):
                    score += 0.15 if score else 0.2
            elif len(s) >= 64 and plausible_vsr(s) and s[60] == 8:
                score += 0.2
        return max(0.0, min(score, 1.0))

    def conversation(self, conn: ConnInfo, ctx: Context) -> IggyConversation:
        return IggyConversation(conn, ctx)


PROTOCOL = IggyProtocol()
_ = COMMANDS
