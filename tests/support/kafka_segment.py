"""A Kafka log segment as a broker writes it, from record batches (tests of the segment decoder
and of journeys' stored times)."""

from __future__ import annotations

import struct
from pathlib import Path


def _last_and_max_ts(batch: bytes) -> tuple[int, int]:
    base_offset = struct.unpack_from(">q", batch, 0)[0]
    last_delta, _bt, max_ts = struct.unpack_from(">iqq", batch, 23)
    return base_offset + last_delta, max_ts


def write_segment(d: Path, batches: list[bytes], base: int, index=True, tail: bytes = b"", prealloc=4):
    """A segment as a broker writes it: the log, an offset index entry and a time index entry per
    batch (Kafka writes one per index.interval.bytes; one per batch is the dense case), plus
    preallocated zero entries."""
    d.mkdir(parents=True, exist_ok=True)
    stem = d / f"{base:020d}"
    log = b"".join(batches) + tail
    (stem.with_suffix(".log")).write_bytes(log)
    if index:
        idx, tidx, pos, top = b"", b"", 0, -1
        for b in batches:
            last, max_ts = _last_and_max_ts(b)
            idx += struct.pack(">ii", last - base, pos)
            if max_ts > top:  # the time index only grows
                tidx += struct.pack(">qi", max_ts, last - base)
                top = max_ts
            pos += len(b)
        (stem.with_suffix(".index")).write_bytes(idx + b"\0" * 8 * prealloc)
        (stem.with_suffix(".timeindex")).write_bytes(tidx + b"\0" * 12 * prealloc)
    return str(stem.with_suffix(".log"))
