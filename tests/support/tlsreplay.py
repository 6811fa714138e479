"""A real client run captured in clear, carried again over TLS under a chosen cipher suite.

`connections(pcap)` reads each TCP connection of a clear capture (the clear leg of a run through
tests/support/tlsproxy.py) as the application bytes each side sent, in capture order;
`encrypt(...)` has a real OpenSSL client and server (tests/support/tlspair.py, in memory) send
exactly those bytes, in that order, under the suite asked for, and writes the TLS bytes as a
capture (tests/support/cuts.py) with the clear capture's addresses, server port and start time,
plus the key log OpenSSL wrote. Decoded with that key log, the capture must give the clear
capture's rows apart from client ports and times: one clear run serves every suite.

    conns = connections("tests/data/tls/kafka_tls13_clear.pcap")
    encrypt(conns, "kafka_chacha.pcap", "keys.log", version="1.3", suite="TLS_CHACHA20_POLY1305_SHA256")
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import cuts, tlspair

SEG = 1400  # the longest TCP payload of the capture written
SYN, ACK = 0x02, 0x10
MOD = 1 << 32  # sequence numbers wrap
RANDOM_AT = 5 + 4 + 2  # a ClientHello record: record header, handshake header, legacy version


@dataclass
class Connection:
    client: str
    client_port: int
    server: str
    server_port: int
    first_ns: int
    exchange: list[tuple[str, bytes]] = field(default_factory=list)  # ("c2s" | "s2c", bytes)


def connections(pcap: str | Path) -> list[Connection]:
    """The TCP connections of a capture that holds their SYNs, in order of their SYN, each with
    its payload in capture order: a segment captured before the one it follows (a loopback
    capture can reorder) waits for it, a retransmitted byte counts once."""
    from scapy.layers.inet import IP, TCP
    from scapy.utils import rdpcap

    conns: dict[frozenset, Connection] = {}
    nxt: dict[tuple, int] = {}  # (source, destination) -> next sequence number expected
    held: dict[tuple, dict[int, bytes]] = {}  # (source, destination) -> segments ahead of nxt, by seq
    for pkt in rdpcap(str(pcap)):
        if TCP not in pkt:
            continue
        ip, tcp = pkt[IP], pkt[TCP]
        way = ((ip.src, tcp.sport), (ip.dst, tcp.dport))  # one direction of one connection
        if tcp.flags & SYN:
            if not tcp.flags & ACK:
                ns = int(pkt.time * 1_000_000_000)
                conns[frozenset(way)] = Connection(ip.src, tcp.sport, ip.dst, tcp.dport, ns)
            nxt[way], held[way] = (tcp.seq + 1) % MOD, {}
            continue
        conn = conns.get(frozenset(way))
        if conn is None or not tcp.payload:
            continue
        ahead = held[way]
        ahead[tcp.seq] = bytes(tcp.payload)
        d = "c2s" if tcp.dport == conn.server_port else "s2c"
        while True:  # the held segments that reach the next byte expected, in order
            at = next((q for q, b in ahead.items() if (nxt[way] - q) % MOD < len(b)), None)
            if at is None:
                break
            data = ahead.pop(at)[(nxt[way] - at) % MOD :]
            nxt[way] = (nxt[way] + len(data)) % MOD
            conn.exchange.append((d, data))
        for q in [q for q in ahead if (nxt[way] - q) % MOD < 1 << 31]:
            del ahead[q]  # wholly before the next byte: retransmitted
    if any(held.values()):
        raise ValueError(f"{pcap}: bytes missing in a connection")
    return list(conns.values())


def client_random(conn: Connection) -> bytes:
    """The random of the ClientHello that starts a TLS connection's client bytes (a TLS record
    header, a handshake header, the legacy version, then the 32 bytes)."""
    hello = b"".join(b for d, b in conn.exchange if d == "c2s")
    if hello[:1] != b"\x16" or hello[5:6] != b"\x01":
        raise ValueError("the connection does not start with a ClientHello")
    return hello[RANDOM_AT : RANDOM_AT + 32]


def encrypt(
    conns: list[Connection],
    pcap: str | Path,
    keylog: str | Path,
    version: str = "1.3",
    ciphers: str | None = None,
    suite: str | None = None,
    etm: bool = True,
    cert: str = "rsa",
) -> list[tlspair.Conn]:
    """Each connection's exchange over TLS (`version`, a TLS 1.2 OpenSSL cipher list or a
    TLS 1.3 suite, encrypt-then-MAC offered or not, an RSA or ECDSA certificate), written to
    `pcap` with the key log in `keylog`; returns the TLS connections (version, cipher, sent)."""
    out = [
        tlspair.run(
            tempfile.gettempdir(),
            version=version,
            ciphers=ciphers,
            suite=suite,
            etm=etm,
            cert=cert,
            exchange=c.exchange,
            keylog=str(keylog),
        )
        for c in conns
    ]
    first = conns[0]
    cuts.write(
        str(pcap),
        [(cuts.packets(t.transcript, SEG), True, True) for t in out],
        [c.server_port for c in conns],
        server=first.server,
        client=first.client,
        start_ns=first.first_ns,
    )
    return out
