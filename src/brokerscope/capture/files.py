"""Capture files as a whole: what kind a file is, its stable id, and how it is cut into splits."""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import zlib
from dataclasses import dataclass

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
_HEAD = 1024 * 1024  # bytes hashed at each end of a file for its id


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


def capture_id(path) -> str:
    """Stable id of an input file: hex blake2b-128 over (size, first 1 MiB, last 1 MiB).

    Reads at most 2 MiB whatever the file size, so it is cheap on huge files; a file renamed or
    copied keeps its id.
    """
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        h.update(struct.pack("<Q", size))
        h.update(fh.read(_HEAD))
        if size > _HEAD:
            fh.seek(max(_HEAD, size - _HEAD))
            h.update(fh.read(_HEAD))
    return h.hexdigest()


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
