"""Fast synthetic TCP captures for pipeline tests and benchmarks.

Frames are built with struct (Ethernet / IPv4 / TCP, checksums zero), not scapy, so a 100 MB
capture takes seconds. Each connection does a handshake, exchanges request/response payloads
produced by `payloads(conn_index, i) -> (request, response)` (segmented at `mss`), and closes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

ETH = struct.Struct("!6s6sH")
IP4 = struct.Struct("!BBHHHBBH4s4s")
TCP = struct.Struct("!HHIIBBHHH")
REC = struct.Struct("<IIII")
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


def frame(
    src: str, sport: int, dst: str, dport: int, seq: int, ack: int, flags: int, payload: bytes = b""
) -> bytes:
    ip_len = 20 + 20 + len(payload)
    ip = IP4.pack(
        0x45, 0, ip_len, 0, 0x4000, 64, 6, 0, bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))
    )
    tcp = TCP.pack(sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
    return ETH.pack(b"\x02\x00\x00\x00\x00\x02", b"\x02\x00\x00\x00\x00\x01", 0x0800) + ip + tcp + payload


def default_payloads(conn: int, i: int) -> tuple[bytes, bytes]:
    body = f"conn {conn} request {i} ".encode() * 4
    return struct.pack("!I", len(body)) + body, struct.pack("!I", 8) + b"ok%06d" % i


class PcapWriter:
    def __init__(self, path: str):
        self.fh = open(path, "wb")
        self.fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        self.bytes = 24

    def write(self, ts_ns: int, data: bytes) -> None:
        self.fh.write(REC.pack(ts_ns // 1_000_000_000, (ts_ns // 1000) % 1_000_000, len(data), len(data)))
        self.fh.write(data)
        self.bytes += 16 + len(data)

    def close(self) -> None:
        self.fh.close()


def write_capture(
    path: str,
    n_conns: int = 20,
    exchanges: int = 50,
    payloads: Callable[[int, int], tuple[bytes, bytes]] = default_payloads,
    server_port: int = 7000,
    mss: int = 1448,
    start_ns: int = 1_700_000_000_000_000_000,
    target_bytes: int | None = None,
) -> dict:
    """Write a pcap of interleaved connections; returns counts (packets, per-connection bytes)."""
    w = PcapWriter(path)
    ts = start_ns
    packets = 0
    conns = []
    c = 0
    while True:
        if target_bytes is None and c >= n_conns:
            break
        if target_bytes is not None and w.bytes >= target_bytes:
            break
        cli = f"10.1.{(c >> 8) & 255}.{c & 255}"
        srv = "10.9.0.1"
        cport = 20000 + (c % 40000)
        cseq, sseq = 1000 + c * 7, 500000 + c * 13
        out = []
        out.append((cli, cport, srv, server_port, cseq, 0, SYN, b""))
        out.append((srv, server_port, cli, cport, sseq, cseq + 1, SYN | ACK, b""))
        cseq += 1
        sseq += 1
        out.append((cli, cport, srv, server_port, cseq, sseq, ACK, b""))
        c2s = s2c = 0
        for i in range(exchanges):
            req, resp = payloads(c, i)
            for off in range(0, len(req), mss):
                seg = req[off : off + mss]
                out.append((cli, cport, srv, server_port, cseq, sseq, PSH | ACK, seg))
                cseq += len(seg)
            c2s += len(req)
            for off in range(0, len(resp), mss):
                seg = resp[off : off + mss]
                out.append((srv, server_port, cli, cport, sseq, cseq, PSH | ACK, seg))
                sseq += len(seg)
            s2c += len(resp)
        out.append((cli, cport, srv, server_port, cseq, sseq, FIN | ACK, b""))
        out.append((srv, server_port, cli, cport, sseq, cseq + 1, FIN | ACK, b""))
        out.append((cli, cport, srv, server_port, cseq + 1, sseq + 1, ACK, b""))
        for f in out:
            ts += 10_000
            w.write(ts, frame(*f))
        packets += len(out)
        conns.append({"client_port": cport, "c2s_bytes": c2s, "s2c_bytes": s2c, "packets": len(out)})
        c += 1
    w.close()
    return {"packets": packets, "connections": conns, "bytes": w.bytes}
