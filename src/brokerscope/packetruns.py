"""Packets through the shuffle as connection runs: one row per run of a connection's packets.

Moving one row per packet through the shuffle between the read and the decode stage costs
Spark about 5.5 us of JVM time per packet (Arrow to rows, the shuffle write and read, the sort,
rows back to Arrow; docs/benchmarks.md), more than the driver's Python spends on an in-order
packet. So a read task sorts each batch of packets it read by `streams.SORT_COLS` and gives one
row per run of one connection's packets (`RUNS`): the run's first packet's sort columns, its
packets' fixed-width fields packed as `RECORD`s, and the payload bytes carried inline
(`payloads`: the packets whose payload is not an offset into the file). Spark partitions and
sorts the runs as it would the packets; a decode task unpacks them (`unpack`) into the
`tables.PACKETS` batches, without capture_id, that `streams.StreamDriver` reads, in the order
of every packet sorted one by one: the runs of one connection whose packets interleave (two
files, or two batches, whose times overlap) are merged, the others follow one another as they
are.

A stats row (a split's counters, capture.reader) is a run of its own, with a null 4-tuple, and
unpacks as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import tables
from .capture.decode import SplitOrder
from .streams import SORT_COLS

# the columns that name a run's connection (SORT_COLS then place it by its first packet)
KEY_COLS = tuple(SORT_COLS[:4])

# one packet's fixed-width fields in a run's `records` (little-endian, packed): the PACKETS
# columns but the connection's and the payload's bytes; `inline` is the length of the packet's
# bytes in the run's `payloads` (-1: its payload is null); `valid` has bit i set when the i-th
# of NULLABLE is not null
RECORD = np.dtype(
    [
        ("ts_ns", "<i8"),
        ("order_ns", "<i8"),
        ("rec_offset", "<i8"),
        ("record_no", "<i8"),
        ("seq", "<i8"),
        ("ack", "<i8"),
        ("payload_at", "<i8"),
        ("file_index", "<i4"),
        ("flags", "<i4"),
        ("window", "<i4"),
        ("wire_len", "<i4"),
        ("payload_len", "<i4"),
        ("inline", "<i4"),
        ("valid", "<u2"),
        ("from_lo", "u1"),
        ("snap_truncated", "u1"),
    ]
)
NULLABLE = tuple(name for name in RECORD.names if name not in ("inline", "valid"))
_BIT = {name: 1 << i for i, name in enumerate(NULLABLE)}

# what a decode task reads: the packets without capture_id (file_index names the capture)
UNPACKED = pa.schema([f for f in tables.PACKETS if f.name != "capture_id"])
RUNS = pa.schema(
    [tables.PACKETS.field(c) for c in SORT_COLS]
    + [pa.field("records", pa.binary()), pa.field("payloads", pa.binary())]
)


# packets packed per RUNS batch: their records stay within int32 offsets
MAX_PACKED = 1 << 20


def pack(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """A batch of PACKETS (capture_id, if there, is dropped) as RUNS rows: its packets sorted,
    one row per run of consecutive packets of one connection."""
    for at in range(0, batch.num_rows, MAX_PACKED):
        yield _pack(batch.slice(at, MAX_PACKED))


def _pack(batch: pa.RecordBatch) -> pa.RecordBatch:
    n = batch.num_rows
    b = batch.take(pc.sort_indices(batch, [(c, "ascending", "at_start") for c in SORT_COLS]))
    rec = np.zeros(n, RECORD)
    valid = np.zeros(n, np.uint16)
    for name in NULLABLE:
        col = b.column(name)
        if col.null_count:
            valid |= np.where(col.is_valid().to_numpy(zero_copy_only=False), _BIT[name], 0).astype(np.uint16)
            col = col.fill_null(False if pa.types.is_boolean(col.type) else 0)
        else:
            valid |= _BIT[name]
        rec[name] = col.to_numpy(zero_copy_only=False)
    rec["valid"] = valid
    payload = b.column("payload")
    lengths = pc.binary_length(payload).fill_null(-1).to_numpy(zero_copy_only=False)
    rec["inline"] = lengths
    # a run starts at the first packet and at every packet of another connection than the one before
    change = np.ones(n, bool)
    if n > 1:
        same = np.ones(n - 1, bool)
        for c in KEY_COLS:
            col = b.column(c)
            a, z = col.slice(1), col.slice(0, n - 1)
            eq = pc.equal(a, z).fill_null(False).to_numpy(zero_copy_only=False)
            both_null = (a.is_null().to_numpy(zero_copy_only=False)) & (
                z.is_null().to_numpy(zero_copy_only=False)
            )
            same &= eq | both_null
        change[1:] = ~same
    starts = np.flatnonzero(change)
    bounds = np.append(starts, n)
    w = RECORD.itemsize
    records = pa.Array.from_buffers(
        pa.binary(),
        len(starts),
        [None, pa.py_buffer((bounds * w).astype(np.int32)), pa.py_buffer(rec.tobytes())],
    )
    ends = np.concatenate([[0], np.cumsum(np.maximum(lengths, 0))])
    if ends[-1]:
        payloads = pa.Array.from_buffers(
            pa.binary(),
            len(starts),
            [None, pa.py_buffer(ends[bounds].astype(np.int32)), _values_buffer(payload)],
        )
    else:
        payloads = pa.nulls(len(starts), pa.binary())
    firsts = b.take(pa.array(starts))
    return pa.RecordBatch.from_arrays(
        [firsts.column(c) for c in SORT_COLS] + [records, payloads], schema=RUNS
    )


def _offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets of a binary array (large_binary: Spark's useLargeVarTypes)."""
    kind = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    return np.frombuffer(arr.buffers()[1], kind)[arr.offset : arr.offset + len(arr) + 1]


def _values_buffer(arr: pa.Array) -> pa.Buffer:
    """A binary array's value bytes, one after another (nulls hold none)."""
    offsets = _offsets(arr)
    data = arr.buffers()[2]
    if data is None:
        return pa.py_buffer(b"")
    return data[int(offsets[0]) : int(offsets[-1])]


def unpack(
    batches: Iterable[pa.RecordBatch], max_rows: int = 8192, order: SplitOrder | None = None
) -> Iterator[pa.RecordBatch]:
    """The packets of RUNS batches sorted by SORT_COLS (as Spark gives them), as UNPACKED batches
    of at most `max_rows` rows, in the order of every packet sorted by SORT_COLS.

    `order`: the order_ns of packets read in a file's later splits raised (capture.SplitOrder):
    a run that rose waits, held, for the runs that sort before it now (a connection's runs come
    in the order of their first packets' keys as read, and raising only puts a packet later).

    A connection's runs arrive in the order of their first packets. While the next run starts
    after every packet held, what is held goes out as it is; when it starts before some (two
    files, or two splits, whose times overlap), the held packets that sort before its first go
    out merged, and only the rest is held with it: memory holds the overlap, not the connection.
    A run that is the whole of its connection in a batch (neither the run before nor the one
    after is of it) goes out with its neighbours of the same kind, in one piece."""
    out = _Batches(max_rows)
    held = _Held()
    for b in batches:
        n = b.num_rows
        if not n:
            continue
        cols = [b.column(c).to_pylist() for c in KEY_COLS]
        keys = list(zip(*cols))
        recs, pays, bounds = _records(b)
        as_read = recs  # the first packets' keys as Spark sorted the runs by them
        if order:
            recs, pays = _raised(recs, pays, bounds, order)
        # a run alone: of another connection than the runs beside it (the batch's last run may
        # go on in the next batch), or a stats row
        alone = [
            k[0] is None or (k != (keys[j - 1] if j else held.key) and j + 1 < n and k != keys[j + 1])
            for j, k in enumerate(keys)
        ]
        j = 0
        while j < n:
            if alone[j]:
                e = j
                while e + 1 < n and alone[e + 1]:
                    e += 1
                yield from out.add([held.key], None, *held.all())
                held = _Held()
                a, z = bounds[j], bounds[e + 1]
                idx = np.repeat(np.arange(e + 1 - j, dtype=np.int32), np.diff(bounds[j : e + 2]))
                yield from out.add(keys[j : e + 1], idx, recs[a:z], pays.slice(a, z - a))
                j = e + 1
                continue
            k, a, z = keys[j], bounds[j], bounds[j + 1]
            rec, pay = recs[a:z], pays.slice(a, z - a)
            if k != held.key:
                yield from out.add([held.key], None, *held.all())
                held = _Held(k)
            else:
                yield from out.add([k], None, *held.before(_order_key(as_read[a])))
            held.add(rec, pay)
            j += 1
    yield from out.add([held.key], None, *held.all())
    yield from out.flush()


def _records(b: pa.RecordBatch) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """Every packet of a RUNS batch: their records, their payloads, and where each run begins
    among them (and, last, where the last run ends)."""
    records = b.column("records")
    offsets = _offsets(records)
    w = RECORD.itemsize
    raw = records.buffers()[2]
    recs = np.frombuffer(raw, RECORD, count=int(offsets[-1] - offsets[0]) // w, offset=int(offsets[0]))
    bounds = (offsets - offsets[0]) // w
    payloads = b.column("payloads")
    data = _values_buffer(payloads) if payloads.null_count < len(payloads) else None
    return recs, _payload_array(recs, data), bounds


def _raised(
    recs: np.ndarray, pays: pa.Array, bounds: np.ndarray, order: SplitOrder
) -> tuple[np.ndarray, pa.Array]:
    """A RUNS batch's records with order_ns raised by `order`, each run sorted again by its
    keys (as they are: nothing rose)."""
    new = order.raised(recs["file_index"], recs["rec_offset"], recs["order_ns"])
    if new is None:
        return recs, pays
    recs = recs.copy()
    recs["order_ns"] = new
    run = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    perm = np.lexsort((recs["rec_offset"], recs["file_index"], recs["order_ns"], run))
    if (perm[1:] < perm[:-1]).any():
        recs, pays = recs[perm], pays.take(pa.array(perm))
    return recs, pays


def _order_key(r) -> tuple:
    """A record's place among its connection's packets (SORT_COLS after the 4-tuple)."""
    return (int(r["order_ns"]), int(r["file_index"]), int(r["rec_offset"]))


class _Held:
    """Packets of one connection not handed out yet: runs that may interleave with the next."""

    def __init__(self, key: tuple | None = None):
        self.key = key
        self.recs: list[np.ndarray] = []
        self.pays: list[pa.Array] = []
        self.high: tuple | None = None  # the largest order key held

    def add(self, rec: np.ndarray, pay: pa.Array) -> None:
        self.recs.append(rec)
        self.pays.append(pay)
        last = _order_key(rec[-1])  # a run's packets are sorted: its last is its largest
        self.high = last if self.high is None or last > self.high else self.high

    def all(self) -> tuple[np.ndarray | None, pa.Array | None]:
        """Everything held, merged in order; nothing is held after."""
        if not self.recs:
            return None, None
        recs = self.recs[0] if len(self.recs) == 1 else np.concatenate(self.recs)
        pay = self.pays[0] if len(self.pays) == 1 else pa.concat_arrays(self.pays)
        if len(self.recs) > 1:  # runs whose packets interleave (files or splits overlapping in time)
            order = np.lexsort((recs["rec_offset"], recs["file_index"], recs["order_ns"]))
            recs, pay = recs[order], pay.take(pa.array(order))
        self.recs, self.pays, self.high = [], [], None
        return recs, pay

    def before(self, first: tuple) -> tuple[np.ndarray | None, pa.Array | None]:
        """The packets held that sort before `first` (the next run's first packet), merged in
        order; those after it stay held."""
        if self.high is None or self.high < first:
            return self.all()
        recs, pay = self.all()
        ts, fi, ro = recs["order_ns"], recs["file_index"], recs["rec_offset"]
        t, f, r = first
        k = int(np.count_nonzero((ts < t) | ((ts == t) & ((fi < f) | ((fi == f) & (ro < r))))))
        if k < len(recs):  # sorted: those before `first` are a prefix
            self.add(recs[k:], pay.slice(k))
        return (recs[:k], pay.slice(0, k)) if k else (None, None)


class _Batches:
    """UNPACKED batches of the packets of runs, several connections to a batch."""

    def __init__(self, max_rows: int):
        self.max_rows = max_rows
        self.pieces: list[tuple] = []  # (connections, each packet's among them, records, payloads)
        self.rows = 0

    def add(
        self, keys: list, idx: np.ndarray | None, recs: np.ndarray | None, payload: pa.Array | None
    ) -> Iterator[pa.RecordBatch]:
        """Packets, in order, after those added before: packet i of connection keys[idx[i]]
        (idx None: all of keys[0])."""
        at = 0
        n = 0 if recs is None else len(recs)
        while at < n:
            take = min(n - at, self.max_rows - self.rows)
            part = None if idx is None else idx[at : at + take]
            self.pieces.append((keys, part, recs[at : at + take], payload.slice(at, take)))
            self.rows += take
            at += take
            if self.rows >= self.max_rows:
                yield from self.flush()

    def flush(self) -> Iterator[pa.RecordBatch]:
        if self.pieces:
            yield _batch(self.pieces)
        self.pieces, self.rows = [], 0


def _payload_array(rec: np.ndarray, data: pa.Buffer | None) -> pa.Array:
    """The payloads of packets `rec` (of one or more runs): `data` cut by their inline lengths
    (-1: null)."""
    inline = rec["inline"]
    offsets = np.concatenate([[0], np.cumsum(np.maximum(inline, 0))]).astype(np.int32)
    nulls = inline < 0
    validity = pa.array(~nulls).buffers()[1] if nulls.any() else None
    return pa.Array.from_buffers(
        pa.binary(),
        len(rec),
        [validity, pa.py_buffer(offsets), data if data is not None else pa.py_buffer(b"")],
        null_count=int(nulls.sum()),
    )


def _batch(pieces: list[tuple]) -> pa.RecordBatch:
    """One UNPACKED batch of pieces (connections, each packet's among them, records, payloads)."""
    rec = pieces[0][2] if len(pieces) == 1 else np.concatenate([p[2] for p in pieces])
    valid = rec["valid"]
    cols = []
    for f in UNPACKED:
        name = f.name
        if name in KEY_COLS:
            j = KEY_COLS.index(name)
            parts = []
            for keys, idx, recs, _pay in pieces:
                values = pa.array([k[j] for k in keys], f.type)
                parts.append(values.take(pa.array(idx if idx is not None else np.zeros(len(recs), np.int32))))
            cols.append(parts[0] if len(parts) == 1 else pa.concat_arrays(parts))
        elif name == "payload":
            cols.append(pieces[0][3] if len(pieces) == 1 else pa.concat_arrays([p[3] for p in pieces]))
        else:
            values = rec[name].astype(bool) if pa.types.is_boolean(f.type) else rec[name]
            ok = (valid & _BIT[name]) != 0
            cols.append(pa.array(values, f.type) if ok.all() else pa.array(values, f.type, mask=~ok))
    return pa.RecordBatch.from_arrays(cols, schema=UNPACKED)
