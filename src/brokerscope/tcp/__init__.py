"""TCP connection tracking and per-direction streaming reassembly (pure Python, no Spark).

The stream driver feeds the packets of one canonical 4-tuple in capture order to a
`TcpConnection`, which returns ("data", from_lo, bytes, ts_ns) and ("gap", from_lo, nbytes, ts_ns)
events in stream order per direction.
"""

from .connection import Direction, TcpConnection
from .packet import ACK, DATA, FIN, GAP, PSH, RST, SYN, URG, Event, Packet, canonical_key
from .reassembly import Reassembler

__all__ = [
    "ACK",
    "DATA",
    "FIN",
    "GAP",
    "PSH",
    "RST",
    "SYN",
    "URG",
    "Direction",
    "Event",
    "Packet",
    "Reassembler",
    "TcpConnection",
    "canonical_key",
]
