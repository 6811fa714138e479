"""From rows back to packets: the packets of given connections or of a time window, copied from
the original capture files into a pcapng (or pcap) file for `wireshark -r`.

The lake says where to look: `streams` gives a connection's capture and endpoints and its first
and last packet times, `inputs` the files of that capture set. The files are read again by the
capture reader (so damaged, cut and gzip captures read as they did at ingest) and each selected
record is copied byte for byte: a pcapng block with the section and interface blocks before it,
or a pcap record. Only TCP packets are selected (the tables hold nothing else); an IPv4 packet
reassembled from fragments is its last fragment's record.

Or by frame number, as the tables' first_frame / last_frame and Wireshark count them (the 1-based
index of a packet record in its file: pcap records, pcapng EPB/SPB/PB blocks): the records of a
capture whose numbers are given, whatever they hold, found by the ingest reader's walk of the
file's records (reader.frame_records: damage resynced over as ingest does, a record or packet
block whose length is damaged numbered, never copied).
"""

from __future__ import annotations

import datetime as _dt
import gzip
import heapq
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from . import capture, export
from .capture import reader
from .capture.files import PCAP_MAGICS, PCAPNG_BOM, Split, chunk_digests, combine_id, gzip_id
from .capture.filter import PacketFilter
from .lake import Lake

# pcapng block types (pcapng spec, section 4) and the fields brokerscope writes
SHB, IDB, SPB, EPB, PB = 0x0A0D0D0A, 1, 3, 6, 2
PACKET_BLOCKS = (EPB, SPB, PB)
OPT_END, IF_TSRESOL = 0, 9  # IDB option codes: opt_endofopt, if_tsresol
PCAP_HEADER = 24  # magic, version 2+2, thiszone, sigfigs, snaplen (16), linktype (20)
PCAP_RECORD = 16  # ts_sec, ts_frac, incl_len (8), orig_len (12)


@dataclass(frozen=True)
class Conn:
    """One connection to extract: its endpoints (either order) and its first/last packet time;
    for a connection of one capture, that capture and its first/last frame numbers (its packets
    are those of the frames between: a file's order, whatever its times say)."""

    lo: tuple[str, int]
    hi: tuple[str, int]
    first_ns: int
    last_ns: int
    capture_id: str | None = None
    frames: tuple[int, int] | None = None


@dataclass(frozen=True)
class Source:
    capture_id: str
    path: str
    kind: str  # pcap | pcapng | pcap.gz | pcapng.gz
    size: int


@dataclass
class Extracted:
    packets: int
    files: list[str]
    out: str
    frames_in_file: int | None = None  # with frame numbers: how many frames the file has
    damaged: list[int] | None = None  # frame numbers asked for of records whose length is damaged


# -- what to read ---------------------------------------------------------------------------------
def plan(
    lake: Lake, conn_ids: Iterable[str], capture_ids: Iterable[str]
) -> tuple[list[Source], list[Conn] | None]:
    """The files to read and the connections to keep (None: every TCP packet of the files).
    A connection is looked for in every file of the capture sets that ingested its capture (a
    connection runs on through rotated files)."""
    # ids as the tables write them (lower-case hex), however they were pasted
    conn_ids = list(dict.fromkeys(c.strip().lower() for c in conn_ids))
    capture_ids = list(dict.fromkeys(c.strip().lower() for c in capture_ids))
    if not conn_ids and not capture_ids:
        raise ValueError("say what to extract: --conn-id (from any table's conn_id) or --capture-id")
    conns: list[Conn] | None = None
    cids = set(capture_ids)
    if conn_ids:
        st = lake.read_arrow("streams").filter(pc.field("conn_id").isin(conn_ids))
        missing = sorted(set(conn_ids) - set(st.column("conn_id").to_pylist()))
        if missing:
            raise ValueError(f"no connection {', '.join(missing)} in the lake's streams table at {lake.root}")
        conns = []
        for r in st.select(["capture_id", "client_ip", "client_port", "server_ip", "server_port",
                            "first_ts", "last_ts", "capture_ids", "first_frame", "last_frame"]).to_pylist():  # fmt: skip
            first, last = (_us(r["first_ts"]) * 1000, _us(r["last_ts"]) * 1000 + 999)
            one = len(r["capture_ids"] or []) <= 1 and r["first_frame"] and r["last_frame"]
            frames = tuple(sorted((r["first_frame"], r["last_frame"]))) if one else None
            ends = ((r["client_ip"], r["client_port"]), (r["server_ip"], r["server_port"]))
            conns.append(Conn(*ends, first, last, r["capture_id"] if one else None, frames))
            cids.add(r["capture_id"])
    inputs = lake.read_arrow("inputs").to_pylist()
    known = {r["capture_id"] for r in inputs}
    unknown = sorted(c for c in capture_ids if c not in known)
    if unknown:
        raise ValueError(f"no capture {', '.join(unknown)} in the lake's inputs table at {lake.root}")
    runs = {r["run_id"] for r in inputs if r["capture_id"] in cids} if conns else set()
    wanted = cids | {r["capture_id"] for r in inputs if r["run_id"] in runs}
    held: dict[str, list[dict]] = {}  # capture id -> the records of the paths that held it
    for r in inputs:
        if r["capture_id"] in wanted and r["status"] in ("ok", "partial") and _is_capture(r["kind"]):
            held.setdefault(r["capture_id"], []).append(r)
    for c in capture_ids:
        if c not in held:
            raise ValueError(_why_none(c, [r for r in inputs if r["capture_id"] == c]))
    sources = [_one_source(rows) for rows in held.values()]
    return sorted(sources, key=lambda s: _natural(s.path)), conns


def _natural(path: str) -> list:
    """A path's sort key with its numbers as numbers: tcpdump -C's cap.pcap, cap.pcap1, ...,
    cap.pcap10 in the order written (a connection's files in its order)."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def _why_none(capture_id: str, rows: list[dict]) -> str:
    """Why a capture the lake records has no file to extract from: replaced by the content its
    path holds now, a segment file (no packets), or nothing readable."""
    for r in rows:
        if r["status"] == "replaced":
            return (
                f"capture {capture_id} ({r['path']}) was replaced by {r['replaced_by']}, the content "
                "that path holds now (it grew): extract that capture"
            )
    for r in rows:
        if not _is_capture(r["kind"]):
            return f"capture {capture_id} is {r['path']}, a {r['kind']} file: it holds no packets to extract"
    return f"capture {capture_id}: the lake's inputs table records no readable file of it"


def _one_source(rows: list[dict]) -> Source:
    """The file to read a capture from: the first of the paths that held it (the one ingested
    last first) that is still there with the size it had; every path named when none is."""
    problems, seen = [], set()
    for r in sorted(rows, key=lambda r: (r["ingested_at"], r["path"]), reverse=True):
        if r["path"] in seen:
            continue
        seen.add(r["path"])
        s = Source(r["capture_id"], r["path"], r["kind"], r["size"])
        try:
            _check_unchanged(s)
            return s
        except (OSError, ValueError) as e:
            problems.append(str(e))
    if len(problems) == 1:
        raise FileNotFoundError(problems[0])
    raise FileNotFoundError("; ".join(problems))


def _us(ts) -> int:
    d = ts - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


def _is_capture(kind: str) -> bool:
    return kind in ("pcap", "pcapng", "pcap.gz", "pcapng.gz")


def _check_unchanged(s: Source) -> None:
    """Raise unless `s.path` still holds the capture: its size, then its content, which must hash
    to the capture id (a file changed in place keeps its size: found by a user trial, whose
    extract then wrote the new bytes). A gzip file recorded as the capture it decompresses to
    (tcpdump -z gzip after ingest) hashes so."""
    try:
        size = os.path.getsize(s.path)
        if size != s.size:
            raise ValueError(f"{s.path}: changed since it was ingested ({s.size} bytes then, {size} now)")
        same = combine_id(size, chunk_digests(s.path, 0, size, size)) == s.capture_id
        if not same and s.kind.endswith(".gz"):
            try:
                same = gzip_id(s.path)[0] == s.capture_id
            except (EOFError, zlib.error):  # damaged: not the capture's bytes
                same = False
    except OSError as e:
        raise FileNotFoundError(f"{s.path}: the capture is gone ({e.strerror or e})") from None
    if not same:
        raise ValueError(
            f"{s.path}: changed since it was ingested (the same size, other bytes: not capture {s.capture_id})"
        )


# -- which records --------------------------------------------------------------------------------
def selected_offsets(src: Source, conns: list[Conn] | None, flt: PacketFilter | None) -> list[int]:
    """Offsets (in the decompressed file) of the records of `src` to copy, in file order: those
    of `conns` (None: any TCP packet) that `flt` keeps, as the ingest filter keeps packets."""
    split = Split(src.path, src.capture_id, 0, src.kind, 0, src.size)
    out: list[pa.Array] = []
    for b in capture.read_split(split, payload_refs=True, flt=flt):
        b = b.filter(pc.is_valid(b.column("lo_ip")))  # counters rows have no endpoint
        if b.num_rows and conns is not None:
            b = b.filter(_any_conn(b, conns, src.capture_id))
        out.append(b.column("rec_offset"))
    return sorted(set(pa.chunked_array(out, pa.int64()).to_pylist()))


def _any_conn(b: pa.RecordBatch, conns: list[Conn], capture_id: str) -> pa.Array:
    """The packets of `b` (of the whole file `capture_id`, read as one split: record_no is the
    frame number) of `conns`: by frame numbers for a connection of this capture alone, else by
    time (a connection across files)."""
    col = {n: b.column(n) for n in ("lo_ip", "lo_port", "hi_ip", "hi_port", "ts_ns", "record_no")}

    def at(side: str, ep: tuple[str, int]) -> pa.Array:
        return pc.and_(pc.equal(col[f"{side}_ip"], ep[0]), pc.equal(col[f"{side}_port"], ep[1]))

    hit = pa.array([False] * b.num_rows)
    for c in conns:  # the reader orders a pair's endpoints its own way: either order matches
        if c.frames is not None and c.capture_id != capture_id:
            continue  # a connection of another file alone
        if c.frames is not None:
            when, lo, hi = col["record_no"], c.frames[0], c.frames[1]
        else:
            when, lo, hi = col["ts_ns"], c.first_ns, c.last_ns
        pair = pc.or_(pc.and_(at("lo", c.lo), at("hi", c.hi)), pc.and_(at("lo", c.hi), at("hi", c.lo)))
        during = pc.and_(pc.greater_equal(when, lo), pc.less_equal(when, hi))
        hit = pc.or_(hit, pc.and_(pair, during))
    return hit


def parse_frames(specs: Iterable[str]) -> set[int]:
    """Frame numbers from `N` and `N-M` (inclusive, either way round: a row's first_frame is
    after its last_frame where the capture holds its last byte before its first) items, each
    item possibly comma-separated."""
    out: set[int] = set()
    for spec in specs:
        for item in str(spec).split(","):
            item = item.strip()
            lo, sep, hi = item.partition("-")
            try:
                a, b = int(lo), int(hi) if sep else int(lo)
            except ValueError:
                raise ValueError(f"frames: {item!r} is not a frame number N or a range N-M") from None
            a, b = min(a, b), max(a, b)
            if a < 1:
                raise ValueError(f"frames: {item!r}: frame numbers start at 1")
            if b - a >= 10_000_000:
                raise ValueError(f"frames: {item!r}: more than 10,000,000 frames")
            out.update(range(a, b + 1))
    return out


def frame_offsets(src: Source, frames: set[int]) -> list[int]:
    """Offsets of the packet records numbered `frames` in `src`, in file order (a frame that holds
    no packet, a damaged record's among them, gives none)."""
    return [off for no, (off, what) in enumerate(_frames(src), 1) if what == reader.PACKET and no in frames]


def frame_count(src: Source) -> int:
    """How many frames `src` has (Wireshark's numbering: every record, a packet or not)."""
    return len(_frames(src))


def damaged_frames(src: Source, frames: set[int]) -> list[int]:
    """The numbers among `frames` of records whose length is damaged (frames with no packet)."""
    return [no for no, (_, what) in enumerate(_frames(src), 1) if what == reader.DAMAGED and no in frames]


def _frames(src: Source) -> reader.FrameLog:
    """The offset of every record numbered as a frame, and what it is (reader.PACKET, OTHER or
    DAMAGED), in file order: the ingest reader's own walk (reader.frame_records), so the numbers
    past damage are the tables' (a damaged record or packet block takes its number, bytes
    inserted between records none, as in the undamaged file)."""
    _records(src)
    return _walked["frames"]


def _records(src: Source) -> reader.FrameLog:
    """Every record and block reader.frame_records logs, walked once per file (`_frames` keeps
    its frames: frame_offsets, frame_count and damaged_frames each ask for them)."""
    key = (src.path, src.kind, src.size)
    if _walked.get("key") != key:
        log = reader.frame_records(src.path, src.kind)
        frames = log.without(reader.SECTION, reader.INTERFACE)
        _walked.clear()
        _walked.update(key=key, log=log, frames=frames)
    return _walked["log"]


_walked: dict = {}  # the last file walked (extract walks one file's records up to three times)


# -- writing --------------------------------------------------------------------------------------
class _Input:
    """Random reads of a capture's (decompressed) bytes; offsets ascend for gzip files."""

    def __init__(self, src: Source) -> None:
        self.gz = src.kind.endswith(".gz")
        self.fh = gzip.open(src.path, "rb") if self.gz else open(src.path, "rb")  # noqa: SIM115

    def read(self, at: int, n: int) -> bytes:
        self.fh.seek(at)
        return self.fh.read(n)

    def close(self) -> None:
        self.fh.close()


def _pcapng_blocks(inp: _Input, src: Source, offsets: list[int]) -> Iterator[bytes]:
    """The section and interface blocks of a pcapng file, and its packet blocks at `offsets`, in
    file order, as the ingest reader walks them (damage resynced over: a damaged block is never
    copied)."""
    wanted = set(offsets)
    order = "<"
    for pos, what in _records(src):
        if what == reader.SECTION:
            head = inp.read(pos, 12)
            order = "<" if head[8:12] == struct.pack("<I", PCAPNG_BOM) else ">"
        elif what != reader.INTERFACE and pos not in wanted:
            continue
        blen = struct.unpack(order + "I", inp.read(pos + 4, 4))[0]
        yield inp.read(pos, blen)


def _pcap_records(inp: _Input, offsets: list[int]) -> tuple[bytes, Iterator[tuple[bytes, bytes]]]:
    """A pcap file's header, and (record header, data) at `offsets`."""
    header = inp.read(0, PCAP_HEADER)
    order = PCAP_MAGICS[header[:4]][0]

    def records() -> Iterator[tuple[bytes, bytes]]:
        for off in offsets:
            rh = inp.read(off, PCAP_RECORD)
            incl = struct.unpack_from(order + "I", rh, 8)[0]
            yield rh, inp.read(off + PCAP_RECORD, incl)

    return header, records()


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def _pcap_as_pcapng(header: bytes, records: Iterator[tuple[bytes, bytes]]) -> Iterator[bytes]:
    """A pcap file's records as one pcapng section: SHB, one IDB, EPBs."""
    order, tick_ns = PCAP_MAGICS[header[:4]]
    snaplen, linktype = struct.unpack_from(order + "II", header, 16)
    resol = 9 if tick_ns == 1 else 6
    yield _block(SHB, struct.pack("<IHHq", PCAPNG_BOM, 1, 0, -1))
    opts = struct.pack("<HHB", IF_TSRESOL, 1, resol) + b"\0" * 3 + struct.pack("<HH", OPT_END, 0)
    yield _block(IDB, struct.pack("<HHI", linktype & 0xFFFF, 0, snaplen) + opts)
    scale = 10**resol
    for rh, data in records:
        sec, frac, incl, orig = struct.unpack(order + "IIII", rh)
        t = sec * scale + frac
        yield _block(EPB, struct.pack("<IIIII", 0, t >> 32, t & 0xFFFFFFFF, incl, orig) + data)


def write(sources: list[Source], picks: list[list[int]], out: str) -> int:
    """Write the records picked per source to `out`: pcap when it ends in .pcap (every source a pcap
    with the same header), else pcapng. Pcap sources with the same header (one place's files per
    direction, a rotation's files) are merged into one stream by record time, as mergecap merges
    (each file's own order kept: the merge takes the earliest next record); else a pcapng section
    per source. Returns the packets written."""
    as_pcap = out.endswith(".pcap")
    heads = []
    for s in sources:
        if s.kind.startswith("pcapng"):
            heads.append(None)
            continue
        inp = _Input(s)
        try:
            heads.append(inp.read(0, PCAP_HEADER))
        finally:
            inp.close()
    same = None not in heads and len({h[:4] + h[16:24] for h in heads}) == 1
    if as_pcap:
        ng = [s.path for s, h in zip(sources, heads) if h is None]
        if ng:  # its interfaces and blocks have no place in a pcap file
            raise ValueError(f"{out}: {ng[0]} is a pcapng capture (whatever its name): write a .pcapng")
        if not same:
            raise ValueError(f"{out}: these captures differ in format or link type: write a .pcapng")
    n = 0
    with export.whole_file(out) as fh:
        if same:
            inps = [_Input(s) for s in sources]
            try:
                header = heads[0]
                at = PCAP_MAGICS[header[:4]][0] + "II"  # a record's seconds and fraction
                merged = heapq.merge(
                    *(_pcap_records(inp, offs)[1] for inp, offs in zip(inps, picks)),
                    key=lambda r: struct.unpack_from(at, r[0], 0),
                )
                if as_pcap:
                    fh.write(header)
                    for rh, data in merged:
                        fh.write(rh + data)
                        n += 1
                else:
                    for blk in _pcap_as_pcapng(header, merged):
                        fh.write(blk)
                    n += sum(map(len, picks))
            finally:
                for inp in inps:
                    inp.close()
            return n
        for s, offsets in zip(sources, picks):
            inp = _Input(s)
            try:
                if s.kind.startswith("pcapng"):
                    for blk in _pcapng_blocks(inp, s, offsets):
                        fh.write(blk)
                else:
                    header, records = _pcap_records(inp, offsets)
                    for blk in _pcap_as_pcapng(header, records):
                        fh.write(blk)
                n += len(offsets)
            finally:
                inp.close()
    return n


def extract(
    lake_root: str,
    out: str,
    conn_ids: Iterable[str] = (),
    capture_ids: Iterable[str] = (),
    flt: PacketFilter | None = None,
    frames: set[int] | None = None,
) -> Extracted:
    """Write the packets of `conn_ids` (or of every connection of `capture_ids`) that `flt`
    keeps to `out`, straight from the inputs the lake records; or, with `frames`, the records of
    `capture_ids` with those frame numbers."""
    lake = Lake(lake_root)
    lake.check_readable()
    export.check_out(out, "the capture file")
    if frames:
        conn_ids, capture_ids = list(conn_ids), list(capture_ids)
        if conn_ids or len(capture_ids) != 1 or flt is not None:
            raise ValueError(
                "frame numbers are per file: give --frames/--frame with one --capture-id "
                "(the row's capture_id), and no --conn-id or filter"
            )
    sources, conns = plan(lake, conn_ids, capture_ids)
    if frames:
        sources = sources[:1]  # identical content under several paths: one of them
        picks = [frame_offsets(s, frames) for s in sources]
    else:
        picks = [selected_offsets(s, conns, flt) for s in sources]
    kept = [(s, p) for s, p in zip(sources, picks) if p]
    n = write([s for s, _ in kept], [p for _, p in kept], out) if kept else 0
    have = frame_count(sources[0]) if frames and sources else None  # the walk is kept: no second read
    dmg = damaged_frames(sources[0], frames) if frames and sources else None
    _walked.clear()
    return Extracted(n, [s.path for s, _ in kept], out, have, dmg or None)
