"""Link, IP and TCP header parsing on raw record bytes, producing PACKETS rows.

Everything here works on a buffer (`bytes` or `mmap`) plus offsets, with precompiled `struct`
objects: no per-packet object model. A `PacketDecoder` owns the per-split state (counters, IPv4/IPv6
fragment table, IP string cache) and accumulates rows as tuples that `flush()` turns into one Arrow
batch of schema `brokerscope.tables.PACKETS`.

With `compiled` (the default: `compiled_default`), the rows go to a `_walk.Packets` instead, the
compiled batch whose walks (capture/_walk.c) take the common records before these handlers see
them: the handlers read only the records the walks hand back, appending their rows to the same
batch in record order. The handlers stay the reference: BROKERSCOPE_READ_PYTHON=1 reads every
record with them, and the differential tests compare the two.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import struct
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from .. import native
from ..protocols import arrowcols
from ..tables import PACKETS
from . import files
from .filter import PacketFilter

READ_PYTHON_ENV = "BROKERSCOPE_READ_PYTHON"  # set to 1: every record read by the Python handlers


def compiled_default() -> bool:
    """Do the compiled walks read the common records (unless READ_PYTHON_ENV is 1)?"""
    return os.environ.get(READ_PYTHON_ENV, "") != "1"


def _walk_module():
    return native.load("brokerscope.capture", "_walk")


def ip6_name(addr: bytes) -> str:
    """An IPv6 address's text, as its rows carry it (the compiled walk asks here too)."""
    return str(ipaddress.IPv6Address(bytes(addr)))


# --- link types (LINKTYPE_* numbers as they appear in pcap/pcapng headers) -------------------------
LT_NULL = 0  # BSD loopback: 4-byte address family in the writer's host byte order
LT_EN10MB = 1  # Ethernet
LT_RAW_12 = 12  # raw IP (OpenBSD's DLT_RAW number, also written by some tools)
LT_RAW_14 = 14  # raw IP (BSD/OS DLT_RAW number)
LT_RAW = 101  # raw IP, version from the first nibble
LT_LOOP = 108  # OpenBSD loopback: 4-byte address family in network byte order
LT_LINUX_SLL = 113  # Linux cooked capture v1 (16-byte header)
LT_IPV4 = 228
LT_IPV6 = 229
LT_LINUX_SLL2 = 276  # Linux cooked capture v2 (20-byte header)

ET_IPV4 = 0x0800
ET_IPV6 = 0x86DD
VLAN_TPIDS = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad (QinQ), legacy QinQ
AF_INET6_VALUES = (24, 28, 30, 10)  # NetBSD/OpenBSD, FreeBSD, macOS, Linux values of AF_INET6

IPPROTO_TCP = 6
IPPROTO_UDP = 17
# IPv6 extension headers walked on the way to the transport header
V6_EXT_HOPOPTS = 0
V6_EXT_ROUTING = 43
V6_EXT_FRAGMENT = 44
V6_EXT_AH = 51
V6_EXT_DSTOPTS = 60
_V6_EXT = frozenset((V6_EXT_HOPOPTS, V6_EXT_ROUTING, V6_EXT_FRAGMENT, V6_EXT_AH, V6_EXT_DSTOPTS))

_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_U32LE = struct.Struct("<I").unpack_from
_PACK32 = struct.Struct(">I").pack
# IPv4 header from byte 2: total length, id, flags+fragment offset, ttl, proto, checksum, src, dst
_IP4 = struct.Struct(">HHHBBHII").unpack_from
# IPv4 header without options followed by the TCP base header, from the IPv4 header's first byte:
# total length (2), flags+fragment offset (6), src (12), dst (16), then TCP sport (20), dport,
# seq, ack, data offset byte, flags byte, window
_V4TCP = struct.Struct(">2xH2xH4xIIHHIIBBH").unpack_from
# TCP header: sport, dport, seq, ack, data offset byte, flags byte, window
_TCP = struct.Struct(">HHIIBBH").unpack_from
# IPv6 fragment header: next header, reserved, offset(13 bits)+res(2)+M(1), identification
_V6FRAG = struct.Struct(">BBHI").unpack_from

MAX_FRAGMENT_PARTS = 1024  # fragments kept per datagram before it is given up
MAX_ERRORS = 50  # error strings kept per split; the rest are only counted

STAT_KEYS = (
    "records",
    "tcp",
    "udp",
    "other",
    "ip_fragments",
    "fragments_reassembled",
    "fragments_unreassembled",
    "snap_truncated",
    "malformed",
    "unknown_linktype",
    "bytes",
    "damaged",
    "caplen_over_origlen",
    "caplen_over_snaplen",
    "empty_records",
    "other_frames",
)


class _Frag:
    """A datagram being reassembled from fragments."""

    __slots__ = ("parts", "total", "proto", "wire", "truncated")

    def __init__(self) -> None:
        self.parts: list[tuple[int, bytes]] = []
        self.total: int | None = None  # known once the last fragment (MF=0) arrived
        self.proto = -1  # from the first fragment (IPv6: next header of the fragment header)
        self.wire = 0
        self.truncated = False


class PacketDecoder:
    """Per-split packet state: counters, fragment table and the rows of the batch being built."""

    def __init__(
        self,
        capture_id: str,
        file_index: int,
        max_pending_fragments: int = 4096,
        flt: PacketFilter | None = None,
        compiled: bool = False,
    ) -> None:
        self.capture_id = capture_id
        self.file_index = file_index
        self.max_pending = max(1, int(max_pending_fragments))
        self.rows: list[tuple] = []
        # the compiled batch (capture/_walk.c), when `compiled`: rows, then, go there
        self.native = None
        if compiled:
            spec = flt.endpoint_spec() if flt is not None and flt.by_endpoint else None
            self.native = self.rows = _walk_module().Packets(ip6_name, spec)
        # the file's own bytes (a mapped plain file), when payloads travel as offsets into it: a
        # row of a whole payload in `ref_buf` then holds its offset, and its batch has payload
        # null and payload_at set (pipeline's shuffle carries no payload bytes)
        self.ref_buf = None
        self._append = self.rows.append
        self._flushed = 0  # rows handed out in batches so far
        self._order = _Order()
        # the split's connections (connection_hash, up to DIRECTIONS_MAX) -> the directions it
        # holds packets of (FROM_LO | FROM_HI): one place's capture in two files, one per
        # direction, is one vantage point (vantage.groups)
        self.directions: dict[int, int] = {}
        self._noted_batches = 0
        # counters
        self.records = 0
        # reader.frame_records: the log (reader.FrameLog) the record loops append every numbered
        # record's (offset, what) to, and the section and interface blocks (None: not kept, as
        # ingest reads)
        self.frame_log = None
        self.udp = 0
        self.other = 0
        self.ip_fragments = 0
        self.fragments_reassembled = 0
        self.fragments_unreassembled = 0
        self.snap_truncated = 0
        self.malformed = 0
        self.unknown_linktype = 0
        self.bytes = 0
        self.damaged = 0  # bytes skipped: garbage resynced over, a cut-off end
        self.caplen_over_origlen = 0  # records whose captured length exceeds their original length
        self.caplen_over_snaplen = 0  # records longer than the file's (or interface's) snap length
        self.empty_records = 0  # records with no captured bytes (caplen 0)
        # pcapng blocks Wireshark numbers as frames that hold no packet (journal, custom): in
        # `records` (frame numbers count them), not packets
        self.other_frames = 0
        # the ingest filter (capture/filter.py): the reader drops records outside its window; the
        # hosts and ports are checked here, on the IP and TCP headers, before the payload is copied
        self.filter = flt
        self.keep4 = flt.keep4 if flt is not None and flt.by_endpoint else None
        self.keep6 = flt.keep6 if flt is not None and flt.by_endpoint else None
        self.filtered = 0  # records outside the window and TCP segments of other hosts / ports
        self.errors: list[str] = []
        self.n_errors = 0
        self.tls_key_logs: list[bytes] = []  # pcapng Decryption Secrets Blocks' key log text: never a row
        self.first_ts_ns: int | None = None
        self.first_at: int | None = None  # where the split's reading began (reader.py)
        self.last_ts_ns: int | None = None
        self._frags: OrderedDict[tuple, _Frag] = OrderedDict()
        self._ip4names: dict[int, str] = {}
        self._ip6names: dict[bytes, str] = {}
        self._unknown_lt: set[int] = set()

    # -- errors and stats -----------------------------------------------------------------------
    @property
    def tcp(self) -> int:
        """TCP segments turned into rows (every row is one)."""
        return self._flushed + len(self.rows)

    def error(self, msg: str) -> None:
        self.n_errors += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg)

    def stats(self) -> dict:
        """The split's counters, as the closing stats batch carries them (JSON).

        records: packet records owned by the split (pcap records; pcapng EPB/SPB/PB); bytes: their
        captured bytes. tcp: segments emitted as rows (a reassembled datagram is one); udp / other
        (non-IP or another transport); ip_fragments: fragment records (IPv4 and IPv6);
        fragments_reassembled / fragments_unreassembled: datagrams completed / given up (evicted or
        still incomplete at the end of the split); snap_truncated: rows (or fragments) cut by the
        snap length; malformed: records or blocks whose headers do not parse; unknown_linktype:
        records of an unsupported link type; damaged: bytes skipped (garbage resynced over, a record
        or header cut off by the end of the file); caplen_over_origlen: records read as captured
        although their header says they are longer than on the wire; caplen_over_snaplen: records
        read as captured although longer than the snap length the file (pcapng: the interface)
        declares; empty_records: records with caplen 0, counted and skipped, as tshark shows them
        as empty frames; filtered (only with an ingest filter): records outside its time window
        plus TCP segments of other hosts or ports, dropped; errors: the first MAX_ERRORS messages about the file's structure; first_ts_ns / last_ts_ns: the smallest and largest record timestamps;
        first_at: the file offset where the split's records begin (None when it read none): its
        records are those from there to the next split's first_at (capture.files.FrameNumbers).
        order: where its packets' order_ns began and ended (SplitOrder: those of later splits);
        clock_steps_back, clock_out_of_time (only where not 0): steps back past CLOCK_STEP_NS and
        packets that far off the time of those around them (_Order).
        directions: its first connections' hashes -> the directions it has packets of (vantage.groups).
        """
        d = {k: getattr(self, k) for k in STAT_KEYS}
        errs = list(self.errors)
        if self.n_errors > len(errs):
            errs.append(f"... and {self.n_errors - len(errs)} more errors")
        d["errors"] = errs
        if self.filter is not None:  # only then: the counters of an unfiltered run stay as they were
            d["filtered"] = self.filtered
        lo, hi = _I64
        d["first_ts_ns"] = None if self.first_ts_ns is None else min(max(self.first_ts_ns, lo), hi)
        d["last_ts_ns"] = None if self.last_ts_ns is None else min(max(self.last_ts_ns, lo), hi)
        d["first_at"] = self.first_at if self.records else None
        d["order"] = self._order.stats()  # SplitOrder's
        for k in ("steps_back", "out_of_time"):  # only where there are any: a split's counters as before
            if getattr(self._order, k):
                d[f"clock_{k}"] = getattr(self._order, k)
        d["directions"] = {str(k): v for k, v in self.directions.items()}
        return d

    def finish(self) -> None:
        """End of the split: datagrams still missing fragments are counted as unreassembled."""
        self.fragments_unreassembled += len(self._frags)
        self._frags.clear()

    # -- link layer -----------------------------------------------------------------------------
    def handler(self, linktype: int) -> Callable:
        """The record handler for a link type: f(buf, off, end, wire_len, ts_ns, rec_offset, record_no),
        record_no the record's 1-based number among the split's packet records (tables.PACKETS)."""
        lt = linktype & 0xFFFF  # pcap's upper bits carry FCS information
        if lt == LT_EN10MB:
            return self.eth
        if lt in (LT_RAW, LT_RAW_12, LT_RAW_14):
            return self.raw
        if lt == LT_LINUX_SLL:
            return self.sll
        if lt == LT_LINUX_SLL2:
            return self.sll2
        if lt in (LT_NULL, LT_LOOP):
            return self.null
        if lt == LT_IPV4:
            return self.ip4
        if lt == LT_IPV6:
            return self.ip6

        def unknown(buf, off, end, wire, ts, rec, no, _lt=lt):
            self.unknown_linktype += 1
            if _lt not in self._unknown_lt:
                self._unknown_lt.add(_lt)
                self.error(f"unsupported link type {_lt} (first at offset {rec})")

        return unknown

    def eth(self, buf, off, end, wire, ts, rec, no):
        """Ethernet II, with any number of stacked 802.1Q/802.1ad tags."""
        if end - off >= 34 and buf[off + 12] == 8 and buf[off + 13] == 0:  # IPv4, untagged
            self.ip4(buf, off + 14, end, wire, ts, rec, no)
            return
        if end - off < 14:
            self.malformed += 1
            return
        et = _U16(buf, off + 12)[0]
        off += 14
        if et in VLAN_TPIDS:
            while et in VLAN_TPIDS:
                if end - off < 4:
                    self.malformed += 1
                    return
                et = _U16(buf, off + 2)[0]  # TCI (2 bytes) then the inner EtherType
                off += 4
        if et == ET_IPV4:
            self.ip4(buf, off, end, wire, ts, rec, no)
        elif et == ET_IPV6:
            self.ip6(buf, off, end, wire, ts, rec, no)
        else:
            self.other += 1

    def _ethertype(self, et, buf, off, end, wire, ts, rec, no):
        while et in VLAN_TPIDS:
            if end - off < 4:
                self.malformed += 1
                return
            et = _U16(buf, off + 2)[0]
            off += 4
        if et == ET_IPV4:
            self.ip4(buf, off, end, wire, ts, rec, no)
        elif et == ET_IPV6:
            self.ip6(buf, off, end, wire, ts, rec, no)
        else:
            self.other += 1

    def sll(self, buf, off, end, wire, ts, rec, no):
        """Linux cooked v1: packet type, ARPHRD, addr len, 8-byte addr, protocol at byte 14."""
        if end - off < 16:
            self.malformed += 1
            return
        self._ethertype(_U16(buf, off + 14)[0], buf, off + 16, end, wire, ts, rec, no)

    def sll2(self, buf, off, end, wire, ts, rec, no):
        """Linux cooked v2: protocol at byte 0, then reserved, ifindex, ARPHRD, type, addr: 20 bytes."""
        if end - off < 20:
            self.malformed += 1
            return
        self._ethertype(_U16(buf, off)[0], buf, off + 20, end, wire, ts, rec, no)

    def null(self, buf, off, end, wire, ts, rec, no):
        """BSD NULL/LOOP: a 4-byte address family, in either byte order (NULL uses the host's)."""
        if end - off < 4:
            self.malformed += 1
            return
        af = _U32LE(buf, off)[0]
        if af > 0xFFFF:
            af = _U32(buf, off)[0]
        if af == 2:
            self.ip4(buf, off + 4, end, wire, ts, rec, no)
        elif af in AF_INET6_VALUES:
            self.ip6(buf, off + 4, end, wire, ts, rec, no)
        else:
            self.other += 1

    def raw(self, buf, off, end, wire, ts, rec, no):
        """Raw IP: the version nibble tells IPv4 from IPv6."""
        if end <= off:
            self.malformed += 1
            return
        v = buf[off] >> 4
        if v == 4:
            self.ip4(buf, off, end, wire, ts, rec, no)
        elif v == 6:
            self.ip6(buf, off, end, wire, ts, rec, no)
        else:
            self.other += 1

    # -- network layer --------------------------------------------------------------------------
    def ip4(self, buf, off, end, wire, ts, rec, no):
        """IPv4 (options skipped by IHL); fragments go to reassembly, never to TCP parsing."""
        # long on purpose: it runs per packet, with the TCP parse inlined (bench/read_bench.py)
        # fast path: IHL 5, TCP, not a fragment, IPv4 + TCP base headers captured: one unpack
        if end - off >= 40 and buf[off] == 0x45 and buf[off + 9] == 6:
            total, ff, src, dst, sport, dport, seq, ack, doff, flags, win = _V4TCP(buf, off)
            if total >= 40 and not ff & 0x3FFF:
                ip_end = off + total
                p = off + 20 + ((doff >> 4) << 2)
                if doff >= 0x50 and p <= ip_end:
                    if self.keep4 is not None and not self.keep4(src, dst, sport, dport):
                        self.filtered += 1
                        return
                    names = self._ip4names
                    s = names.get(src)
                    if s is None:
                        s = names[src] = socket.inet_ntoa(_PACK32(src))
                    d = names.get(dst)
                    if d is None:
                        d = names[dst] = socket.inet_ntoa(_PACK32(dst))
                    if end >= ip_end:
                        payload = p if buf is self.ref_buf else buf[p:ip_end]  # see ref_buf
                        trunc = False
                    elif p < end:
                        payload = buf[p:end]
                        trunc = True
                        self.snap_truncated += 1
                    else:
                        payload = b""
                        trunc = True
                        self.snap_truncated += 1
                    if src < dst or (src == dst and sport <= dport):
                        self._append(
                            (
                                rec,
                                no,
                                ts,
                                s,
                                sport,
                                d,
                                dport,
                                True,
                                seq,
                                ack,
                                flags,
                                win,
                                wire,
                                ip_end - p,
                                trunc,
                                payload,
                            )
                        )
                    else:
                        self._append(
                            (
                                rec,
                                no,
                                ts,
                                d,
                                dport,
                                s,
                                sport,
                                False,
                                seq,
                                ack,
                                flags,
                                win,
                                wire,
                                ip_end - p,
                                trunc,
                                payload,
                            )
                        )
                    return
        if end - off < 20:
            self.malformed += 1
            return
        b0 = buf[off]
        ihl = (b0 & 15) << 2
        if b0 >> 4 != 4 or ihl < 20 or end - off < ihl:
            self.malformed += 1
            return
        total, ident, ff, _ttl, proto, _ck, src, dst = _IP4(buf, off + 2)
        if total == 0:  # segmentation offload on the capturing host: length from the capture
            total = end - off
        elif total < ihl:
            self.malformed += 1
            return
        ip_end = off + total
        if ff & 0x3FFF:  # MF set or fragment offset non-zero
            self.ip_fragments += 1
            cap_end = ip_end if ip_end < end else end
            key = (4, src, dst, proto, ident)
            self._fragment(
                key,
                (ff & 0x1FFF) << 3,
                ff & 0x2000,
                proto,
                buf[off + ihl : cap_end],
                cap_end < ip_end,
                4,
                src,
                dst,
                ts,
                rec,
                no,
                wire,
            )
            return
        if proto == IPPROTO_TCP:
            self._tcp4(buf, off + ihl, end if end < ip_end else ip_end, ip_end, src, dst, ts, rec, no, wire)
        elif proto == IPPROTO_UDP:
            self.udp += 1
        else:
            self.other += 1

    def ip6(self, buf, off, end, wire, ts, rec, no):
        """IPv6, walking hop-by-hop, routing, fragment, AH and destination-options headers."""
        if end - off < 40:
            self.malformed += 1
            return
        if buf[off] >> 4 != 6:
            self.malformed += 1
            return
        plen = _U16(buf, off + 4)[0]
        nh = buf[off + 6]
        src = buf[off + 8 : off + 24]
        dst = buf[off + 24 : off + 40]
        ip_end = off + 40 + plen if plen else end  # 0: jumbogram or offload, use the capture
        cap_end = end if end < ip_end else ip_end
        p = off + 40
        while nh in _V6_EXT:
            if cap_end - p < 8:
                self.malformed += 1
                return
            if nh == V6_EXT_FRAGMENT:
                nxt, _res, offfl, ident = _V6FRAG(buf, p)
                if offfl & 0xFFF9 == 0:  # atomic fragment: offset 0, M=0, the whole datagram
                    nh = nxt
                    p += 8
                    continue
                self.ip_fragments += 1
                key = (6, src, dst, ident)
                self._fragment(
                    key,
                    offfl & 0xFFF8,
                    offfl & 1,
                    nxt,
                    buf[p + 8 : cap_end],
                    cap_end < ip_end,
                    6,
                    src,
                    dst,
                    ts,
                    rec,
                    no,
                    wire,
                )
                return
            hlen = (buf[p + 1] + 2) << 2 if nh == V6_EXT_AH else (buf[p + 1] + 1) << 3
            nh = buf[p]
            p += hlen
            if p > ip_end:
                self.malformed += 1
                return
        if nh == IPPROTO_TCP:
            self._tcp6(buf, p, cap_end, ip_end, src, dst, ts, rec, no, wire)
        elif nh == IPPROTO_UDP:
            self.udp += 1
        else:
            self.other += 1

    # -- fragments ------------------------------------------------------------------------------
    def _fragment(self, key, frag_off, more, proto, data, truncated, ver, src, dst, ts, rec, no, wire):
        frags = self._frags
        fr = frags.get(key)
        if fr is None:
            fr = _Frag()
            frags[key] = fr
            if len(frags) > self.max_pending:
                frags.popitem(last=False)  # the oldest pending datagram is given up
                self.fragments_unreassembled += 1
        fr.wire += wire
        if truncated:
            fr.truncated = True
        if frag_off == 0:
            fr.proto = proto
        if not more:
            fr.total = frag_off + len(data)
        fr.parts.append((frag_off, data))
        if len(fr.parts) > MAX_FRAGMENT_PARTS:  # a flood of tiny fragments: give the datagram up
            del frags[key]
            self.fragments_unreassembled += 1
            return
        if fr.total is None or fr.proto < 0:
            return
        # complete when the received parts cover [0, total) without a hole
        covered = 0
        for o, d in sorted(fr.parts, key=lambda x: x[0]):
            if o > covered:
                return
            e = o + len(d)
            if e > covered:
                covered = e
        if covered < fr.total:
            return
        del frags[key]
        if fr.truncated:  # a fragment was cut by the snap length: the datagram cannot be rebuilt
            self.fragments_unreassembled += 1
            self.snap_truncated += 1
            return
        whole = bytearray(fr.total)
        for o, d in fr.parts:  # later copies overwrite earlier ones where fragments overlap
            n = min(len(d), fr.total - o)
            whole[o : o + n] = d[:n]
        data = bytes(whole)
        self.fragments_reassembled += 1
        n = len(data)
        if ver == 4:
            if fr.proto == IPPROTO_TCP:
                self._tcp4(data, 0, n, n, src, dst, ts, rec, no, fr.wire)
            elif fr.proto == IPPROTO_UDP:
                self.udp += 1
            else:
                self.other += 1
            return
        nh, p = fr.proto, 0
        while nh in _V6_EXT and nh != V6_EXT_FRAGMENT:
            if n - p < 8:
                self.malformed += 1
                return
            hlen = (data[p + 1] + 2) << 2 if nh == V6_EXT_AH else (data[p + 1] + 1) << 3
            nh = data[p]
            p += hlen
        if nh == IPPROTO_TCP:
            self._tcp6(data, p, n, n, src, dst, ts, rec, no, fr.wire)
        elif nh == IPPROTO_UDP:
            self.udp += 1
        else:
            self.other += 1

    # -- transport ------------------------------------------------------------------------------
    def _tcp4(self, buf, l4, cap_end, ip_end, src, dst, ts, rec, no, wire):
        """TCP over IPv4: src/dst are the addresses as ints (their order is the packed order)."""
        if ip_end - l4 < 20:
            self.malformed += 1
            return
        if cap_end - l4 < 20:  # the snap length cut the TCP header itself: a truncated header
            self.malformed += 1
            return
        sport, dport, seq, ack, doff, flags, win = _TCP(buf, l4)
        doff = (doff >> 4) << 2
        p = l4 + doff
        if doff < 20 or p > ip_end:
            self.malformed += 1
            return
        if self.keep4 is not None and not self.keep4(src, dst, sport, dport):
            self.filtered += 1
            return
        names = self._ip4names
        s = names.get(src)
        if s is None:
            s = names[src] = socket.inet_ntoa(_PACK32(src))
        d = names.get(dst)
        if d is None:
            d = names[dst] = socket.inet_ntoa(_PACK32(dst))
        plen = ip_end - p
        if p < cap_end:
            payload = p if buf is self.ref_buf and cap_end == ip_end else buf[p:cap_end]
            trunc = cap_end < ip_end
        else:
            payload = b""
            trunc = plen > 0 or p > cap_end
        if trunc:
            self.snap_truncated += 1
        if src < dst or (src == dst and sport <= dport):
            self._append(
                (rec, no, ts, s, sport, d, dport, True, seq, ack, flags, win, wire, plen, trunc, payload)
            )
        else:
            self._append(
                (rec, no, ts, d, dport, s, sport, False, seq, ack, flags, win, wire, plen, trunc, payload)
            )

    def _tcp6(self, buf, l4, cap_end, ip_end, src, dst, ts, rec, no, wire):
        """TCP over IPv6: src/dst are the 16-byte packed addresses."""
        if ip_end - l4 < 20:
            self.malformed += 1
            return
        if cap_end - l4 < 20:
            self.malformed += 1
            return
        sport, dport, seq, ack, doff, flags, win = _TCP(buf, l4)
        doff = (doff >> 4) << 2
        p = l4 + doff
        if doff < 20 or p > ip_end:
            self.malformed += 1
            return
        if self.keep6 is not None and not self.keep6(src, dst, sport, dport):
            self.filtered += 1
            return
        names = self._ip6names
        s = names.get(src)
        if s is None:
            s = names[src] = ip6_name(src)
        d = names.get(dst)
        if d is None:
            d = names[dst] = ip6_name(dst)
        plen = ip_end - p
        if p < cap_end:
            payload = p if buf is self.ref_buf and cap_end == ip_end else buf[p:cap_end]
            trunc = cap_end < ip_end
        else:
            payload = b""
            trunc = plen > 0 or p > cap_end
        if trunc:
            self.snap_truncated += 1
        if src < dst or (src == dst and sport <= dport):
            self._append(
                (rec, no, ts, s, sport, d, dport, True, seq, ack, flags, win, wire, plen, trunc, payload)
            )
        else:
            self._append(
                (rec, no, ts, d, dport, s, sport, False, seq, ack, flags, win, wire, plen, trunc, payload)
            )

    # -- output ---------------------------------------------------------------------------------
    def take_counts(self) -> tuple[int | None, int | None]:
        """Add the compiled walks' counters to this decoder's; their first and last record
        times (None, None without any)."""
        filtered, snap, over_orig, over_snap, empty, tmin, tmax = self.native.counts()
        self.filtered += filtered
        self.snap_truncated += snap
        self.caplen_over_origlen += over_orig
        self.caplen_over_snaplen += over_snap
        self.empty_records += empty
        return tmin, tmax

    def flush(self) -> pa.RecordBatch:
        """The accumulated rows as one PACKETS batch (and a fresh row list)."""
        if len(self._ip4names) + len(self._ip6names) > 200_000:  # a scan of many addresses
            self._ip4names.clear()
            self._ip6names.clear()
        if self.native is not None:
            return self._flush_native()
        rows = self.rows
        self.rows = []
        self._append = self.rows.append
        n = len(rows)
        self._flushed += n
        if n == 0:
            return _empty_batch()
        (
            rec,
            no,
            ts,
            lo_ip,
            lo_port,
            hi_ip,
            hi_port,
            from_lo,
            seq,
            ack,
            flags,
            win,
            wire,
            plen,
            trunc,
            payload,
        ) = zip(*rows, strict=True)
        arrays = [
            *self._split_columns(n),
            _i64(rec),
            _i64(no),
            _i64(ts),
            _ips(lo_ip),
            _i32(lo_port),
            _ips(hi_ip),
            _i32(hi_port),
            pa.array(from_lo, pa.bool_()),
            _i64(seq),
            _i64(ack),
            _i32(flags),
            _i32(win),
            _i32(wire),
            _i32(plen),
            pa.array(trunc, pa.bool_()),
            *_payload_columns(payload, self.ref_buf is not None),
        ]
        arrays.append(self._order.of(arrays[4], arrays[2]))
        return self._noted(pa.RecordBatch.from_arrays(arrays, schema=PACKETS))

    def _flush_native(self) -> pa.RecordBatch:
        """The compiled batch's columns, wrapped as they are (`_walk.Packets.take`: one buffer,
        or buffers, per column of PACKETS after capture_id and file_index)."""
        n, *buffers = self.native.take()
        self._flushed += n
        cols = [_native_column(f.type, n, b) for f, b in zip(_AFTER_SPLIT_COLUMNS, buffers, strict=True)]
        cols.append(self._order.of(cols[2], cols[0]))
        return self._noted(pa.RecordBatch.from_arrays(self._split_columns(n) + cols, schema=PACKETS))

    def _noted(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """`batch`, the directions of its connections noted (`directions`) while there is room."""
        if (
            len(self.directions) < DIRECTIONS_MAX
            and self._noted_batches < DIRECTIONS_BATCHES
            and batch.num_rows
        ):
            self._noted_batches += 1
            seen = pa.table([batch.column(c) for c in _DIRECTED], names=list(_DIRECTED))
            seen = seen.group_by(list(_DIRECTED)).aggregate([])
            d = self.directions
            for lo_ip, lo_p, hi_ip, hi_p, from_lo in zip(*(seen.column(c).to_pylist() for c in _DIRECTED)):
                key = connection_hash(lo_ip, lo_p, hi_ip, hi_p)
                d[key] = d.get(key, 0) | (FROM_LO if from_lo else FROM_HI)
        return batch

    def _split_columns(self, n: int) -> list[pa.Array]:
        """capture_id and file_index, the same in every row."""
        return [
            pa.repeat(pa.scalar(self.capture_id, pa.string()), n),
            pa.repeat(pa.scalar(self.file_index, pa.int32()), n),
        ]

    def stats_batch(self) -> pa.RecordBatch:
        """The closing batch: one row, lo_ip null, payload = UTF-8 JSON of the counters."""
        cols = {f.name: pa.nulls(1, f.type) for f in PACKETS}
        cols["capture_id"] = pa.array([self.capture_id], pa.string())
        cols["file_index"] = pa.array([self.file_index], pa.int32())
        cols["payload"] = pa.array([json.dumps(self.stats()).encode()], pa.binary())
        return pa.RecordBatch.from_arrays([cols[f.name] for f in PACKETS], schema=PACKETS)


# the link types a wrong header may hide, and their names for `editcap -T` (the fix)
LINK_NAMES = {
    LT_EN10MB: "ether",
    LT_RAW: "rawip",
    LT_LINUX_SLL: "linux-sll",
    LT_LINUX_SLL2: "linux-sll2",
    LT_NULL: "null",
}
HEAD_SAMPLE = 32  # records of a file's head a link type check reads


def ip_records(linktype: int, records: list[bytes]) -> int:
    """How many of `records` the handlers of `linktype` read as IP (TCP, UDP or a fragment)."""
    dec = PacketDecoder("", 0)
    handle = dec.handler(linktype)
    for no, r in enumerate(records, 1):
        handle(r, 0, len(r), len(r), 0, 0, no)
    return dec.tcp + dec.udp + dec.ip_fragments


def link_mismatch(path: str, kind: str) -> str | None:
    """Why the link type a capture file declares seems wrong, or None: the records of its head
    that the declared type reads as no IP packet at all read as IP under another supported link
    type (at least half of them). For a file whose read found no IP packet, before its status
    says it was read cleanly."""
    by_type: dict[int, list[bytes]] = {}
    for lt, _, data in files.head_records(path, kind, HEAD_SAMPLE):
        by_type.setdefault(lt, []).append(data)
    for declared, records in by_type.items():
        if ip_records(declared, records):
            continue
        scores = {lt: ip_records(lt, records) for lt in LINK_NAMES if lt != declared & 0xFFFF}
        best = max(scores, key=scores.get)
        if 2 * scores[best] >= len(records):
            return (
                f"declares link type {declared} but its records read as link type {best} "
                f"({scores[best]} of the first {len(records)} are IP packets then, none as declared): "
                f"rewrite the header, e.g. editcap -T {LINK_NAMES[best]} IN OUT"
            )
    return None


def _payload_columns(payload: tuple, refs: bool) -> tuple[pa.Array, pa.Array]:
    """payload, payload_at: bytes in the first, or (refs) an int offset in the file in the second."""
    if not refs:
        return pa.array(payload, pa.binary()), pa.nulls(len(payload), pa.int64())
    return (
        pa.array([None if v.__class__ is int else v for v in payload], pa.binary()),
        pa.array([v if v.__class__ is int else None for v in payload], pa.int64()),
    )


# the fields after capture_id and file_index but order_ns (made here from ts_ns: _Order)
_AFTER_SPLIT_COLUMNS = tuple(PACKETS)[2:-1]


def _native_column(typ: pa.DataType, n: int, bufs) -> pa.Array:
    """A column of n values from the compiled batch's buffers: a string column's (offsets, data),
    a binary column's (validity, offsets, data, nulls), a nullable number's (validity, values,
    nulls), else the values (a bitmap for booleans)."""
    if typ == pa.string():
        return arrowcols.text(*bufs)
    if typ == pa.binary():
        return arrowcols.binary(bufs)
    if isinstance(bufs, tuple):
        valid, values, nulls = bufs
        return arrowcols.fixed(typ, n, values, valid, nulls)
    return arrowcols.fixed(typ, n, bufs)


# a split notes the directions of its first connections (PacketDecoder.directions), in its first
# batches (0.6 ms a batch of 8192 packets): enough to tell two files of one place's two
# directions from two places' captures
DIRECTIONS_MAX = 1024
DIRECTIONS_BATCHES = 8
FROM_LO, FROM_HI = 1, 2
_DIRECTED = ("lo_ip", "lo_port", "hi_ip", "hi_port", "from_lo")


def connection_hash(lo_ip: str, lo_port: int, hi_ip: str, hi_port: int) -> int:
    """A connection's 4-tuple (canonical: tcp.canonical_key) as 32 bits."""
    return zlib.crc32(f"{lo_ip}|{lo_port}|{hi_ip}|{hi_port}".encode())


# how far a record's timestamp may go back from the record's before it and still sort as the file
# has it (order_ns): a clock stepped back, NIC queues or interfaces merged out of time order by the
# capture; a step further is a new time base or one record out of time (_Order, SplitOrder)
CLOCK_STEP_NS = 5_000_000_000
_NO_TIME = np.iinfo(np.int64).min
MAX_BASES = 64  # steps back to a new time base a split notes (_Order.bases)


def _values(a: pa.Array) -> np.ndarray:
    """The values of an integer column without nulls, as numpy sees its buffer (to_numpy would
    have pyarrow look for pandas, which task workers keep out: pipeline.keep_pandas_out)."""
    w = a.type.byte_width
    return np.frombuffer(a.buffers()[1], f"<i{w}", len(a), a.offset * w)


class _Order:
    """order_ns of a split's packets, batch by batch in record order. A packet's key is its time,
    unless its time goes back from the packet's before it by at most CLOCK_STEP_NS: then it
    keeps the key before it, its place in the file, until its time passes that key (steps back
    each within the bound keep the file's order, however far they add up). A step further back,
    or further ahead, is a new time base, its packets keyed by their time, unless the packet
    after it is back within the bound of the time before it (or none follows in the batch): then
    it is one record out of time (a wrong timestamp) and keeps its place. The decode stage
    raises keys past the split's start (SplitOrder): a task reads one split."""

    def __init__(self) -> None:
        self.key: int | None = None  # the key of the split's last packet so far
        self.ref: int | None = None  # the time of its last packet in time (not out of it)
        self.first: int | None = None  # the time of its first packet
        # its steps back to a new time base: (record offset, the packet's time, the key before it)
        self.bases: list[tuple[int, int, int]] = []
        self.steps_back = 0  # steps back past the bound (a clock reset)
        self.out_of_time = 0  # packets far off the time of those around them (a wrong timestamp)

    def of(self, ts: pa.Array, rec: pa.Array) -> pa.Array:
        if not len(ts):
            return ts
        t = _values(ts)
        if self.first is None:
            self.first = self.key = self.ref = int(t[0])
        d = np.diff(t, prepend=self.ref)
        if d.min() >= -CLOCK_STEP_NS and d.max() <= CLOCK_STEP_NS:  # no far step: the common case
            keys = np.maximum.accumulate(t)
            np.maximum(keys, self.key, out=keys)
            self.key, self.ref = int(keys[-1]), int(t[-1])
            return ts if (keys == t).all() else pa.array(keys, pa.int64())
        return pa.array(self._keys(t.tolist(), _values(rec)), pa.int64())

    def _keys(self, t: list[int], rec: np.ndarray) -> list[int]:
        """The keys of a batch with a far step, one by one."""
        out = []
        key, ref = self.key, self.ref
        last = len(t) - 1
        for i, x in enumerate(t):
            if abs(x - ref) <= CLOCK_STEP_NS:
                key, ref = max(key, x), x  # in time, or a step back within the bound: in place
            elif i < last and abs(t[i + 1] - ref) > CLOCK_STEP_NS:
                if x < ref:
                    self.steps_back += 1
                    if len(self.bases) < MAX_BASES:
                        self.bases.append((int(rec[i]), x, key))
                key, ref = x, x  # far away, and the next packet is there too: a new time base
            else:  # one packet out of time (or the batch's last: no packet after it says more):
                self.out_of_time += 1  # its place in the file, the key stays
            out.append(key)
        self.key, self.ref = key, ref
        return out

    def stats(self) -> dict | None:
        """What SplitOrder needs of the split (None: it had no packets)."""
        if self.first is None:
            return None
        return {"first": self.first, "ref": self.ref, "key": self.key, "bases": self.bases}


class SplitOrder:
    """order_ns across the splits of a file. A read task sees only its own split, so the keys of
    a split's packets start from its first packet's time; `raised` gives the packets of a split
    up to its first step back to a new time base the key the file's earlier splits ended with,
    where that is later (the split began within CLOCK_STEP_NS of the time before it): the keys
    of one read of the whole file, whatever the split size. A new time base only orders a
    file's packets among other files' (a rotation's next file on the new time): where no other
    file's time span meets a step back (from the new time to the key before it), the packets
    after it keep the file's order, keyed as the packet before the step until their time passes
    it.

    `splits[file_index][where the split's records begin (its stats' first_at)]` = its stats'
    `order` (_Order.stats); splits without packets are left out. `spans[file_index]`: the
    file's record time span (vantage.spans_of)."""

    def __init__(
        self, splits: dict[int, dict[int, dict]], spans: dict[int, tuple[int, int]] | None = None
    ) -> None:
        # file -> (record offsets, the key the packets from each on are raised to (_NO_TIME:
        # none)): split starts and steps back to a new time base, in file order
        self._files: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._spans = spans or {}
        # file -> steps back past CLOCK_STEP_NS where a split begins: its first packet that far
        # back from the time before it, which the split's own _Order cannot see (clock_steps_back)
        self.steps_at_starts: dict[int, int] = {}
        for fi, per in splits.items():
            offs: list[int] = []
            to: list[int] = []
            key = ref = None
            for s in sorted(per):
                st = per[s]
                cur = None  # the key this stretch of the split is raised to
                if ref is not None and st["first"] < ref - CLOCK_STEP_NS:
                    self.steps_at_starts[fi] = self.steps_at_starts.get(fi, 0) + 1
                if key is not None and (
                    st["first"] >= ref - CLOCK_STEP_NS or self._alone(fi, st["first"], key)
                ):
                    cur = key  # it goes on from the split before (or steps back alone)
                offs.append(s)
                to.append(_NO_TIME if cur is None else cur)
                for at, t, before in st["bases"]:
                    held = before if cur is None else max(cur, before)
                    cur = held if self._alone(fi, t, held) else None
                    offs.append(at)
                    to.append(_NO_TIME if cur is None else cur)
                key = st["key"] if cur is None else max(cur, st["key"])
                ref = st["ref"]
            if any(v != _NO_TIME for v in to):
                self._files[fi] = (np.array(offs, np.int64), np.array(to, np.int64))

    def _alone(self, fi: int, t: int, before: int) -> bool:
        """Does no other file have records between `t`, the time a step back of file `fi` went
        to, and `before`, the key before it? Then the file keeps its order over the step."""
        return not any(lo <= before and t <= hi for f, (lo, hi) in self._spans.items() if f != fi)

    @classmethod
    def of_stats(cls, stats) -> SplitOrder:
        """From the splits' stats dicts, each with its file_index."""
        from .. import vantage

        stats = list(stats)
        splits: dict[int, dict[int, dict]] = {}
        for st in stats:
            if st.get("order") is not None and st.get("first_at") is not None:
                splits.setdefault(st["file_index"], {})[st["first_at"]] = st["order"]
        return cls(splits, vantage.spans_of(stats))

    def __bool__(self) -> bool:
        return bool(self._files)

    def raised(self, file_index: np.ndarray, rec_offset: np.ndarray, order: np.ndarray) -> np.ndarray | None:
        """The order_ns of packets (numpy columns), raised where the splits' stats say keys rise
        (from a split's start, or a step back); None when none is."""
        out = None
        for fi, (offsets, to) in self._files.items():
            mine = file_index == fi
            if not mine.any():
                continue
            offs = rec_offset[mine]
            at = np.searchsorted(offsets, offs, side="right") - 1
            up = np.where(at >= 0, to[np.maximum(at, 0)], _NO_TIME)
            o = order[mine]
            rise = up > o
            if rise.any():
                out = order.copy() if out is None else out
                o = o.copy()
                o[rise] = up[rise]
                out[mine] = o
        return out

    def raise_table(self, packets: pa.Table) -> pa.Table:
        """`packets` (PACKETS, unsorted) with order_ns raised."""
        if not self._files:
            return packets
        cols = [_values(packets.column(c).combine_chunks()) for c in ("file_index", "rec_offset", "order_ns")]
        new = self.raised(*cols)
        if new is None:
            return packets
        return packets.set_column(packets.schema.get_field_index("order_ns"), "order_ns", pa.array(new))


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in PACKETS], schema=PACKETS)


_I64 = (-(1 << 63), (1 << 63) - 1)
_I32 = (-(1 << 31), (1 << 31) - 1)


_IPDICT = pa.dictionary(pa.int32(), pa.string())


def _ips(values) -> pa.Array:
    """IP strings repeat a lot: dictionary-encode while converting (hashing in C is ~10x cheaper
    than UTF-8-encoding every Python str), then decode to a plain string array."""
    return pa.array(values, _IPDICT).dictionary_decode()


def _i64(values) -> pa.Array:
    try:
        a = array("q", values)
    except OverflowError:  # absurd header values (a 64-bit timestamp in 2^-30 s units...): clamp
        a = array("q", (min(max(v, _I64[0]), _I64[1]) for v in values))
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def _i32(values) -> pa.Array:
    try:
        a = array("i", values)
    except OverflowError:  # an original length above 2^31-1 in a damaged record header: clamp
        a = array("i", (min(max(v, _I32[0]), _I32[1]) for v in values))
    return pa.Array.from_buffers(pa.int32(), len(a), [None, pa.py_buffer(a)])


def parse_stats(batch: pa.RecordBatch) -> dict | None:
    """The counters of a stats batch (lo_ip null), or None for a packets batch."""
    if batch.num_rows != 1 or batch.column("lo_ip")[0].is_valid:
        return None
    return json.loads(batch.column("payload")[0].as_py())
