"""The per-partition driver: sorted packets -> connections -> reassembly -> detection -> rows.

No Spark here. `StreamDriver.run` consumes packets sorted by (canonical 4-tuple, order_ns, file_index,
rec_offset) as an iterator and yields `(table, row)` pairs; memory is bounded by the open
connection, never by the partition. `decode_files` runs the whole decode in one process for tests
and small jobs.

How a connection's roles are decided, in order (`streams.roles_by`):
  syn        the SYN (without ACK) sender is the client; else the SYN+ACK sender is the server;
  port       one endpoint's port is a configured broker port: that endpoint is the server;
  content    a protocol sniffer is more confident with one orientation than the other;
  heuristic  the endpoint with the lower port is the server (ephemeral client ports are high);
             on equal ports the `lo` endpoint (smaller address) is the client.
The protocol is the server port's protocol from the port map (`detected_by = port`), else the
most confident sniffer at >= 0.5 (`content`), else `unknown` (`none`).

TLS, on any port: when the first bytes are a ClientHello (tls.layer.recognise, once per
connection, before the protocol sniffers), the client is its sender (unless the TCP handshake
said), a `tls.layer.TlsLayer` takes the place of the TCP connection, and the protocol is detected
as above on the first plaintext bytes; the conversation sees what it would in clear. A connection
captured after its handshake whose first bytes are protected records (tls.layer.records_midstream)
gets a TlsLayer too, once its roles are decided: no key, no plaintext, no rows but its streams row.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator

import pyarrow as pa

from . import native, tables
from .capture.decode import SplitOrder
from .capture.files import ID_CHUNK, FrameNumbers, chunk_digest
from .config import Settings
from .protocols import base
from .tcp import Packet as TcpPacket
from .tcp import TcpConnection
from .tls.layer import TlsLayer, recognise, records_midstream
from .topics import resolve_topic_ids

log = logging.getLogger(__name__)

SNIFF_THRESHOLD = 0.5
READ_AHEAD = 256  # packets whose payloads are read back (payload_at) before the lane looks at them
_lane_run = native.load("brokerscope.tcp", "_lane").run  # compiled from tcp/_lane.c
STATS_TABLE = "_capture_stats"  # per-split counters from the capture reader, passed through


def conn_id_of(lo: tuple, hi: tuple, first_ts_ns: int, capture_id: str | None = None) -> str:
    """Stable id of a connection: same inputs, same id, whichever task decodes it. `capture_id`
    tells apart two vantage points of one connection whose first packets have the same time."""
    text = f"{lo[0]}|{lo[1]}|{hi[0]}|{hi[1]}|{first_ts_ns}" + (f"|{capture_id}" if capture_id else "")
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


# a direction's frame index is pruned (Conversation.low_water) once it holds this many entries
# more than after its last pruning
PRUNE_AT = 4096


class _Frames:
    """Which packet brought each stream offset of one direction to the decoder: the offset where
    the bytes of each delivered packet begin, and its frame number (consecutive pieces of one
    packet are one entry). Offsets are counted as the conversation counts them (data and gaps
    fed), so a commands row's stream_offset and size name its packets. Entries below the lowest
    offset a row still to come may name (Conversation.low_water) are dropped as it grows."""

    __slots__ = ("starts", "frames", "end", "last", "floor", "limit")

    def __init__(self) -> None:
        self.starts = array("q")  # stream offset where a packet's delivered bytes begin
        self.frames = array("q")  # that packet's frame number
        self.end = 0  # stream offset after everything fed (data and gaps)
        self.last = -1  # frame of the last entry
        self.floor = 0  # offsets below this were pruned: unknown
        self.limit = PRUNE_AT

    def span(self, first: int, last: int) -> tuple[int | None, int | None]:
        """The frames of the packets holding bytes `first` and `last`; a byte never captured (a
        gap) takes the nearest packet before it (after it, at the head of the stream); None where
        pruned. Both in one call: the driver asks per commands row."""
        starts = self.starts
        if not starts:
            return None, None
        frames, floor = self.frames, self.floor
        i = bisect_right(starts, first) - 1
        j = bisect_right(starts, last) - 1
        return (
            None if first < floor else frames[i if i > 0 else 0] or None,
            None if last < floor else frames[j if j > 0 else 0] or None,
        )

    def prune(self, low: int | None) -> None:
        if low is not None:
            i = bisect_right(self.starts, low) - 1
            if i > 0:
                del self.starts[:i]
                del self.frames[:i]
                self.floor = self.starts[0]
        self.limit = len(self.starts) + PRUNE_AT


class _Conn:
    """One TCP connection under decode."""

    def __init__(self, drv: StreamDriver, lo: tuple, hi: tuple, first: TcpPacket, taken: set | None = None):
        """`taken`: the conn ids of the 4-tuple's connections seen from other vantage points."""
        s = drv.settings
        self.drv = drv
        self.lo, self.hi = lo, hi
        self.tcp = TcpConnection(
            first,
            max_reorder_bytes=s.max_reorder_bytes,
            reorder_timeout_ns=s.reorder_timeout_ns,
            idle_timeout_ns=s.idle_timeout_ns,
        )
        self.conn_id = conn_id_of(lo, hi, first.ts_ns)
        if taken is not None:
            if self.conn_id in taken:  # another vantage point's copy with the same first time
                self.conn_id = conn_id_of(lo, hi, first.ts_ns, first.capture_id)
            taken.add(self.conn_id)
        self.files: list[tuple[int, str]] = [(first.ts_ns, first.capture_id)]  # capture_id from that time on
        self.decided = False
        self.pending: list[tuple] = []  # reassembly events held back until the protocol is known
        self.head = {True: bytearray(), False: bytearray()}  # first bytes sent by lo (True) / hi
        self.client_is_lo: bool | None = None
        self.roles_by = "heuristic"
        self.protocol = "unknown"
        self.detected_by = "none"
        self.conv: base.Conversation | None = None
        self.shared: dict = {}
        self.frames_ok = 0
        self.frames_failed = 0
        # frame numbers: the first packet's (in the first file), the last packet's (in the file
        # it is in: StreamDriver.run gives it at the end); and per direction (from_lo) which
        # packet brought which stream offset to the decoder
        self.first_frame = self.last_frame = first.frame
        self.offsets = {True: _Frames(), False: _Frames()}
        self.tls: TlsLayer | None = None  # a TLS connection: also self.tcp, giving plaintext events
        # a decoder takes this connection's bytes straight from TCP: the driver may hand it a
        # packet TcpConnection.take passed (`data`), without events
        self.lane = False

    # -- packets ----------------------------------------------------------------------------
    def add(self, pkt: TcpPacket) -> Iterator[base.Row]:
        if pkt.capture_id != self.files[-1][1]:
            self.files.append((pkt.ts_ns, pkt.capture_id))
        events = self.tcp.add(pkt)
        if not self.decided:
            self._hold(events)
            if self._ready():
                yield from self._decide()
            return
        yield from self._deliver(events)

    def finish(self, last_frame: int) -> Iterator[base.Row]:
        """`last_frame`: the frame number of the connection's last packet."""
        self.last_frame = last_frame
        events = self.tcp.finish()
        if not self.decided:
            self._hold(events)
            yield from self._decide()
            if not self.decided:  # TLS recognised at the end: its last plaintext, then detection
                self._hold(self.tls.close())
                yield from self._decide()
        else:
            yield from self._deliver(events)
        if self.conv is not None:
            yield from self._guard(self.conv.close)
        yield "streams", self._streams_row()

    # -- detection --------------------------------------------------------------------------
    def _hold(self, events: list) -> None:
        limit = self.drv.settings.sniff_bytes
        for ev in events:
            self.pending.append(ev)
            if ev[0] == "data":
                h = self.head[ev[1]]
                if len(h) < limit:
                    h += ev[2][: limit - len(h)]

    def _ready(self) -> bool:
        limit = self.drv.settings.sniff_bytes
        a, b = self.head[True], self.head[False]
        cil = self.tcp.client_is_lo
        told = cil is not None and (len(self.head[cil]) > 5 or len(self.head[not cil]) > 0)
        if told and self._port_protocol(cil):
            return True  # handshake + broker port: nothing to sniff but TLS (a ClientHello's first 6 bytes)
        return (len(a) > 0 and len(b) > 0) or len(a) >= limit or len(b) >= limit or len(self.pending) > 256

    def _port_protocol(self, client_is_lo: bool) -> str | None:
        server_port = self.hi[1] if client_is_lo else self.lo[1]
        return self.drv.port_map.get(server_port)

    def _decide(self) -> Iterator[base.Row]:
        self.decided = True
        drv = self.drv
        lo_head, hi_head = bytes(self.head[True]), bytes(self.head[False])
        if self.tls is None and (cil := recognise(lo_head, hi_head, self.tcp.client_is_lo)) is not None:
            yield from self._start_tls(cil)
            return
        best: tuple[float, str, bool] | None = None  # (confidence, protocol, client_is_lo)

        def sniff_all(orientations: Iterable[bool]) -> None:
            nonlocal best
            for name, proto in drv.protocols.items():
                for cil in orientations:
                    c, s = (lo_head, hi_head) if cil else (hi_head, lo_head)
                    try:
                        conf = float(proto.sniff(c, s))
                    except Exception:  # a sniffer must not kill the task
                        log.exception("sniffer %s failed", name)
                        conf = 0.0
                    if conf >= SNIFF_THRESHOLD and (best is None or conf > best[0]):
                        best = (conf, name, cil)

        if self.tls is not None:
            pass  # roles decided with TLS (_start_tls)
        elif self.tcp.client_is_lo is not None:
            self.client_is_lo, self.roles_by = self.tcp.client_is_lo, "syn"
        else:
            lo_is_port = drv.port_map.get(self.lo[1])
            hi_is_port = drv.port_map.get(self.hi[1])
            if hi_is_port and not lo_is_port:
                self.client_is_lo, self.roles_by = True, "port"
            elif lo_is_port and not hi_is_port:
                self.client_is_lo, self.roles_by = False, "port"
            else:
                sniff_all((True, False))
                if best is not None:
                    self.client_is_lo, self.roles_by = best[2], "content"
                else:
                    self.client_is_lo = self.lo[1] >= self.hi[1] if self.lo[1] != self.hi[1] else True
                    self.roles_by = "heuristic"
        if self.tls is None and self.tcp.midstream and records_midstream(lo_head, hi_head):
            yield from self._start_tls(self.client_is_lo, self.roles_by)  # no handshake: no key
            return
        proto_name = self._port_protocol(self.client_is_lo)
        if proto_name and proto_name in drv.protocols:
            self.protocol, self.detected_by = proto_name, "port"
        else:
            if best is None or best[2] != self.client_is_lo:
                best = None
                sniff_all((self.client_is_lo,))
            if best is not None:
                self.protocol, self.detected_by = best[1], "content"
        client, server = (self.lo, self.hi) if self.client_is_lo else (self.hi, self.lo)
        self.shared = {
            "protocol": self.protocol,
            "conn_id": self.conn_id,
            "client_ip": client[0],
            "client_port": client[1],
            "server_ip": server[0],
            "server_port": server[1],
        }
        if self.protocol != "unknown":
            info = base.ConnInfo(
                self.conn_id,
                client[0],
                client[1],
                server[0],
                server[1],
                self.tcp.midstream,
                self._frame_range,
                (self.offsets[self.client_is_lo], self.offsets[not self.client_is_lo]),
            )
            self.conv = drv.protocols[self.protocol].conversation(info, drv.settings.context(self.protocol))
        self.lane = self.conv is not None and self.tls is None
        pending, self.pending = self.pending, []
        yield from self._deliver(pending)

    def _start_tls(self, client_is_lo: bool, roles_by: str | None = None) -> Iterator[base.Row]:
        """TLS: the TlsLayer replaces the TCP connection as the source of events, and detection
        starts again on the plaintext (events held so far go through it first)."""
        self.client_is_lo = client_is_lo
        self.roles_by = roles_by or ("syn" if self.tcp.client_is_lo is not None else "content")
        self.tcp = self.tls = TlsLayer(self.tcp, self.drv.tls_keys, client_is_lo)
        self.decided = False
        self.head = {True: bytearray(), False: bytearray()}
        pending, self.pending = self.pending, []
        self._hold(self.tls.events(pending))
        if self._ready():
            yield from self._decide()

    # -- decoding ---------------------------------------------------------------------------
    def _deliver(self, events: list) -> Iterator[base.Row]:
        for ev in events:
            if self.conv is None:  # no decoder, or it failed and was retired
                return
            out = self.data(ev[1], ev[2], ev[3], ev[4]) if ev[0] == "data" else self._gap(ev[1], ev[2], ev[3])
            if out:
                yield from out

    def data(self, from_lo: bool, data: bytes, ts_ns: int, frame: int) -> list[base.Row]:
        """The decoder's rows from the next bytes of direction `from_lo` (a data event),
        brought by packet `frame`: `data_run` of one."""
        return self.data_run(from_lo, [data], [ts_ns], [frame])

    def data_run(
        self, from_lo: bool, chunks: list[bytes], tss: list[int], frames: list[int]
    ) -> list[base.Row]:
        """The decoder's rows from the payloads of a run of packets of direction `from_lo` (the
        lane's, tcp._lane; or one data event), brought by packets `frames`, fed to it at once
        (Conversation.feed_run): the same rows as one by one. Runs per run: _guard's work is
        inline, and most calls give no rows."""
        conv = self.conv
        if conv is None:  # retired by an earlier run's failure
            return []
        direction = base.C2S if from_lo == self.client_is_lo else base.S2C
        fr = self.offsets[from_lo]
        starts, numbers, end, seen = fr.starts, fr.frames, fr.end, fr.last
        for data, frame in zip(chunks, frames):
            if frame != seen:
                starts.append(end)
                numbers.append(frame)
                seen = frame
            end += len(data)
        fr.end, fr.last = end, seen
        if len(starts) > fr.limit:
            fr.prune(conv.low_water(direction))
        try:
            out = list(conv.feed_run(direction, chunks, tss) or ())
        except Exception as e:
            out = self._retire(e)
        return list(self._rows(out)) if out else out

    def _gap(self, from_lo: bool, nbytes: int, ts_ns: int) -> list[base.Row]:
        """The decoder's rows for `nbytes` of direction `from_lo` the capture missed."""
        self.offsets[from_lo].end += nbytes
        direction = base.C2S if from_lo == self.client_is_lo else base.S2C
        return list(self._guard(self.conv.gap, direction, nbytes, ts_ns))

    def _guard(self, fn, *args) -> Iterator[base.Row]:
        """Run a decoder call; a decoder bug becomes an error row and retires the decoder."""
        try:
            out = list(fn(*args) or ())
        except Exception as e:
            out = self._retire(e)
        yield from self._rows(out)

    def _retire(self, e: Exception) -> list[base.Row]:
        """The decoder raised `e`: it is retired for this connection, and this is its error row."""
        log.warning("%s decoder failed on connection %s: %r", self.protocol, self.conn_id, e)
        self.conv = None
        self.lane = False
        return [
            (
                "commands",
                {
                    "ts_ns": self.tcp.last_ts,
                    "ts_end_ns": self.tcp.last_ts,
                    "decode_status": base.DECODER_ERROR,
                    "decode_error": f"{type(e).__name__}: {e}"[:500],
                },
            )
        ]

    def _rows(self, out: list) -> Iterator[base.Row]:
        """A decoder call's rows, counted and given the connection's columns."""
        for table, row in out:
            if table == base.TOPIC_NAMES:
                self.drv.topic_names[row["topic_id"]] = row["topic"]
                continue
            if table == "commands":
                if isinstance(row, tables.Block):
                    given = "decode_status" in row.cols or "decode_status" in row.const
                    ok = row.column("decode_status").count(base.OK) if given else row.n
                    self.frames_ok += ok
                    self.frames_failed += row.n - ok
                elif row.get("decode_status", base.OK) == base.OK:
                    self.frames_ok += 1
                else:
                    self.frames_failed += 1
            yield table, self._fill(row, table)

    def _fill(self, row: dict | tables.Block, table: str = "") -> dict | tables.Block:
        if table == "commands" and row.__class__ is dict:
            row["first_frame"], row["last_frame"] = self._frames_of(row)
        if isinstance(row, tables.Block):
            row.const.update(self.shared)
            if "ts_ns" in row.cols and len(self.files) > 1:  # else every row is the first file's
                row.cols["capture_id"] = [self._capture_at(t) for t in row.column("ts_ns")]
            else:
                row.const["capture_id"] = self._capture_at(row.const.get("ts_ns"))
            return row
        row.update(self.shared)
        row["capture_id"] = self._capture_at(row.get("ts_ns"))
        return row

    def _frames_of(self, row: dict) -> tuple[int | None, int | None]:
        """The frame numbers of the packets holding a commands row's first and last byte; a row
        that names no bytes (a decoder error) takes the last packet delivered to the decoder."""
        off, size, d = row.get("stream_offset"), row.get("size"), row.get("direction")
        if off is None or d not in (base.C2S, base.S2C):
            f = max(self.offsets[True].last, self.offsets[False].last, self.last_frame)
            return (f, f) if f > 0 else (None, None)
        return self._frame_range(d, off, size)

    def _frame_range(self, direction: str, off: int, size: int | None) -> tuple[int | None, int | None]:
        fr = self.offsets[(direction == base.C2S) == self.client_is_lo]
        return fr.span(off, off + size - 1 if size else off)

    def _capture_at(self, ts_ns: int | None) -> str:
        if ts_ns is None or len(self.files) == 1:
            return self.files[0][1]
        cid = self.files[0][1]
        for t, c in self.files:
            if t > ts_ns:
                break
            cid = c
        return cid

    def _streams_row(self) -> dict:
        t = self.tcp
        c, s = (t.lo, t.hi) if self.client_is_lo else (t.hi, t.lo)
        row = {
            "ts_ns": t.first_ts,
            "detected_by": self.detected_by,
            "roles_by": self.roles_by,
            "first_ts_ns": t.first_ts,
            "last_ts_ns": t.last_ts,
            "duration_us": (t.last_ts - t.first_ts) / 1000,
            "c2s_packets": c.packets,
            "s2c_packets": s.packets,
            "c2s_bytes": c.payload_bytes,
            "s2c_bytes": s.payload_bytes,
            "c2s_frame_bytes": c.frame_bytes,
            "s2c_frame_bytes": s.frame_bytes,
            "gap_count": c.reasm.gap_count + s.reasm.gap_count,
            "gap_bytes": c.reasm.gap_bytes + s.reasm.gap_bytes,
            "retransmitted_bytes": c.reasm.retransmitted_bytes + s.reasm.retransmitted_bytes,
            "out_of_order": c.reasm.out_of_order + s.reasm.out_of_order,
            "frames_ok": self.frames_ok,
            "frames_failed": self.frames_failed,
            "syn_seen": t.syn_seen,
            "fin_seen": t.fin_seen,
            "rst_seen": t.rst_seen,
            "midstream": t.midstream,
            "conn_state": t.conn_state(self.client_is_lo),
            "history": t.history(self.client_is_lo),
            "snap_truncated_packets": c.snap_truncated_packets + s.snap_truncated_packets,
            "capture_ids": list(dict.fromkeys(cid for _, cid in self.files)),  # by time
            # the first packet's frame in the first file (capture_id), the last packet's in the
            # file the connection ends in (the last of capture_ids by time)
            "first_frame": self.first_frame or None,
            "last_frame": self.last_frame or None,
        }
        if self.tls is not None:
            row.update(self.tls.info())
            outcome = row["tls_decrypted"].split(":")[0]  # yes | no key | failed
            self.drv.tls_outcomes[outcome] = self.drv.tls_outcomes.get(outcome, 0) + 1
        cid = self.files[0][1]
        # data no decoder recognised where the sniffer may have missed a broker: its first bytes
        # not captured (midstream, a gap, the snap length); a whole connection it did not
        # recognise is another protocol's (TLS without keys is said apart: the summary's TLS line)
        missed = row["midstream"] or row["gap_bytes"] or row["snap_truncated_packets"]
        if self.protocol == "unknown" and self.tls is None and missed and row["c2s_bytes"] + row["s2c_bytes"]:
            self.drv.seen["unrecognised"][cid] = self.drv.seen["unrecognised"].get(cid, 0) + 1
        if (row["c2s_packets"] == 0) != (row["s2c_packets"] == 0) and row["c2s_bytes"] + row["s2c_bytes"]:
            # data of one endpoint, nothing of the other: its packets in no file of the run (or dead)
            one = self.drv.seen["one_direction"]
            one[cid] = one.get(cid, 0) + 1
        if row["snap_truncated_packets"]:
            cut = self.drv.seen["snap_truncated"]
            cut[cid] = cut.get(cid, 0) + row["snap_truncated_packets"]
        row.update(self.shared)
        row["capture_id"] = cid
        return row


class StreamDriver:
    """Decode one partition's sorted packets."""

    def __init__(
        self,
        settings: Settings,
        capture_ids: list[str] | None = None,
        files: PayloadFiles | None = None,
        frames: FrameNumbers | None = None,
        tls_keys=None,
        vantages: dict[int, int] | None = None,
    ):
        """`capture_ids[file_index]` names the capture of packet batches that carry no capture_id
        column (the pipeline drops it before the shuffle: one string less per packet); `files`
        reads the payloads of packets that carry their offset instead (payload_at); `frames`
        turns the reader's per-split record numbers into frame numbers (without it, every file
        was read as one split: the record number is the frame number); `tls_keys` (a tls.KeyLog)
        decrypts TLS connections, by default the settings' key logs; `vantages[file_index]` the
        vantage point of each capture file (vantage.groups): a 4-tuple's packets of two vantage
        points are two connections."""
        self.settings = settings
        self.tls_keys = tls_keys if tls_keys is not None else settings.tls_keys
        self.capture_ids = capture_ids or []
        self.files = files
        self.frames = frames
        self.protocols = base.protocols()
        self.topic_names: dict[str, str] = {}  # topic id -> name, from every connection decoded
        self.tls_outcomes: dict[str, int] = {}  # TLS connections by tls_decrypted (yes, no key, failed)
        # per capture id: connections that carried data no decoder recognised, packets the
        # capture's snap length cut (the summary's warnings)
        self.seen: dict[str, dict[str, int]] = {"unrecognised": {}, "snap_truncated": {}, "one_direction": {}}
        self.capture_stats: list[dict] = []  # the capture reader's per-split counters rows
        self.port_map = {p: n for p, n in settings.ports.items() if n in self.protocols}
        self.vantages = vantages if vantages and len(set(vantages.values())) > 1 else None

    def run_batches(self, batches: Iterable[pa.RecordBatch]) -> Iterator[base.Row]:
        """Arrow batches of tables.PACKETS (sorted) -> rows. Stats rows (null lo_ip) pass through."""
        if self.vantages is not None:
            return self._run_vantages(self._packets(batches))
        return self._run(batches)

    def _run(self, batches: Iterable[pa.RecordBatch]) -> Iterator[base.Row]:
        """The packets of `batches`, sorted by connection then time: a connection per 4-tuple
        (two, when TcpConnection.starts_new), each finished when the next begins. Packets that
        continue their connection in order (TcpConnection.take, over a run of them: tcp._lane)
        go to the decoder without TcpPackets, reassembly events or the generators between, each
        direction's run of payloads fed at once: most packets of a busy connection; every other
        packet takes `_Conn.add`."""
        conn: _Conn | None = None
        key = (None, None, None, None)
        last = 0  # the frame number of the packet before this one
        for cols in self._columns(batches):
            (
                lo_ips,
                lo_ps,
                hi_ips,
                hi_ps,
                tss,
                fls,
                seqs,
                acks,
                fgs,
                wins,
                pls,
                plens,
                wls,
                sts,
                fis,
                cids,
                ats,
                nos,
            ) = cols
            n, k, read = len(tss), 0, 0  # read: payloads are read back (payload_at) up to here
            while k < n:
                if ats is not None and k >= read:  # a window of payloads: never a whole batch's
                    read = self._read_back(cols, k, min(n, k + READ_AHEAD), read - READ_AHEAD)
                if conn is not None and conn.lane:
                    j, runs = _lane_run(
                        cols, k, read if ats is not None else n, conn.tcp, key, conn.files[-1][1]
                    )
                    if j > k:
                        for from_lo, at in runs:
                            out = conn.data_run(
                                from_lo, [pls[i] for i in at], [tss[i] for i in at], [nos[i] or 0 for i in at]
                            )
                            if out:
                                yield from out
                        last, k = nos[j - 1] or 0, j
                        continue
                lo_ip = lo_ips[k]
                if lo_ip is None:  # a reader's stats row
                    self._stats_row(pls[k], cids[k], fis[k])
                    k += 1
                    continue
                lo_p, hi_ip, hi_p, ts, no = lo_ps[k], hi_ips[k], hi_ps[k], tss[k], nos[k] or 0
                pkt = TcpPacket(
                    ts,
                    fls[k],
                    seqs[k],
                    acks[k],
                    fgs[k],
                    wins[k],
                    pls[k] or b"",
                    plens[k],
                    wls[k],
                    sts[k],
                    fis[k],
                    cids[k],
                    no,
                )
                if conn is None or (lo_p, hi_p, lo_ip, hi_ip) != (key[1], key[3], key[0], key[2]):
                    if conn is not None:
                        yield from conn.finish(last)
                    conn, key = _Conn(self, (lo_ip, lo_p), (hi_ip, hi_p), pkt), (lo_ip, lo_p, hi_ip, hi_p)
                elif conn.tcp.starts_new(pkt):
                    yield from conn.finish(last)
                    conn = _Conn(self, (lo_ip, lo_p), (hi_ip, hi_p), pkt)
                yield from conn.add(pkt)
                last = no
                k += 1
        if conn is not None:
            yield from conn.finish(last)
        self._close_files()

    def _read_back(self, cols: tuple, k: int, end: int, done: int) -> int:
        """The payloads of packets k..end-1 given as payload_at, read back from their files into
        the payload (and snap_truncated) column lists, those of the window read before (from
        `done` up to k, decoded) let go; returns `end`."""
        pls, plens, sts, fis, ats = cols[10], cols[11], cols[13], cols[14], cols[16]
        for i in range(max(0, done), k):
            pls[i] = None
        self.files.fill(pls, sts, fis, ats, plens, k, end)
        return end

    def _run_vantages(self, packets: Iterable[tuple[tuple, tuple, TcpPacket]]) -> Iterator[base.Row]:
        """`_run` over the files of several vantage points: a connection per 4-tuple and vantage
        point, open together (their packets interleave in time), finished in the order opened
        when the 4-tuple's packets end."""
        vantage = self.vantages.get
        conns: dict[int, _Conn] = {}  # the 4-tuple's open connection per vantage point
        lasts: dict[int, int] = {}  # and the frame number of its last packet
        taken: set[str] = set()  # the 4-tuple's conn ids
        key = None
        for lo, hi, pkt in packets:
            if (lo, hi) != key:
                for v, c in conns.items():
                    yield from c.finish(lasts[v])
                conns, lasts, taken, key = {}, {}, set(), (lo, hi)
            v = vantage(pkt.file_index, -1)
            conn = conns.get(v)
            if conn is None or conn.tcp.starts_new(pkt):
                if conn is not None:
                    yield from conn.finish(lasts[v])
                    del conns[v]  # a new connection of this vantage point: finished after the others
                conn = conns[v] = _Conn(self, lo, hi, pkt, taken)
            yield from conn.add(pkt)
            lasts[v] = pkt.frame
        for v, c in conns.items():
            yield from c.finish(lasts[v])

    def _packets(self, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[tuple, tuple, TcpPacket]]:
        """(lo, hi, packet) of every packet of `batches` (`_run_vantages`' input)."""
        for cols in self._columns(batches):
            ats = cols[16] if cols[16] is not None else itertools.repeat(None)
            for lo_ip, lo_p, hi_ip, hi_p, ts, fl, seq, ack, fg, win, pl, plen, wl, st, fi, cid, at, no in zip(
                *cols[:16], ats, cols[17]
            ):
                if lo_ip is None:
                    self._stats_row(pl, cid, fi)
                    continue
                if at is not None:
                    pl, st = self.files.read(fi, at, plen, st)
                yield (
                    (lo_ip, lo_p),
                    (hi_ip, hi_p),
                    TcpPacket(ts, fl, seq, ack, fg, win, pl or b"", plen, wl, st, fi, cid, no or 0),
                )
        self._close_files()

    def _columns(self, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple]:
        """Per batch, the columns the driver reads as Python lists, in the order `_run` unpacks
        them (rec_offset only orders the packets)."""
        for b in batches:
            refs = b.column("payload_at").null_count < b.num_rows
            if refs and self.files is None:
                raise ValueError("packets give payload offsets, and no files to read them from")
            if self.frames is not None:
                b = b.set_column(
                    b.schema.get_field_index("record_no"),
                    "record_no",
                    self.frames.add(b.column("file_index"), b.column("rec_offset"), b.column("record_no")),
                )
            d = b.select(
                [n for n in b.schema.names if n not in _UNREAD and (refs or n != "payload_at")]
            ).to_pydict()
            yield (
                d["lo_ip"],
                d["lo_port"],
                d["hi_ip"],
                d["hi_port"],
                d["ts_ns"],
                d["from_lo"],
                d["seq"],
                d["ack"],
                d["flags"],
                d["window"],
                d["payload"],
                d["payload_len"],
                d["wire_len"],
                d["snap_truncated"],
                d["file_index"],
                d["capture_id"] if "capture_id" in d else [self.capture_ids[i] for i in d["file_index"]],
                d["payload_at"] if refs else None,  # None: every payload is in the batch
                d["record_no"],  # the frame number, once self.frames numbered it
            )

    def _stats_row(self, counters_json: bytes, capture_id: str, file_index: int) -> None:
        counters = json.loads(counters_json)
        counters.pop("first_at", None)  # the read stage's frame-numbering key (runs.py), no counter
        counters.pop("order", None)  # and its packet order's (capture.SplitOrder)
        counters.pop("directions", None)  # and its vantage points' (RunDir.directions)
        counters.setdefault("capture_id", capture_id)
        counters.setdefault("file_index", file_index)
        self.capture_stats.append(counters)

    def _close_files(self) -> None:
        if self.files is not None:
            for fi, why in self.files.close().items():
                cid = self.capture_ids[fi] if fi < len(self.capture_ids) else None
                self.capture_stats.append({"file_index": fi, "capture_id": cid, "errors": [why]})


# payloads read back in one pread (PayloadFiles.fill): at most this many bytes apart (the record,
# link, IP and TCP headers between two packets' payloads, and pure ACKs' headers), at most this
# many bytes in all
RUN_GAP = 512
RUN_BYTES = 1 << 20


class PayloadFiles:
    """Payload bytes read back from the capture files by offset, for packets the read stage gave
    as payload_at (capture.read_split's payload_refs: the shuffle then carries no payload bytes).

    `files[file_index]` = (path, size, mtime_ns) as discovered. A file that is no longer that
    file (rewritten, gone, or cut short: a read back comes short, `_cut_short`) gives no payload
    bytes: its packets become snap-truncated (the decoders see gaps, not other bytes), and
    `close` names it (CHANGED, UNREADABLE): the driver records it as not ingested, its rows
    dropped (pipeline._Writing.identified).
    """

    def __init__(
        self, files: dict[int, tuple[str, int, int]], digests: dict[int, dict[int, bytes]] | None = None
    ) -> None:
        """`digests[file_index]`: the identity chunk digests the read stage wrote (RunDir.digests):
        a file that only grew since (tcpdump still appending to it) keeps the bytes they hash,
        and gives its payloads."""
        self.files = files
        self.digests = digests or {}
        self._fds: dict[int, int] = {}
        self.errors: dict[int, str] = {}

    def read(self, fi: int, at: int, n: int, truncated: bool) -> tuple[bytes, bool]:
        """The `n` payload bytes at offset `at` of file `fi`, and whether the packet is now
        snap-truncated: it was (`truncated`), or the file gave fewer bytes (or none)."""
        if not n:  # a packet without payload: nothing to read, nothing to miss
            return b"", truncated
        fd = self._fds.get(fi)
        if fd is None:
            fd = self._fds[fi] = self._open(fi)
        if fd < 0:
            return b"", True
        try:
            data = os.pread(fd, n, at)
        except OSError as e:
            self.errors.setdefault(fi, f"{UNREADABLE}: {e}")
            return b"", True
        if len(data) != n and self._cut_short(fi, fd):
            return b"", True
        return data, truncated or len(data) != n

    def fill(self, pls: list, sts: list, fis: list, ats: list, plens: list, k: int, end: int) -> None:
        """`read` for the packets k..end-1 of the driver's columns that give an offset (`ats`, let
        go once read): their payload (`pls`) and snap_truncated (`sts`) values, in place. Packets
        whose payloads follow one another in an open file, a few headers apart (a connection's
        segments as the capture wrote them: 96 % of the 100 MB bench capture's, 80-99 % of the
        sample captures'), are read by one `pread` of their span (RUN_GAP, RUN_BYTES): a system
        call per run, not per packet. Anything else, or a span that comes back short, takes
        `read` packet by packet."""
        fds = self._fds
        i = k
        while i < end:
            at = ats[i]
            if at is None:
                i += 1
                continue
            fi, n = fis[i], plens[i]
            fd = fds.get(fi, -1)
            j, stop = i + 1, at + n
            if fd >= 0 and n:
                while j < end:  # the run: packets without payload bytes inside it read nothing
                    a, m = ats[j], plens[j]
                    if a is not None and m:
                        if fis[j] != fi or not stop <= a <= stop + RUN_GAP or a + m - at > RUN_BYTES:
                            break
                        stop = a + m
                    j += 1
            if j - i > 1:
                try:
                    data = os.pread(fd, stop - at, at)
                except OSError:
                    data = b""
                if len(data) == stop - at:
                    for x in range(i, j):
                        a = ats[x]
                        if a is not None:
                            m = plens[x]
                            pls[x] = data[a - at : a - at + m] if m else b""
                            ats[x] = None
                    i = j
                    continue
                j = i + 1  # short: each packet the careful way (a file cut short is named)
            pls[i], sts[i] = self.read(fi, at, n, sts[i])
            ats[i] = None
            i = j

    def _cut_short(self, fi: int, fd: int) -> bool:
        """After a short read: whether file `fi` is now shorter than the read stage found it (cut
        short while the run read it: a rotation tool, a user shrinking it). It is then named as
        changed, as `_open` names a file that changed before it was opened, and gives no more
        payload bytes: its packets are not taken for snap-truncated ones."""
        try:
            now = os.fstat(fd).st_size
        except OSError:
            return False
        size = self.files[fi][1]
        if now >= size:
            return False
        os.close(fd)
        self._fds[fi] = -1
        self.errors[fi] = f"{CHANGED} (size {size} -> {now}): payload bytes after the read stage are missing"
        return True

    def _open(self, fi: int) -> int:
        path, size, mtime_ns = self.files[fi]
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            self.errors[fi] = f"{UNREADABLE}: {e}"
            return -1
        st = os.fstat(fd)
        if (st.st_size, st.st_mtime_ns) != (size, mtime_ns) and not self._only_grew(fd, fi, st.st_size):
            os.close(fd)
            self.errors[fi] = (
                f"{CHANGED} ({self._how_changed(fi, st.st_size)}): payload bytes after the read stage are missing"
            )
            return -1
        return fd

    def _how_changed(self, fi: int, now: int) -> str:
        """How file `fi`, `now` bytes long and not only grown (_only_grew), changed since the read
        stage: its sizes then and now, or at the same size, its bytes rewritten (its last
        identity chunk hashes otherwise) or, where no digest tells, its modification time."""
        size = self.files[fi][1]
        if now != size:
            return f"size {size} -> {now}"
        k = (size - 1) // ID_CHUNK if size else 0
        if self.digests.get(fi, {}).get(k) is not None:
            return f"its bytes rewritten at the same size, {size} bytes"
        return f"modified at the same size, {size} bytes"

    def _only_grew(self, fd: int, fi: int, now: int) -> bool:
        """Whether file `fi`, `now` bytes long, still holds the bytes the read stage read (the
        last identity chunk of them hashes as it did then): bytes were only appended."""
        size = self.files[fi][1]
        k = (size - 1) // ID_CHUNK if size else 0
        want = self.digests.get(fi, {}).get(k)
        if now < size or want is None:
            return False
        try:
            return chunk_digest(os.pread(fd, size - k * ID_CHUNK, k * ID_CHUNK)) == want
        except OSError:
            return False

    def close(self) -> dict[int, str]:
        """Close the files; the error per file index of those that gave no payload bytes."""
        for fd in self._fds.values():
            if fd >= 0:
                os.close(fd)
        self._fds.clear()
        return self.errors


# the start of a file's error when it changed between the read and the decode stage (each decode
# task that reads it back says so, with the size it saw then), or could not be read back at all
CHANGED = "changed while the run read it"
UNREADABLE = "payload bytes unreadable after the read stage"


def payloads_lost(error: str) -> bool:
    """Whether a capture's error is PayloadFiles': the file is no longer what the read stage
    read (changed, cut short, gone), and its payloads after it are missing."""
    return error.startswith((CHANGED, UNREADABLE))


# ---------------------------------------------------------------------------------------------
# Spark-free end-to-end decode


# the order packets reach the driver in: connection, then capture time, then file position
SORT_COLS = ["lo_ip", "lo_port", "hi_ip", "hi_port", "order_ns", "file_index", "rec_offset"]


# the packet columns that only order the packets: the driver does not read them
_UNREAD = ("rec_offset", "order_ns")


def decode_files(paths: list[str], settings: Settings | None = None) -> dict[str, list[dict]]:
    """Decode captures and segment files in this process, without Spark.

    Returns rows per table (dicts with every column of the table's schema, conformed exactly as
    the lake would store them) plus `_capture_stats` (one dict per capture split) and `_errors`
    (inputs that could not be read). Everything is held in memory: for tests and small inputs.
    """
    from . import capture, inputs, tls, vantage

    settings = settings or Settings.load()
    settings.load_tls_keys()
    disc = inputs.discover(paths, settings.exclude)
    # identity hashed here in one pass (the pipeline's tasks hash as they read)
    ids = [
        dataclasses.replace(
            i,
            capture_id=i.capture_id or capture.capture_id(i.path, i.size, inputs.id_context(i.kind, i.path)),
        )
        for i in disc.inputs
    ]
    psplits, ssplits = inputs.plan(ids, settings.split_size)
    secrets: list[bytes] = []  # the captures' Decryption Secrets Blocks: keys, never rows
    batches: list[pa.RecordBatch] = []
    records: dict[int, dict[int, int]] = {}  # file index -> split start -> packet records read
    split_stats: list[dict] = []  # the splits' counters: their files' record time spans
    for sp in psplits:
        batches += capture.read_split(
            sp,
            settings.batch_packets,
            settings.max_pending_fragments,
            settings.batch_bytes,
            flt=settings.packet_filter,
            tls_key_logs=secrets,
        )
        st = capture.parse_stats(batches[-1])
        at = FrameNumbers.key(sp.start, st["records"], st.get("first_at"))
        if at is not None:
            records.setdefault(sp.file_index, {})[at] = st["records"]
        split_stats.append({**st, "file_index": sp.file_index})
    packets = pa.Table.from_batches(batches, schema=tables.PACKETS)
    packets = (
        SplitOrder.of_stats(split_stats).raise_table(packets).sort_by([(c, "ascending") for c in SORT_COLS])
    )
    drv = StreamDriver(
        settings,
        frames=FrameNumbers(records),
        tls_keys=tls.with_texts(settings.tls_keys, secrets),
        vantages=vantage.groups(vantage.spans_of(split_stats), directions=vantage.directions_of(split_stats)),
    )
    raw: dict[str, list[dict]] = {t: [] for t in tables.DECODED_TABLES}
    for table, row in itertools.chain(drv.run_batches(packets.to_batches()), segment_rows(ssplits, settings)):
        raw[table].append(row)
    out: dict[str, list[dict]] = {
        t: resolve_topic_ids(pa.Table.from_batches([tables.conform(t, rows)]), drv.topic_names).to_pylist()
        for t, rows in raw.items()
    }
    out[STATS_TABLE] = drv.capture_stats
    out["_errors"] = [{"path": p, "error": e} for p, e in disc.errors]
    return out


def segment_rows(splits, settings: Settings) -> Iterator[base.Row]:
    """Rows from segment-file splits, with the shared columns a segment row has."""
    from .inputs import segment_readers

    readers = segment_readers()
    for sp in splits:
        proto = sp.kind.split("_")[0]
        ctx = settings.context(proto)
        try:
            for table, row in readers[sp.kind].read(sp.path, sp.start, sp.end, ctx):
                row["capture_id"] = sp.capture_id
                row["protocol"] = proto
                yield table, row
        except Exception as e:  # noqa: BLE001 - a reader bug costs the rest of its split, not the task
            log.warning("%s: segment reader failed at bytes %d-%d: %r", sp.path, sp.start, sp.end, e)
            yield (
                "commands",
                {
                    "capture_id": sp.capture_id,
                    "protocol": proto,
                    "command": "segment",
                    "decode_status": base.DECODER_ERROR,
                    "decode_error": f"{type(e).__name__}: {e}"[:500],
                    "details": json.dumps({"path": sp.path, "start": sp.start, "end": sp.end}),
                },
            )
