"""Capture files as a whole: what kind a file is, its stable id, and how it is cut into splits."""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import zlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

# pcap global header magic numbers, as the first 4 bytes appear in the file
PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # microseconds, little-endian writer
    b"\xa1\xb2\xc3\xd4": (">", 1000),  # microseconds, big-endian writer
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds, little-endian writer
    b"\xa1\xb2\x3c\x4d": (">", 1),  # nanoseconds, big-endian writer
}
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"  # Section Header Block type (palindromic)
PCAPNG_BOM = 0x1A2B3C4D
GZIP_MAGIC = b"\x1f\x8b"

KINDS = ("pcap", "pcapng", "pcap.gz", "pcapng.gz")


def _kind_of_head(head: bytes) -> str:
    if len(head) == 0:
        return "empty"
    if head[:4] in PCAP_MAGICS and len(head) >= 24:
        return "pcap"
    if head[:4] == PCAPNG_SHB and len(head) >= 12:
        bom = head[8:12]
        if bom in (struct.pack("<I", PCAPNG_BOM), struct.pack(">I", PCAPNG_BOM)):
            return "pcapng"
    return "unknown"


def identify(path) -> str:
    """'pcap' | 'pcapng' | 'pcap.gz' | 'pcapng.gz' | 'empty' | 'unknown', from magic bytes.

    A gzip file is identified by the head of its decompressed content. A file shorter than its
    container's fixed header is 'unknown' (or 'empty' when it has no bytes at all).
    """
    with open(path, "rb") as fh:
        head = fh.read(24)
    if head[:2] == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as gz:
                inner = gz.read(24)
        except (OSError, EOFError, zlib.error):
            # a gzip file truncated early may still give its head: read what decompresses
            inner = _gzip_head_lenient(path)
        kind = _kind_of_head(inner)
        if kind in ("pcap", "pcapng"):
            return kind + ".gz"
        return kind
    return _kind_of_head(head)


def _gzip_head_lenient(path) -> bytes:
    with open(path, "rb") as fh:
        raw = fh.read(64 * 1024)
    try:
        return zlib.decompressobj(wbits=31).decompress(raw, 24)
    except zlib.error:
        return b""


# Identity: a file's capture_id is a hash of every byte. The file is cut into fixed ID_CHUNK
# chunks; a chunk belongs to the split holding its first byte (the rule records follow), so each
# split task hashes what it reads anyway and the id does not depend on the split size. The driver
# combines the chunk digests in order with the file size.
ID_CHUNK = 8 << 20
_ID_PERSON = b"brokerscope-id2"  # blake2b personalisation: ids of this scheme never equal v1's


def chunk_digests(path, start: int, end: int, size: int) -> dict[int, bytes]:
    """Digests (blake2b-128) of the chunks of the first `size` bytes of `path` whose first byte
    lies in [start, end). `size` is the size the run planned with, so a file that keeps growing
    while it is read is hashed as it was planned."""
    out: dict[int, bytes] = {}
    first = -(-start // ID_CHUNK)
    with open(path, "rb") as fh:
        for k in range(first, -(-min(end, size) // ID_CHUNK)):
            fh.seek(k * ID_CHUNK)
            data = fh.read(min(ID_CHUNK, size - k * ID_CHUNK))
            if len(data) != min(ID_CHUNK, size - k * ID_CHUNK):
                raise OSError(f"{path}: shorter than the {size} bytes planned (truncated while read?)")
            out[k] = chunk_digest(data)
    return out


def chunk_digest(data: bytes) -> bytes:
    """The digest of one identity chunk's bytes (blake2b-128)."""
    return hashlib.blake2b(data, digest_size=16).digest()


# pcap magic (as read little-endian) -> (byte order, fraction units per second)
_PCAP_MAGIC = {
    0xA1B2C3D4: ("<", 10**6),
    0xA1B23C4D: ("<", 10**9),
    0xD4C3B2A1: (">", 10**6),
    0x4D3CB2A1: (">", 10**9),
}
_PCAPNG_SHB, _PCAPNG_IDB, _PCAPNG_SPB, _PCAPNG_EPB = 0x0A0D0D0A, 1, 3, 6
_HEAD_BYTES = 1 << 20  # how far into a file its first packet is looked for


def first_packet_ns(path, kind: str) -> int | None:
    """The time (ns since 1970) of the first packet record of a capture file (pcap, pcapng, or
    gzip of one), read from its head; None where the head holds none that this can read."""
    return next((ts for _, ts, _ in head_records(path, kind, 64) if ts is not None), None)


def head_records(path, kind: str, limit: int) -> list[tuple[int, int | None, bytes]]:
    """(link type, time in ns or None, captured bytes) of the first `limit` packet records in
    the head of a capture file (pcap, pcapng, or gzip of one), as far as they are whole there:
    what a check of the file's declared link type reads. Empty where the head holds none."""
    try:
        if kind.endswith(".gz"):
            with gzip.open(path, "rb") as gz:
                head = gz.read(_HEAD_BYTES)
        else:
            with open(path, "rb") as fh:
                head = fh.read(_HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return []
    out: list[tuple[int, int | None, bytes]] = []
    walk = _pcapng_records if kind.startswith("pcapng") else _pcap_records
    try:
        for rec in walk(head):
            out.append(rec)
            if len(out) >= limit:
                break
    except struct.error:  # the head ends inside a header: the records before it
        pass
    return out


def holds_no_packets(path, kind: str, size: int) -> bool:
    """Is a (small, plain) capture file its headers alone, no packet record in it: the file of a
    rotation's period that saw no traffic (editcap -i, tcpdump -G)?"""
    return size <= _HEAD_BYTES and not kind.endswith(".gz") and not head_records(path, kind, 1)


def _pcap_records(head: bytes) -> Iterator[tuple[int, int | None, bytes]]:
    # global header (24 bytes): magic u32 @0, link type u32 @20; record header (16 bytes):
    # ts_sec u32 @0, ts_frac u32 @4, caplen u32 @8, origlen u32 @12
    order, per_s = _PCAP_MAGIC.get(struct.unpack_from("<I", head, 0)[0], (None, 0))
    if order is None:
        return
    linktype = struct.unpack_from(order + "I", head, 20)[0]
    at = 24
    while at + 16 <= len(head):
        sec, frac, caplen = struct.unpack_from(order + "III", head, at)
        yield linktype, sec * 10**9 + frac * (10**9 // per_s), head[at + 16 : at + 16 + caplen]
        at += 16 + caplen


def _pcapng_records(head: bytes) -> Iterator[tuple[int, int | None, bytes]]:
    # block: type u32 @0, total length u32 @4, body; SHB body: byte-order magic u32 @8;
    # IDB body: link type u16 @8, snaplen u32 @12, options @16 (if_tsresol: code 9, one byte);
    # EPB body: interface u32 @8, ts high u32 @12, ts low u32 @16, caplen u32 @20, data @28;
    # SPB body: original length u32 @8, data @12 (interface 0, no time)
    order, at, ifaces = "<", 0, []  # ifaces: (link type, ticks per second)
    while at + 12 <= len(head):
        btype = struct.unpack_from(order + "I", head, at)[0]
        if btype == _PCAPNG_SHB:
            order = "<" if struct.unpack_from("<I", head, at + 8)[0] == 0x1A2B3C4D else ">"
            ifaces = []
        blen = struct.unpack_from(order + "I", head, at + 4)[0]
        if blen < 12 or at + blen > len(head):
            return
        if btype == _PCAPNG_IDB:
            lt = struct.unpack_from(order + "H", head, at + 8)[0]
            ifaces.append((lt, _tsresol(head, at + 16, at + blen - 4, order)))
        elif btype == _PCAPNG_EPB:
            iface, hi, lo, caplen = struct.unpack_from(order + "IIII", head, at + 8)
            if iface >= len(ifaces):
                return
            lt, per_s = ifaces[iface]
            yield lt, ((hi << 32) | lo) * 10**9 // per_s, head[at + 28 : min(at + 28 + caplen, at + blen - 4)]
        elif btype == _PCAPNG_SPB and ifaces:
            origlen = struct.unpack_from(order + "I", head, at + 8)[0]
            yield ifaces[0][0], None, head[at + 12 : at + 12 + min(origlen, blen - 16)]
        at += blen


def _tsresol(head: bytes, at: int, end: int, order: str) -> int:
    """Ticks per second of an interface (its if_tsresol option; microseconds without one)."""
    while at + 4 <= end:
        code, n = struct.unpack_from(order + "HH", head, at)
        if code == 0:
            break
        if code == 9 and n >= 1:
            v = head[at + 4]
            return 2 ** (v & 0x7F) if v & 0x80 else 10**v
        at += 4 + (n + 3) // 4 * 4
    return 10**6


def n_chunks(size: int) -> int:
    return -(-size // ID_CHUNK)


def gzip_id(path, size: int | None = None) -> tuple[str | None, bool]:
    """The capture_id of a gzip file's decompressed bytes: the first `size` of them (None: when
    it has fewer), and whether more follow them; or, without `size`, all of them (more: False).
    Raises OSError, EOFError or zlib.error where the compression is damaged."""
    digests: dict[int, bytes] = {}
    total = 0
    with gzip.open(path, "rb") as fh:
        while size is None or total < size:
            want = ID_CHUNK if size is None else min(ID_CHUNK, size - total)
            data = fh.read(want)
            if size is not None and len(data) != want:
                return None, False
            if data:
                digests[len(digests)] = chunk_digest(data)
                total += len(data)
            if len(data) < want:  # the end (without `size`)
                break
        if size is None:
            return combine_id(total, digests), False
        try:
            more = bool(fh.read(1))
        except (EOFError, zlib.error):  # a compression cut short after them: more was written
            more = True
    return combine_id(size, digests), more


def combine_id(size: int, digests: dict[int, bytes], context: str = "") -> str:
    """The capture_id of a file of `size` bytes from the digests of all its chunks. `context`:
    what names the file's rows besides its bytes (a segment's partition and file name, the
    segment readers' `identity`): equal bytes in two partitions are two inputs. An empty context
    (every capture) leaves the id of the bytes alone."""
    missing = [k for k in range(n_chunks(size)) if k not in digests]
    if missing:
        raise ValueError(f"identity chunks {missing[:5]} of {n_chunks(size)} were never hashed")
    h = hashlib.blake2b(digest_size=16, person=_ID_PERSON)
    h.update(struct.pack("<Q", size))
    for k in range(n_chunks(size)):
        h.update(digests[k])
    if context:
        h.update(b"\0context\0" + context.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def capture_id(path, size: int | None = None, context: str = "") -> str:
    """The capture_id of a file, hashed here in one pass (the pipeline hashes in its tasks)."""
    size = os.path.getsize(path) if size is None else size
    return combine_id(size, chunk_digests(path, 0, size, size), context)


@dataclass(frozen=True)
class Split:
    """A byte range [start, end) of one capture file, read by one task.

    A record belongs to the split whose range holds its first byte. gzip files are never split.
    """

    path: str
    capture_id: str
    file_index: int
    kind: str
    start: int
    end: int


def plan_splits(path, file_index: int, capture_id: str, kind: str, split_size: int) -> list[Split]:
    """Cut a file into byte ranges of `split_size` (the last one takes the remainder).

    A gzip-compressed capture (kind ending in '.gz') is one split covering the whole file.
    """
    size = os.path.getsize(path)
    p = os.fspath(path)
    if kind.endswith(".gz") or split_size <= 0 or size <= split_size:
        return [Split(p, capture_id, file_index, kind, 0, size)]
    out = []
    start = 0
    while start < size:
        end = min(size, start + split_size)
        out.append(Split(p, capture_id, file_index, kind, start, end))
        start = end
    return out


class FrameNumbers:
    """Frame numbers as Wireshark counts them (the 1-based index of a packet record in its file:
    pcap records; pcapng EPB, SPB and PB blocks, no other block) from the reader's per-split
    numbers (tables.PACKETS record_no): a split's first record follows every record of the
    file's earlier splits, and a packet's split is the last one whose records begin at or before
    its record's first byte (a split reads on past its end to where the next one's records begin).

    `counts[file_index][FrameNumbers.key(...)]` (where the split's records begin: its stats'
    first_at) = the packet records the split read; splits that read none are left out. Only known once every split of
    the file was read (the pipeline's read tasks write them beside the identity digests).
    """

    @staticmethod
    def key(start: int, records: int | None, first_at: int | None) -> int | None:
        """The key of a split's count in `counts` (split `start`, its stats' `records` and
        `first_at`): where its records begin; None for a split that read none (it marks no
        boundary: it may lie inside the records the split before read on to)."""
        if not records:
            return None
        return start if first_at is None else first_at

    def __init__(self, counts: dict[int, dict[int, int]]) -> None:
        self._splits: dict[int, tuple] = {}  # file_index -> (split starts, records before each)
        for fi, per_start in counts.items():
            starts = sorted(per_start)
            before, n = [], 0
            for s in starts:
                before.append(n)
                n += per_start[s]
            self._splits[fi] = (starts, before)

    def add(self, file_index: pa.Array, rec_offset: pa.Array, record_no: pa.Array) -> pa.Array:
        """The frame numbers (int64) of a batch's packets; null where the number is unknown (a
        file whose split counts are missing, or a counters row). A batch's packets of one file
        come from few splits (the decode stage sorts by connection and time): a step per split
        its record offsets span."""
        base = pa.scalar(0, pa.int64())
        files = pc.unique(file_index).to_pylist()
        for f in files:
            sp = self._splits.get(f)
            mine = pc.equal(file_index, f) if len(files) > 1 else None
            if sp is None:
                record_no = (
                    pc.if_else(mine, pa.scalar(None, pa.int64()), record_no)
                    if mine is not None
                    else pa.nulls(len(record_no), pa.int64())
                )
                continue
            starts, before = sp
            if len(starts) == 1:
                continue
            span = pc.min_max(rec_offset if mine is None else rec_offset.filter(mine))
            lo, hi = span["min"].as_py(), span["max"].as_py()
            if lo is None:
                continue
            for j in range(max(bisect_right(starts, lo) - 1, 0), bisect_right(starts, hi)):
                at = pc.greater_equal(rec_offset, starts[j])
                if mine is not None:
                    at = pc.and_(at, mine)
                base = pc.if_else(at, pa.scalar(before[j], pa.int64()), base)
        return pc.add(record_no, base)
