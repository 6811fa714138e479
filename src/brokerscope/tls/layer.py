"""TLS between TCP reassembly and a protocol's conversation (the stream driver's wiring).

`TlsLayer` wraps a connection's `tcp.TcpConnection` once the driver has recognised TLS on its
first bytes (`recognise`): its `add(pkt)` and `finish()` return the events of the plaintext, in
the reassembly's own shape (`(kind, from_lo, value, ts_ns)`, a data event with its packet's frame
number after them), so the driver detects the protocol and feeds the conversation exactly as it
does in clear. Plaintext comes out when its record is whole: its frame is that of the packet
that completed the record (where Wireshark shows the decrypted bytes too). Everything else (counters, roles,
connection state) is the wrapped connection's. Without keys the layer gives no events: the
connection is a streams row with its handshake metadata (`info()`), nothing else.
"""

from __future__ import annotations

from ..protocols.base import C2S
from ..tcp.packet import DATA
from .keylog import KeyLog
from .record import ALERT, APPLICATION_DATA, HEADER_LEN, credible
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


def records_midstream(lo_head: bytes, hi_head: bytes) -> bool:
    """A connection captured after its handshake that carries TLS records (application data
    or alerts, version 3.3 as TLS 1.2 and 1.3 write them): each direction's first bytes are a
    chain of such records, from the start or, when the capture began inside a record, from the
    first offset where two follow each other. Recognised when one direction shows two records
    chained or both show one. Such a connection has no key (its client random was not
    captured): it is recognised so that its ciphertext is not decoded as a broker protocol."""
    found = [_chain(h) for h in (lo_head, hi_head) if len(h) >= HEADER_LEN]
    return bool(found) and all(found) and (max(found) >= 2 or len(found) == 2)


def _chain(head: bytes) -> int:
    """How many protected records follow each other in `head`, from its start or from the first
    place where two do (0: none; a head that is exactly one record counts as two)."""
    i = 0
    while i >= 0:
        n, at = 0, i
        while (
            at + HEADER_LEN <= len(head) and head[at] in _PROTECTED and head[at + 1 : at + 3] == b"\x03\x03"
        ):
            length = credible(head, at)
            if length < 0:
                break
            n, at = n + 1, at + HEADER_LEN + length
        if n == 1 and i == 0 and at == len(head):
            return 2  # one whole record, exactly: its end is confirmed as a next header would
        if n >= 2 or (n == 1 and i == 0 and at > len(head)):
            return n
        j = head.find(b"\x03\x03", i + 2)  # the next candidate header: its version bytes
        i = j - 1 if j > 0 else -1
    return 0


_PROTECTED = (APPLICATION_DATA, ALERT)


class TlsLayer:
    """A TcpConnection whose events are the plaintext of its TLS session."""

    __slots__ = ("tcp", "session", "client_is_lo", "frame")

    def __init__(self, tcp, keys: KeyLog | None, client_is_lo: bool):
        self.tcp = tcp
        self.client_is_lo = client_is_lo  # the roles TLS decided (shadows the wrapped one's)
        self.session = TlsSession(keys, midstream=tcp.midstream)
        self.frame = {True: None, False: None}  # per direction (from_lo): the last packet's frame

    def __getattr__(self, name):  # everything but the events is the TCP connection's
        return getattr(self.tcp, name)

    def add(self, pkt) -> list[tuple]:
        return self.events(self.tcp.add(pkt))

    def finish(self) -> list[tuple]:
        return self.events(self.tcp.finish()) + self.close()

    def close(self) -> list[tuple]:
        """The session's last events (for a connection whose TCP part already finished)."""
        return self._lo_hi(self.session.close())

    def events(self, events: list) -> list[tuple]:
        """Reassembly events (ciphertext) -> plaintext events, both as `(kind, from_lo, value, ts)`."""
        out: list[tuple] = []
        s, cil = self.session, self.client_is_lo
        for ev in events:
            kind, from_lo, value, ts = ev[:4]
            if kind == DATA:
                self.frame[from_lo] = ev[4]
            d = "c2s" if from_lo == cil else "s2c"
            fn = s.feed if kind == DATA else s.gap
            out += self._lo_hi(fn(d, value, ts))
        return out

    def _lo_hi(self, events: list) -> list[tuple]:
        cil, frame = self.client_is_lo, self.frame
        out = []
        for kind, d, value, ts in events:
            lo = (d == C2S) == cil
            out.append((kind, lo, value, ts, frame[lo]) if kind == DATA else (kind, lo, value, ts))
        return out

    def info(self) -> dict:
        """The streams row's tls_* columns."""
        return self.session.info()
