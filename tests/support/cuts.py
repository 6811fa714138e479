"""Captures of a recorded exchange cut at every packet boundary, and a scan for secrets in rows.

A transcript (tests/support/relay.py) holds the application bytes of real connections. `cut_pcap`
re-segments them into packets of at most `seg` bytes and writes one pcap holding, as separate
connections, every cut of the chosen sides: the capture starting at packet k (no handshake: a
mid-stream start) and ending at packet k (no FIN), for every k. `leaks` looks for a secret in every
column of every table, in clear and encoded (base64, hex, UTF-16), JSON opened up, and in the
`raw` pieces of each connection joined in stream order.
"""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict

from tests.support.synth import ACK, FIN, PSH, SYN, PcapWriter, frame

SERVER = "10.9.0.1"
START_NS = 1_700_000_000_000_000_000


def packets(
    conn: list[tuple[str, bytes]], seg: int, fine: int = 0, secrets: list[bytes] = ()
) -> list[tuple[str, bytes]]:
    """The connection's chunks cut into packets of at most `seg` bytes (and at least two); chunks
    that hold a piece of a secret into packets of `fine` bytes, so cuts fall inside every
    credential."""
    out = []
    for d, data in conn:
        hot = fine and any(p in data for s in secrets for p in _pieces(s, 8))
        step = fine if hot else max(1, min(seg, (len(data) + 1) // 2))  # at least one cut inside
        out += [(d, data[i : i + step]) for i in range(0, len(data), step)]
    return out


def _pieces(secret: bytes, window: int) -> set[bytes]:
    return {secret[i : i + window] for i in range(max(1, len(secret) - window + 1))}


def variants(
    pkts: list[tuple[str, bytes]], sides: str
) -> list[tuple[str, list[tuple[str, bytes]], bool, bool]]:
    """(label, packets, handshake, fin) for every start and end cut of the packets of `sides`
    ("both", "c2s" or "s2c")."""
    if sides != "both":
        pkts = [p for p in pkts if p[0] == sides]
    out = []
    for k in range(len(pkts)):
        out.append((f"{sides} from packet {k}", pkts[k:], k == 0 and sides == "both", True))
    for k in range(1, len(pkts)):
        out.append((f"{sides} up to packet {k}", pkts[:k], sides == "both", False))
    return out


def cut_pcap(
    path: str, conn: list[tuple[str, bytes]], port: int, sides: str, seg: int, fine: int = 0, secrets=()
) -> dict[int, str]:
    """Write every cut of one connection as its own connection; returns client port -> label."""
    vs = variants(packets(conn, seg, fine, list(secrets)), sides)
    write(path, [(pkts, handshake, fin) for _label, pkts, handshake, fin in vs], port)
    return {20000 + i: v[0] for i, v in enumerate(vs)}


def write(
    path: str,
    conns: list[tuple[list[tuple[str, bytes]], bool, bool]],
    port: int | list[int],
    server: str = SERVER,
    client: str | None = None,
    start_ns: int = START_NS,
) -> None:
    """One pcap of connections given as (packets, handshake, fin), to the server `port` (or each
    to its own), client ports from 20000 up, clients 10.1.x.y (or all `client`), packets 1 ms
    apart from `start_ns`."""
    w = PcapWriter(path)
    ts = start_ns
    ports = port if isinstance(port, list) else [port] * len(conns)
    for i, ((pkts, handshake, fin), sport) in enumerate(zip(conns, ports, strict=True)):
        cli, cport = client or f"10.1.{i >> 8 & 255}.{i & 255}", 20000 + i
        cseq, sseq = 1000 + i * 7919, 500000 + i * 104729
        out = []
        if handshake:
            out += [
                (cli, cport, server, sport, cseq - 1, 0, SYN),
                (server, sport, cli, cport, sseq - 1, cseq, SYN | ACK),
                (cli, cport, server, sport, cseq, sseq, ACK),
            ]
        for d, data in pkts:
            if d == "c2s":
                out.append((cli, cport, server, sport, cseq, sseq, PSH | ACK, data))
                cseq += len(data)
            else:
                out.append((server, sport, cli, cport, sseq, cseq, PSH | ACK, data))
                sseq += len(data)
        if fin:
            out += [
                (cli, cport, server, sport, cseq, sseq, FIN | ACK),
                (server, sport, cli, cport, sseq, cseq + 1, FIN | ACK),
            ]
        for f in out:
            ts += 1_000_000
            w.write(ts, frame(*f))
    w.close()


def forms(secret: bytes, window: int = 8) -> set[bytes]:
    """Byte strings whose presence anywhere means the secret leaked: every `window`-byte piece of
    it in clear, hex (both cases) and UTF-16, and base64 of it at each alignment."""
    out = set()
    for p in _pieces(secret, window):
        out |= {p, p.hex().encode(), p.hex().upper().encode(), p.decode("latin-1").encode("utf-16-le")}
        out.add(p.decode("latin-1").encode("utf-16-be"))
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + secret)
        # drop the characters that depend on the padding bytes at either end
        inner = enc[(shift * 4 + 2) // 3 : len(enc) - 4]
        if len(inner) >= window:
            out.add(inner)
    return out


def _strings(v):
    """Every str/bytes inside a value, JSON and {"base64": ...} opened up."""
    if v is None:
        return
    if isinstance(v, bytes | bytearray):
        yield bytes(v)
    elif isinstance(v, str):
        yield v.encode()
        if v[:1] in "{[":
            try:
                yield from _strings(json.loads(v))
            except ValueError:
                pass
    elif isinstance(v, dict):
        for k, x in v.items():
            yield k.encode()
            if k == "base64" and isinstance(x, str):
                yield base64.b64decode(x)
            else:
                yield from _strings(x)
    elif isinstance(v, list | tuple):
        for x in v:
            yield from _strings(x)
    else:
        yield str(v).encode()


def leaks(out: dict[str, list[dict]], secrets: dict[str, bytes]) -> list[tuple]:
    """(table, column, secret label, conn_id) for every place a secret shows."""
    patterns = {
        label: re.compile(b"|".join(re.escape(p) for p in sorted(forms(s), key=len, reverse=True)))
        for label, s in secrets.items()
    }
    found = []
    seen: dict[bytes, list[str]] = {}

    def scan(table, col, conn, value):
        for s in _strings(value):
            hits = seen.get(s)
            if hits is None:
                hits = seen[s] = [label for label, rx in patterns.items() if rx.search(s)]
            found.extend((table, col, label, conn) for label in hits)

    raws = defaultdict(list)
    for table, rows in out.items():
        for row in rows:
            for col, v in row.items():
                scan(table, col, row.get("conn_id"), v)
            if row.get("raw"):
                raws[(row.get("conn_id"), row.get("direction"))].append(
                    (row.get("stream_offset") or 0, row["raw"])
                )
    for (conn, d), parts in raws.items():
        joined = b"".join(r for _o, r in sorted(parts, key=lambda p: p[0]))
        scan("commands", f"raw joined ({d})", conn, joined)
    return found
