"""Damaged files never raise: random byte flips, cuts and splices over pcap, pcapng and gzip."""

from __future__ import annotations

import gzip
import random

from capture_kit import epb, idb, pcap_bytes, read_path, shb, spb, write
from scapy.layers.inet import IP, TCP, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, fragment6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

TS = 1_690_000_000_000_000_000
E = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _frames():
    out = [
        Ether(**E) / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(options=[("MSS", 1400)]) / Raw(b"a" * 50),
        Ether(**E) / Dot1Q(vlan=3) / IPv6() / IPv6ExtHdrHopByHop() / TCP() / Raw(b"b" * 20),
    ]
    out += [Ether(**E) / f for f in fragment(IP(dst="10.0.0.3") / TCP() / Raw(b"c" * 300), fragsize=64)]
    out += [Ether(**E) / f for f in fragment6(IPv6() / IPv6ExtHdrFragment() / TCP() / Raw(b"d" * 1500), 1280)]
    return [bytes(f) for f in out]


def _mutate(data: bytes, rnd: random.Random) -> bytes:
    b = bytearray(data)
    op = rnd.randrange(4)
    if op == 0:
        for _ in range(rnd.randrange(1, 20)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    elif op == 1:
        del b[rnd.randrange(len(b)) :]
    elif op == 2:
        i = rnd.randrange(len(b))
        b[i:i] = rnd.randbytes(rnd.randrange(1, 200))
    else:
        i = rnd.randrange(len(b))
        del b[i : i + rnd.randrange(1, 100)]
    return bytes(b)


def test_mutations_never_raise(tmp_path):
    rnd = random.Random(11)
    frames = _frames() * 4
    pcap = pcap_bytes([(TS + i * 1000, f) for i, f in enumerate(frames)], nano=True)
    ng = (
        shb("<")
        + idb("<", 1)
        + idb("<", 101, tsresol=9)
        + b"".join(epb("<", 0, TS // 1000 + i, f) if i % 5 else spb("<", f) for i, f in enumerate(frames))
    )
    for n in range(150):
        for base, name in ((pcap, "f.pcap"), (ng, "f.pcapng")):
            data = _mutate(base, rnd)
            if n % 5 == 0:
                data = gzip.compress(data)
                name += ".gz"
            path = write(tmp_path, name, data)
            size = rnd.choice([0, 0, 97, 500])
            rows, stats = read_path(path, split_size=size, max_pending_fragments=rnd.choice([1, 4096]))
            for r in rows:  # whatever survived is well-formed
                assert 0 <= r["lo_port"] < 65536 and r["payload_len"] >= 0
                assert len(r["payload"]) <= r["payload_len"] or not r["snap_truncated"]
