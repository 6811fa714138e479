"""Frame numbers as tshark sees them, for the commands and streams rows of a capture.

An answer independent of brokerscope's reader and reassembly: tshark lists every TCP packet
(`frame.number`, endpoints, raw sequence number, payload length); a connection's packets are
those of its 4-tuple from its first packet on (until the next connection of the same 4-tuple);
a direction's stream offset 0 is the byte after its SYN's sequence number, or its first
sequence number seen; a commands row's first frame is the first frame (in file order) whose
payload holds the byte at stream_offset, its last frame the first one holding the row's last
byte. Rows whose bytes were not all captured (gap rows) have no answer.

`python -m tests.support.frames` rewrites tests/data/frames/tshark_frames.json, the answers
recorded for tests/unit/test_frame_numbers.py (which compares them with tshark again when it is
installed).
"""

from __future__ import annotations

import json
import struct
import subprocess
from bisect import bisect_right
from decimal import Decimal
from pathlib import Path

from tests.conftest import CAPTURES, ROOT, SAMPLE_DATA

FRAMES_DATA = ROOT / "tests" / "data" / "frames"
RECORDED = FRAMES_DATA / "tshark_frames.json"
SAMPLED_COMMANDS = 40  # commands rows recorded per capture (evenly spaced over its rows)


def captures() -> list[Path]:
    """Every sample and public capture, pcap and pcapng, and the two-interface pcapng."""
    out = sorted(SAMPLE_DATA.glob("*/*.pcap")) + sorted(SAMPLE_DATA.glob("*/*.pcapng"))
    out += sorted(p for p in CAPTURES.glob("*/*") if p.suffix in (".pcap", ".pcapng"))
    out += sorted(FRAMES_DATA.glob("*.pcapng"))
    return out


def label(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


_FIELDS = (
    "frame.number",
    "frame.time_epoch",
    "ip.src",
    "ipv6.src",
    "ip.dst",
    "ipv6.dst",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.len",
    "tcp.flags.syn",
    "tcp.flags.reset",
)


def tshark_packets(path: Path) -> list[tuple]:
    """(frame, ts_ns, src, sport, dst, dport, seq, len, syn, rst) of every TCP packet, file order."""
    cmd = ["tshark", "-n", "-r", str(path), "-Y", "tcp", "-T", "fields", "-E", "occurrence=f"]
    for f in _FIELDS:
        cmd += ["-e", f]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    out = []
    for line in text.splitlines():
        v = line.split("\t")
        frame, t, s4, s6, d4, d6, sp, dp, seq, n, syn, rst = v
        ts = int(Decimal(t) * 1_000_000_000)
        out.append(
            (
                int(frame),
                ts,
                s4 or s6,
                int(sp),
                d4 or d6,
                int(dp),
                int(seq),
                int(n),
                syn in ("1", "True"),
                rst in ("1", "True"),
            )
        )
    return out


def _connections(streams: list[dict], packets: list[tuple]) -> dict[str, list[tuple]]:
    """conn_id -> its packets: those of its 4-tuple from its first packet on, until the next
    connection of the same 4-tuple starts."""
    starts: dict[frozenset, list[tuple[int, str]]] = {}
    for r in streams:
        key = frozenset(((r["client_ip"], r["client_port"]), (r["server_ip"], r["server_port"])))
        starts.setdefault(key, []).append((r["ts_ns"], r["conn_id"]))
    for v in starts.values():
        v.sort()
    out: dict[str, list[tuple]] = {r["conn_id"]: [] for r in streams}
    for p in packets:
        key = frozenset(((p[2], p[3]), (p[4], p[5])))
        v = starts.get(key)
        if not v:
            continue
        i = bisect_right([t for t, _ in v], p[1]) - 1
        out[v[max(i, 0)][1]].append(p)
    return out


def _holder(pkts: list[tuple], base: int):
    """A function: stream offset -> the first frame whose payload holds it, or None."""
    spans = []
    for p in pkts:
        if p[7]:
            off = (p[6] - base) & 0xFFFFFFFF
            if off < 1 << 31:
                spans.append((off, off + p[7], p[0]))

    def at(o: int) -> int | None:
        frames = [f for s, e, f in spans if s <= o < e]
        return min(frames) if frames else None

    return at


def answers(path: Path, out: dict) -> dict:
    """tshark's answers for the rows of `out` (decode_files of `path`): streams by conn_id
    [first, last] (the connection's smallest and largest frame number), commands by
    "conn_id|direction|stream_offset" [first, last] (rows whose bytes tshark holds)."""
    packets = tshark_packets(path)
    conns = _connections(out["streams"], packets)
    streams = {}
    holders = {}
    for r in out["streams"]:
        pk = conns[r["conn_id"]]
        if not pk:
            continue
        streams[r["conn_id"]] = [min(p[0] for p in pk), max(p[0] for p in pk)]
        for d, sender in (
            ("c2s", (r["client_ip"], r["client_port"])),
            ("s2c", (r["server_ip"], r["server_port"])),
        ):
            mine = [p for p in pk if (p[2], p[3]) == sender and not (p[9] and not p[7])]
            if not mine:
                continue
            syn = [p for p in mine if p[8]]
            base = (syn[0][6] + 1) & 0xFFFFFFFF if syn else min(mine, key=lambda p: (p[1], p[0]))[6]
            holders[(r["conn_id"], d)] = _holder(mine, base)
    commands = {}
    for r in out["commands"]:
        h = holders.get((r["conn_id"], r["direction"]))
        if h is None or r["stream_offset"] is None or not r["size"]:
            continue
        first, last = h(r["stream_offset"]), h(r["stream_offset"] + r["size"] - 1)
        if first is not None and last is not None:
            commands[f"{r['conn_id']}|{r['direction']}|{r['stream_offset']}"] = [first, last]
    return {"streams": streams, "commands": commands}


def with_other_frames(src: Path, dst: Path, every: int = 7) -> None:
    """`src` (a little-endian pcapng) with a block after every `every`th packet block that
    Wireshark shows as a frame holding no packet, in turn a systemd Journal Export Block (type 9)
    and Custom Blocks (0x00000BAD copied, 0x40000BAD not copied; PEN 32473, the example PEN of
    RFC 5612): tests/data/frames/other_frames.pcapng."""

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    extra = [
        block(9, b"__REALTIME_TIMESTAMP=1\nMESSAGE=broker restarted\n"),
        block(0x00000BAD, struct.pack("<I", 32473) + b"copied"),
        block(0x40000BAD, struct.pack("<I", 32473) + b"not copied"),
    ]
    data, out, i, packets = src.read_bytes(), b"", 0, 0
    while i < len(data):
        btype, n = struct.unpack_from("<II", data, i)
        out += data[i : i + n]
        i += n
        if btype in (2, 3, 6):
            packets += 1
            if packets % every == 0:
                out += extra[(packets // every) % len(extra)]
    dst.write_bytes(out)


def record() -> None:
    """Write the recorded answers: every streams row, SAMPLED_COMMANDS commands rows per capture."""
    from brokerscope.streams import decode_files

    data = {}
    for path in captures():
        ans = answers(path, decode_files([str(path)]))
        keys = sorted(ans["commands"], key=lambda k: (k.split("|")[0], k.split("|")[1], int(k.split("|")[2])))
        step = max(1, len(keys) // SAMPLED_COMMANDS)
        data[label(path)] = {
            "streams": ans["streams"],
            "commands": {k: ans["commands"][k] for k in keys[::step][:SAMPLED_COMMANDS]},
        }
    RECORDED.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    record()
