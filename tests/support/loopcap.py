"""Record real loopback TCP traffic to a pcap file, for tests and sample data.

A raw AF_PACKET socket on `lo` (root needed) sees every packet twice, once outgoing and once
incoming; the outgoing copies are dropped, as libpcap does. Frames are written as Ethernet
(loopback frames carry a zero Ethernet header) into a nanosecond pcap.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from collections.abc import Iterable

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def _tcp_ports(frame: bytes) -> tuple[int, int] | None:
    """(sport, dport) of an Ethernet/IPv4|IPv6/TCP frame, else None."""
    if len(frame) < 14:
        return None
    etype = struct.unpack_from("!H", frame, 12)[0]
    if etype == 0x0800 and len(frame) >= 34:
        ihl = (frame[14] & 0x0F) * 4
        if frame[23] != 6 or len(frame) < 14 + ihl + 4:
            return None
        return struct.unpack_from("!HH", frame, 14 + ihl)
    if etype == 0x86DD and len(frame) >= 58:
        if frame[20] != 6:
            return None
        return struct.unpack_from("!HH", frame, 54)
    return None


class LoopbackCapture:
    """Capture TCP frames on `lo` whose source or destination port is in `ports` (all TCP if None).

    with LoopbackCapture("/tmp/x.pcap", ports={9092}) as cap:
        ... run real clients against a server on 127.0.0.1 ...
    cap.add_port(p) adds a port while capturing (e.g. a broker's port learned later).
    """

    def __init__(self, pcap_path: str, ports: Iterable[int] | None = None, settle_s: float = 0.2):
        self.pcap_path = str(pcap_path)
        self.ports = set(ports) if ports is not None else None
        self.settle_s = settle_s
        self.frames: list[tuple[int, bytes]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    def add_port(self, port: int) -> None:
        if self.ports is not None:
            self.ports.add(port)

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._stop.is_set():
            r, _, _ = select.select([sock], [], [], 0.05)
            if not r:
                continue
            while True:
                try:
                    frame, addr = sock.recvfrom(262144)
                except BlockingIOError:
                    break
                ts = time.time_ns()
                if addr[2] == PACKET_OUTGOING:
                    continue
                ports = _tcp_ports(frame)
                if ports is None:
                    continue
                if self.ports is None or ports[0] in self.ports or ports[1] in self.ports:
                    self.frames.append((ts, frame))

    def start(self) -> LoopbackCapture:
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        try:  # a large receive buffer so bursts of loopback traffic are not dropped
            self._sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE (root)
        except OSError:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
        self._sock.bind(("lo", 0))
        self._sock.setblocking(False)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        time.sleep(self.settle_s)
        return self

    def stop(self) -> list[tuple[int, bytes]]:
        time.sleep(self.settle_s)
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        if self._sock:
            self._sock.close()
        write_pcap(self.pcap_path, self.frames)
        return self.frames

    def __enter__(self) -> LoopbackCapture:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def write_pcap(path: str, frames: list[tuple[int, bytes]], linktype: int = 1) -> None:
    """Write (ts_ns, frame) pairs as a little-endian nanosecond pcap."""
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, linktype))
        for ts, frame in frames:
            fh.write(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(frame), len(frame)))
            fh.write(frame)


def read_pcap(path: str) -> list[tuple[int, bytes]]:
    """The (ts_ns, frame) pairs of a little-endian nanosecond pcap (as write_pcap and editcap
    write it)."""
    data = open(path, "rb").read()
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic != 0xA1B23C4D:
        raise ValueError(f"{path}: not a little-endian nanosecond pcap (magic {magic:#x})")
    out, off = [], 24
    while off + 16 <= len(data):
        sec, nsec, caplen, _wire = struct.unpack_from("<IIII", data, off)
        out.append((sec * 1_000_000_000 + nsec, data[off + 16 : off + 16 + caplen]))
        off += 16 + caplen
    return out
