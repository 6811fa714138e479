"""TLS between TCP reassembly and a protocol's conversation (the stream driver's wiring).

`TlsLayer` wraps a connection's `tcp.TcpConnection` once the driver has recognised TLS on its
first bytes (`recognise`): its `add(pkt)` and `finish()` return the events of the plaintext, in
the reassembly's own shape `(kind, from_lo, value, ts_ns)`, so the driver detects the protocol
and feeds the conversation exactly as it does in clear. Everything else (counters, roles,
connection state) is the wrapped connection's. Without keys the layer gives no events: the
connection is a streams row with its handshake metadata (`info()`), nothing else.
"""

from __future__ import annotations

from ..protocols.base import C2S
from ..tcp.packet import DATA
from .keylog import KeyLog
from .session import TlsSession, sniff

THRESHOLD = 0.5  # the protocol sniffers' threshold


def recognise(lo_head: bytes, hi_head: bytes, client_is_lo: bool | None) -> bool | None:
    """Is this TLS (a ClientHello / ServerHello at the start of the streams)? None when not; else
    whether the lower endpoint is the client: the TCP handshake's roles when known, else the
    side that sent the ClientHello."""
    if client_is_lo is not None:
        c, s = (lo_head, hi_head) if client_is_lo else (hi_head, lo_head)
        return client_is_lo if sniff(c, s) >= THRESHOLD else None
    as_lo, as_hi = sniff(lo_head, hi_head), sniff(hi_head, lo_head)
    if max(as_lo, as_hi) < THRESHOLD:
        return None
    return as_lo >= as_hi


class TlsLayer:
    """A TcpConnection whose events are the plaintext of its TLS session."""

    __slots__ = ("tcp", "session", "client_is_lo")

    def __init__(self, tcp, keys: KeyLog | None, client_is_lo: bool):
        self.tcp = tcp
        self.client_is_lo = client_is_lo  # the roles TLS decided (shadows the wrapped one's)
        self.session = TlsSession(keys, midstream=tcp.midstream)

    def __getattr__(self, name):  # everything but the events is the TCP connection's
        return getattr(self.tcp, name)

    def add(self, pkt) -> list[tuple]:
        return self.events(self.tcp.add(pkt))

    def finish(self) -> list[tuple]:
        out = self.events(self.tcp.finish())
        return out + self._lo_hi(self.session.close())

    def events(self, events: list) -> list[tuple]:
        """Reassembly events (ciphertext) -> plaintext events, both as `(kind, from_lo, value, ts)`."""
        out: list[tuple] = []
        s, cil = self.session, self.client_is_lo
        for kind, from_lo, value, ts in events:
            d = "c2s" if from_lo == cil else "s2c"
            fn = s.feed if kind == DATA else s.gap
            out += self._lo_hi(fn(d, value, ts))
        return out

    def _lo_hi(self, events: list) -> list[tuple]:
        cil = self.client_is_lo
        return [(kind, (d == C2S) == cil, value, ts) for kind, d, value, ts in events]

    def info(self) -> dict:
        """The streams row's tls_* columns."""
        return self.session.info()
