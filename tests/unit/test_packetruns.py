"""Packets through the shuffle as connection runs: what a decode task unpacks is every packet,
in the order of all packets sorted one by one, whatever the batches, the runs' interleaving, the
stats rows and the null fields."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from brokerscope import packetruns, tables
from brokerscope.capture import capture_id, identify, plan_splits, read_split
from brokerscope.streams import SORT_COLS
from tests.conftest import CAPTURES, SAMPLE_DATA

CAPS = [
    SAMPLE_DATA / "kafka" / "lz4.pcap",
    SAMPLE_DATA / "public" / "iggy-rs.pcapng",
    CAPTURES / "ndpi" / "kafka.pcapng",
]


def _read(path, file_index: int, refs: bool, batch: int) -> list[pa.RecordBatch]:
    out = []
    for sp in plan_splits(str(path), file_index, capture_id(str(path)), identify(str(path)), 0):
        out.extend(read_split(sp, batch, payload_refs=refs))
    return out


def _sorted(t: pa.Table) -> pa.Table:
    return t.take(pc.sort_indices(t, [(c, "ascending", "at_start") for c in SORT_COLS]))


def _through_runs(
    batches: list[pa.RecordBatch], rng: random.Random, max_rows: int, chunk: int = 50
) -> pa.Table:
    """Pack each batch, sort the runs as the shuffle does, hand them over in random chunks of up
    to `chunk` runs."""
    runs = pa.Table.from_batches([r for b in batches for r in packetruns.pack(b)], schema=packetruns.RUNS)
    runs = _sorted(runs).combine_chunks()
    chunks, at = [], 0
    while at < runs.num_rows:
        k = rng.randint(1, chunk)
        chunks.append(runs.slice(at, k).to_batches()[0])
        at += k
    got = list(packetruns.unpack(chunks, max_rows))
    assert all(b.num_rows <= max_rows for b in got)
    return pa.Table.from_batches(got, schema=packetruns.UNPACKED)


def _want(batches: list[pa.RecordBatch]) -> pa.Table:
    return _sorted(pa.Table.from_batches(batches, schema=tables.PACKETS).drop_columns(["capture_id"]))


@pytest.mark.parametrize("refs", [True, False], ids=["offsets", "inline"])
def test_unpacked_runs_are_the_packets_sorted_one_by_one(refs):
    rng = random.Random(7)
    batches = [b for i, cap in enumerate(CAPS) for b in _read(cap, i, refs, rng.choice((7, 50, 1000)))]
    want = _want(batches)
    assert want.column("lo_ip").null_count > 0  # the splits' stats rows come along
    assert (want.column("payload").null_count > 0) == refs
    got = _through_runs(batches, rng, 64)
    assert got.equals(want)


def _second_file(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """The same packets as read from the next file (a second vantage point at the same times)."""
    i = batches[0].schema.get_field_index("file_index")
    return [b.set_column(i, "file_index", pc.add(b.column(i), pa.scalar(1, pa.int32()))) for b in batches]


def test_runs_whose_packets_interleave_are_merged():
    """The same packets as two files (two vantage points at the same times), and batches whose
    packets go back in time: a connection's runs overlap, and their packets are merged."""
    rng = random.Random(3)
    one = _read(CAPS[0], 0, True, 9)
    two = _second_file(one)
    back = []
    for b in one:  # every other batch 1 ms earlier than it was: before the batch read ahead of it
        i = b.schema.get_field_index("ts_ns")
        back.append(
            b.set_column(i, "ts_ns", pc.subtract(b.column("ts_ns"), 1_000_000)) if rng.random() < 0.5 else b
        )
    for batches in (one + two, back):
        runs = [r for b in batches for r in packetruns.pack(b)]
        assert sum(r.num_rows for r in runs) < sum(b.num_rows for b in batches) // 2  # runs, not packets
        got = _through_runs(batches, rng, 5)
        assert got.equals(_want(batches))


def test_null_fields_and_empty_payloads_round_trip():
    b = _read(CAPS[2], 0, False, 1000)[0]
    n = b.num_rows
    nulls = pa.array(np.arange(n) % 3 == 0)
    for name in ("record_no", "seq", "window", "snap_truncated", "payload_at"):
        i = b.schema.get_field_index(name)
        b = b.set_column(
            i, name, pc.if_else(nulls, pa.scalar(None, b.schema.field(name).type), b.column(name))
        )
    i = b.schema.get_field_index("payload")
    b = b.set_column(
        i,
        "payload",
        pc.if_else(pa.array(np.arange(n) % 4 == 1), pa.scalar(None, pa.binary()), b.column("payload")),
    )
    got = _through_runs([b], random.Random(1), 1000)
    want = _want([b])
    assert got.equals(want)
    assert got.column("record_no").null_count == want.column("record_no").null_count > 0


def test_overlapping_runs_are_handed_out_as_they_become_safe():
    """Two files holding the same connection at the same times: every run overlaps the next, and
    the packets that sort before the next run's first still go out at once (memory holds the
    overlap, not the connection)."""
    packets = pa.Table.from_batches(_read(CAPS[0], 0, True, 9), schema=tables.PACKETS)
    ports = pc.value_counts(packets.column("lo_port")).to_pylist()
    busiest = max((p for p in ports if p["values"] is not None), key=lambda p: p["counts"])["values"]
    conn = packets.filter(pc.equal(packets.column("lo_port"), busiest))
    assert len(set(zip(*(conn.column(c).to_pylist() for c in packetruns.KEY_COLS)))) == 1
    one = conn.to_batches(max_chunksize=5)
    two = _second_file(one)
    runs = pa.Table.from_batches([r for b in one + two for r in packetruns.pack(b)], schema=packetruns.RUNS)
    runs = _sorted(runs).combine_chunks().to_batches(max_chunksize=1)
    assert len(runs) > 8
    taken = 0

    def given():
        nonlocal taken
        for b in runs:
            taken += 1
            yield b

    out = packetruns.unpack(given(), max_rows=4)
    assert next(out).num_rows == 4
    assert taken < len(runs) // 2
    rest = pa.Table.from_batches(list(out), schema=packetruns.UNPACKED)
    assert rest.num_rows == 2 * conn.num_rows - 4


def _synthetic(rng: random.Random, n: int, conns: int) -> pa.RecordBatch:
    """`n` packets of `conns` connections at random times in two files, some payloads inline."""
    port = [rng.randrange(conns) for _ in range(n)]
    values = {
        "capture_id": ["c"] * n,
        "file_index": [rng.randrange(2) for _ in range(n)],
        "rec_offset": list(range(n)),
        "record_no": [i + 1 for i in range(n)],
        "ts_ns": [rng.randrange(1_000) for _ in range(n)],
        "lo_ip": ["10.0.0.1"] * n,
        "lo_port": [1024 + p for p in port],
        "hi_ip": ["10.0.0.2" if p % 3 else "10.0.0.3" for p in port],
        "hi_port": [9092] * n,
        "from_lo": [rng.random() < 0.5 for _ in range(n)],
        "seq": [rng.randrange(1 << 32) for _ in range(n)],
        "ack": [rng.randrange(1 << 32) for _ in range(n)],
        "flags": [16] * n,
        "window": [rng.randrange(65536) for _ in range(n)],
        "wire_len": [rng.randrange(60, 1500) for _ in range(n)],
        "payload_len": [rng.randrange(0, 9) for _ in range(n)],
        "snap_truncated": [False] * n,
    }
    inline = [rng.random() < 0.3 for _ in range(n)]
    values["payload"] = [
        bytes(rng.randrange(256) for _ in range(values["payload_len"][i])) if inline[i] else None
        for i in range(n)
    ]
    values["payload_at"] = [None if inline[i] else rng.randrange(1 << 40) for i in range(n)]
    # the sort key: the time, or a later one (a file whose clock stepped back)
    values["order_ns"] = [t + (rng.randrange(50) if rng.random() < 0.2 else 0) for t in values["ts_ns"]]
    return pa.RecordBatch.from_pydict(values, schema=tables.PACKETS)


@pytest.mark.parametrize("conns", [3, 40, 5_000], ids=["few", "some", "each-its-own"])
def test_random_packets_of_few_or_many_connections(conns):
    """Connections of many runs that interleave, and connections of one packet each (a scan):
    the same packets in the same order as sorted one by one."""
    rng = random.Random(conns)
    whole = _synthetic(rng, 3_000, conns)
    batches, at = [], 0
    while at < whole.num_rows:
        k = rng.randint(1, 400)
        batches.append(whole.slice(at, k))
        at += k
    for chunk in (2, 50):  # chunks that end between the runs of one connection, or not
        got = _through_runs(batches, rng, rng.choice((7, 100, 5_000)), chunk)
        assert got.equals(_want(batches))


def test_runs_given_as_large_binary_unpack_the_same():
    """Spark hands binary columns over as large_binary when asked to (useLargeVarTypes)."""
    batches = _read(CAPS[0], 0, False, 50)
    runs = pa.Table.from_batches([r for b in batches for r in packetruns.pack(b)], schema=packetruns.RUNS)
    runs = _sorted(runs).combine_chunks()
    large = runs.cast(
        pa.schema([f.with_type(pa.large_binary()) if f.type == pa.binary() else f for f in runs.schema])
    )
    got = pa.Table.from_batches(
        list(packetruns.unpack(large.to_batches(max_chunksize=10))), schema=packetruns.UNPACKED
    )
    assert got.equals(_want(batches))
