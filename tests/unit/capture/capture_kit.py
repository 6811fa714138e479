"""Test helpers: write pcap / pcapng containers around scapy-built frames, read splits back.

The container writers are independent of the reader under test (plain struct packing, following
the pcap and pcapng specifications), so every container variant can be produced on demand.
"""

from __future__ import annotations

import struct
from pathlib import Path

from brokerscope.capture import Split, capture_id, identify, parse_stats, plan_splits, read_split
from brokerscope.capture.files import FrameNumbers

# ------------------------------------------------------------------------------------------------
# pcap


def pcap_bytes(
    records, *, order: str = "<", nano: bool = False, snaplen: int = 65535, linktype: int = 1
) -> bytes:
    """records: iterable of (ts_ns, frame bytes[, origlen]); the frame is cut at `snaplen`."""
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)]
    for r in records:
        ts, data = r[0], r[1]
        orig = r[2] if len(r) > 2 else len(data)
        cap = data[:snaplen]
        sec, ns = divmod(ts, 1_000_000_000)
        frac = ns if nano else ns // 1000
        out.append(struct.pack(order + "IIII", sec, frac, len(cap), orig))
        out.append(cap)
    return b"".join(out)


# ------------------------------------------------------------------------------------------------
# pcapng


def _pad4(b: bytes) -> bytes:
    return b + b"\0" * (-len(b) % 4)


def block(order: str, btype: int, body: bytes) -> bytes:
    """A pcapng block: type, total length, body (padded to 4), total length."""
    body = _pad4(body)
    n = 12 + len(body)
    return struct.pack(order + "II", btype, n) + body + struct.pack(order + "I", n)


def option(order: str, code: int, value: bytes) -> bytes:
    return struct.pack(order + "HH", code, len(value)) + _pad4(value)


def shb(order: str = "<", section_len: int = -1, with_option: bool = True) -> bytes:
    body = struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, section_len)
    if with_option:  # shb_userappl, then opt_endofopt
        body += option(order, 4, b"brokerscope-tests") + option(order, 0, b"")
    return block(order, 0x0A0D0D0A, body)


def idb(
    order: str, linktype: int, snaplen: int = 0, tsresol: int | None = None, tsoffset: int | None = None
) -> bytes:
    body = struct.pack(order + "HHI", linktype, 0, snaplen)
    opts = option(order, 2, b"eth0")  # if_name
    if tsresol is not None:
        opts += option(order, 9, bytes([tsresol]))
    if tsoffset is not None:
        opts += option(order, 14, struct.pack(order + "q", tsoffset))
    return block(order, 1, body + opts + option(order, 0, b""))


def epb(
    order: str, iface: int, units: int, data: bytes, origlen: int | None = None, snaplen: int = 0
) -> bytes:
    cap = data[:snaplen] if snaplen else data
    body = struct.pack(
        order + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(cap), origlen or len(data)
    )
    return block(order, 6, body + _pad4(cap) + option(order, 1, b"comment") + option(order, 0, b""))


def spb(order: str, data: bytes, origlen: int | None = None) -> bytes:
    return block(order, 3, struct.pack(order + "I", origlen or len(data)) + data)


def pb(order: str, iface: int, units: int, data: bytes) -> bytes:
    body = struct.pack(order + "HHIIII", iface, 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data))
    return block(order, 2, body + data)


def nrb(order: str) -> bytes:
    rec = struct.pack(order + "HH", 1, 4 + 6) + bytes([10, 0, 0, 1]) + b"srv\0\0\0"
    return block(order, 4, _pad4(rec) + struct.pack(order + "HH", 0, 0))


def isb(order: str, iface: int = 0) -> bytes:
    return block(order, 5, struct.pack(order + "III", iface, 0, 0))


def custom(order: str) -> bytes:
    return block(order, 0x00000BAD, struct.pack(order + "I", 32473) + b"private data")


# ------------------------------------------------------------------------------------------------
# reading back


def write(tmp_path: Path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


ROW_COLS = (
    "rec_offset",
    "ts_ns",
    "lo_ip",
    "lo_port",
    "hi_ip",
    "hi_port",
    "from_lo",
    "seq",
    "ack",
    "flags",
    "window",
    "wire_len",
    "payload_len",
    "snap_truncated",
    "payload",
)


def read_path(path: str, split_size: int = 0, batch_packets: int = 8192, bounds=None, **kw):
    """(rows as dicts in file order, list of stats dicts — one per split). Each row also has
    `frame`: its frame number in the file, from the splits' record numbers and counts as the
    decode stage computes it (capture.files.FrameNumbers). `bounds`: the offsets where splits
    begin, other than 0 (instead of `split_size`)."""
    kind = identify(path)
    cid = capture_id(path)
    rows: list[dict] = []
    stats: list[dict] = []
    read = []
    if bounds is None:
        splits = plan_splits(path, 0, cid, kind, split_size)
    else:
        cuts = [0, *sorted(bounds), Path(path).stat().st_size]
        splits = [Split(path, cid, 0, kind, a, b) for a, b in zip(cuts, cuts[1:]) if a < b]
    for sp in splits:
        batches = list(read_split(sp, batch_packets=batch_packets, **kw))
        st = parse_stats(batches[-1])
        assert st is not None, "the last batch of a split must be its stats"
        assert all(parse_stats(b) is None for b in batches[:-1])
        stats.append(st)
        read.append((sp.start, batches[:-1]))
    keys = {
        at: st["records"]
        for (start, _), st in zip(read, stats, strict=True)
        if (at := FrameNumbers.key(start, st["records"], st.get("first_at"))) is not None
    }
    numbers = FrameNumbers({0: keys} if keys else {})
    for _, batches in read:
        for b in batches:
            assert b.column("capture_id").to_pylist() == [cid] * b.num_rows
            frames = numbers.add(b.column("file_index"), b.column("rec_offset"), b.column("record_no"))
            for r, f in zip(b.select(list(ROW_COLS)).to_pylist(), frames.to_pylist(), strict=True):
                r["frame"] = f
                rows.append(r)
    return rows, stats


def total(stats: list[dict], key: str) -> int:
    return sum(s[key] for s in stats)
