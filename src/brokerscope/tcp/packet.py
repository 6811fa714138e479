"""The TCP segment as the reassembly layer sees it, flag bits, events and connection keys."""

from __future__ import annotations

from dataclasses import dataclass

# TCP header flag bits (byte 13 of the TCP header)
FIN, SYN, RST, PSH, ACK, URG = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20

# Event kinds produced by reassembly:
#   ("data", from_lo, data, ts_ns, frame): new in-order bytes of one direction (never a duplicate),
#       ts_ns and frame (number in its capture file) of the packet that brought them
#   ("gap", from_lo, nbytes, ts_ns): nbytes of that direction were never captured
DATA = "data"
GAP = "gap"
Event = tuple


@dataclass(slots=True)
class Packet:
    """One TCP segment of a connection.

    `from_lo` is True when the sender is the lower endpoint of the canonical 4-tuple (see
    `canonical_key`). `payload` holds the captured payload bytes; `payload_len` is the payload size
    from the IP header lengths (what was sent). `payload` is shorter when the snap length cut the
    packet, and `snap_truncated` is then True. `wire_len` is the original frame length.
    """

    ts_ns: int
    from_lo: bool
    seq: int
    ack: int
    flags: int
    window: int
    payload: bytes
    payload_len: int
    wire_len: int
    snap_truncated: bool
    file_index: int = 0
    capture_id: str = ""
    frame: int = 0


def canonical_key(src_ip, src_port: int, dst_ip, dst_port: int) -> tuple[tuple, bool]:
    """The direction-free key of a 4-tuple and whether the sender is its lower endpoint.

    Returns ((lo_ip, lo_port, hi_ip, hi_port), from_lo). Endpoints compare as (ip, port) tuples, so
    IPs must all be of one type (packed bytes of one family compare numerically; strings compare as
    text, which is still a stable order).
    """
    if (src_ip, src_port) <= (dst_ip, dst_port):
        return (src_ip, src_port, dst_ip, dst_port), True
    return (dst_ip, dst_port, src_ip, src_port), False
