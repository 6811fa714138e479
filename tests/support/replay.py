"""A capture taken again: its records with their times shifted, as `editcap -t SECONDS` writes
them, alone or appended to the original in one file (`mergecap -a`). Only the record headers'
seconds change; every packet byte is the real capture's."""

from __future__ import annotations

import struct
from pathlib import Path

# pcap magic (as read little-endian) -> struct byte order of the file's headers
_ORDERS = {0xA1B2C3D4: "<", 0xA1B23C4D: "<", 0xD4C3B2A1: ">", 0x4D3CB2A1: ">"}

YEAR_S = 365 * 24 * 3600


def records(src: Path, seconds: int = 0) -> tuple[bytes, list[bytes]]:
    """The global header of the pcap `src` and its records (header and data), each record's
    ts seconds moved by `seconds`."""
    data = Path(src).read_bytes()
    order = _ORDERS.get(struct.unpack_from("<I", data, 0)[0])
    if order is None:
        raise ValueError(f"{src}: not a pcap file")
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, caplen, wire = struct.unpack_from(order + "IIII", data, off)
        if not 0 <= sec + seconds <= 0xFFFFFFFF:
            raise ValueError(f"{src}: a record moved by {seconds} s leaves pcap's 32-bit seconds")
        out.append(
            struct.pack(order + "IIII", sec + seconds, frac, caplen, wire)
            + data[off + 16 : off + 16 + caplen]
        )
        off += 16 + caplen
    return data[:24], out


def shifted(src: Path, dest: Path, seconds: int) -> Path:
    """`dest`: `src` with every record `seconds` later (editcap -t)."""
    head, recs = records(src, seconds)
    dest.write_bytes(head + b"".join(recs))
    return dest


def with_replay(src: Path, dest: Path, seconds: int) -> Path:
    """`dest`: `src`, then its records again `seconds` later, in one file (mergecap -a of the
    capture and its shifted copy)."""
    head, recs = records(src)
    _head, later = records(src, seconds)
    dest.write_bytes(head + b"".join(recs) + b"".join(later))
    return dest


def stepped_back(src: Path, dest: Path, first: int, seconds: float, count: int | None = None) -> Path:
    """`dest`: `src` with its records from the `first`-th (0-based) on (`count` of them: all)
    `seconds` earlier, in the file's order: a capture whose clock was stepped back (NTP) while
    it ran; one record with a wrong time."""
    head, recs = records(src)
    magic = struct.unpack_from("<I", head, 0)[0]
    order = _ORDERS[magic]
    unit = 1_000_000_000 if magic in (0xA1B23C4D, 0x4D3CB2A1) else 1_000_000
    back = round(seconds * unit)
    out = []
    for i, r in enumerate(recs):
        if i >= first and (count is None or i < first + count):
            sec, frac = struct.unpack_from(order + "II", r, 0)
            sec, frac = divmod(sec * unit + frac - back, unit)
            r = struct.pack(order + "II", sec, frac) + r[8:]
        out.append(r)
    dest.write_bytes(head + b"".join(out))
    return dest


def by_direction(src: Path, to_server: Path, to_client: Path, server_port: int) -> tuple[Path, Path]:
    """`src` (Ethernet, IPv4) written as two files, the packets to `server_port` and those from
    it, each in its order: one place's capture taken per direction (tcpdump -Q out / -Q in)."""
    head, recs = records(src)
    mine: tuple[list, list] = ([], [])
    for r in recs:
        ip = 16 + 14  # record header, Ethernet header
        tcp = ip + (r[ip] & 0x0F) * 4
        mine[struct.unpack_from(">H", r, tcp)[0] == server_port].append(r)
    to_server.write_bytes(head + b"".join(mine[0]))
    to_client.write_bytes(head + b"".join(mine[1]))
    return to_server, to_client
