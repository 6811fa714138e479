"""Fuzz targets: one function per target, each taking the fuzzer's `data: bytes`.

Every target turns arbitrary bytes into calls of real brokerscope code and checks invariants; a
violated invariant raises `FuzzFailure`, any other exception is a finding as it stands. Nothing
here imports atheris, so the found inputs replay in the plain test suite
(tests/unit/test_fuzz_found.py).

Input encodings (the seed builder `tests/fuzz/seeds.py` writes them with the `encode_*` helpers):

- decoders (kafka, pulsar, iggy, tubemq): a config byte (see `_decoder_context`), then records
  `[op u8][arg u16 BE][arg bytes if data]`: op bit0 = direction (0 c2s, 1 s2c), bit1 = gap (arg
  is the gap size, scaled by `4 ** (op >> 4)`), bits2-3 = time step before the call.
- segment readers: a config byte (file name, split size, limits), `[len u16 BE]` per companion
  file (kafka: .index, .timeindex; iggy: .index; 0 = absent), the companion files, then the `.log`.
- capture: a config byte (gzip, split size, fragment and batch limits), then the file bytes.
- tcp: a config byte (reorder and idle limits), then 13-byte packet records (see `_tcp_packets`).
- tls: a config byte (bit0 no key log, bit1 midstream), then records of the decoder encoding: the
  ciphertext of each direction with its cuts and gaps, fed to one `TlsSession`.
- tls_capture: a config byte (bit0 no key log, bits1-3 split size), then a capture file decoded
  by the stream driver with the TLS test key logs.
- iggy_batch: a config byte (bits0-2 bytes before the batch record, bit3 no expected count, bits4-7
  the expected count), then bytes read as an Iggy batch record by the compiled walk (_batch.c)
  and by the plain-Python reader.
- tubemq_rpc: a config byte (bit0: a frame's blocks and the details JSON _rpc.read writes of it;
  else bit1: a method's body and its details JSON, bits3-7 which of the built-in messages, or
  with bit2 a message's data, bits3-7 its flag; else bit2: the messages of a getMessagesC2B
  response (bit3) or a sendMessageP2B request, their columns; else an RPC envelope), then bytes
  read by the compiled TubeMQ reader (_rpc.c) and by the plain-Python one (protobuf, content.py,
  to_json).
- tubemq_exchanges: the decoder encoding (as tubemq), fed to a TubeMQ conversation with the
  compiled sendMessageP2B path (_rpc.exchanges) and to one without: every table's rows equal, and
  each gathered block's Arrow columns (_rpc.transpose) converting as their values do.
- capture_compiled: a config byte (bit0 gzip, bits1-2 split size, bit3 payload offsets, bit4 one
  row per batch, bits5-6 the ingest filter: none, broker ports, loopback hosts, a time window from
  the capture's middle), then a pcap / pcapng file read by the compiled record walk
  (capture/_walk.c) and by the Python reader alone: every batch equal.
- pulsar_batch: a config byte (bits0-5 num_messages_in_batch, bits6-7 the batch's sequence_id,
  PULSAR_BASE_SEQUENCES), then an uncompressed batch payload read by the compiled walk (_batch.c)
  and by the plain-Python one (split_batch).
- kafka_body: 4 bytes naming a decode plan (api key u16 BE modulo 128, version, bit0 of the
  fourth: a response), then a message body read by the compiled reader (_body.c) and by
  schema.py's closures; of a body that decodes, the compiled summary and details copy against
  the Python ones (kafka_body_plan).
- details_json: bytes read as a Python value (`details_value`: a tag byte per value, then its
  bytes), written by base.to_json (the compiled writer, _details.c) and by json's encoder
  (to_json_py): the same text, or the same error.
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import struct
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from functools import partial

from brokerscope import tables
from brokerscope.protocols import base
from brokerscope.tcp import reassembly

T0 = 1_700_000_000_000_000_000  # capture time of the first call, ns
DT = (1_000, 0, 1_000_000, 2_000_000_000)  # time steps between calls (op bits 2-3)
NONNEG = {"latencies": "latency_us", "acks": "ack_latency_us"}


class FuzzFailure(AssertionError):
    """An invariant did not hold. `kind` is stable across inputs (it names the bug class)."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


def check(ok: object, kind: str, detail: str = "") -> None:
    if not ok:
        raise FuzzFailure(kind, detail)


# ---------------------------------------------------------------------------------------------
# rows


# the decode_error of a row a decoder wrote after catching an unexpected exception
INTERNAL = re.compile(r"(internal|decoder error|inference failed)\b")


def check_rows(rows: Iterable, shared: dict) -> dict[str, int]:
    """Every row is (table, dict) or (table, Block); no negative latency; each table's rows conform (as the pipeline
    does it: the driver's shared columns added, side-channel rows left out). Returns row counts."""
    by_table: dict[str, list[dict]] = defaultdict(list)
    for item in _spread(rows):
        check(isinstance(item, tuple) and len(item) == 2, "row is not a (table, dict) pair", repr(item)[:200])
        table, row = item
        check(isinstance(row, dict), "row is not a dict", f"{table}: {type(row).__name__}")
        if table == base.TOPIC_NAMES:
            check({"topic_id", "topic"} <= row.keys(), "topic-names row without topic_id/topic", repr(row))
            continue
        check(table in tables.DECODED_TABLES, "row of an unknown table", repr(table))
        err = row.get("decode_error") or ""
        # a decoder that caught an exception of its own still has a bug: the row says so
        check(not INTERNAL.match(err), "a decoder caught an internal error", err[:300])
        by_table[table].append({**row, **shared})
    for table, rs in by_table.items():
        try:
            batch = tables.conform(table, rs)
        except Exception as e:
            raise FuzzFailure(f"conform({table}) raised {type(e).__name__}", str(e)[:300]) from e
        col = NONNEG.get(table)
        if col is not None:
            _check_non_negative(rs, batch, col)
    return {t: len(rs) for t, rs in by_table.items()}


def _spread(rows: Iterable) -> Iterator:
    """Rows with each `tables.Block` spread into its dict rows (conform takes both alike)."""
    for item in rows:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], tables.Block):
            check(item[1].n == len(item[1].rows()), "block rows do not match its length", repr(item)[:200])
            yield from ((item[0], r) for r in item[1].rows())
        else:
            yield item


def _check_non_negative(rows: list[dict], batch, col: str) -> None:
    """No negative duration is written; one the decoder gave (a response whose first packet was
    captured before its request's last) is a null with an anomaly naming the column."""
    written = batch.column(col).to_pylist()
    anomalies = batch.column("anomalies").to_pylist()
    for row, w, an in zip(rows, written, anomalies):
        check(w is None or w >= 0, f"negative {col} written", f"{w} in {row}"[:300])
        given = row.get(col)
        if given is not None and given < 0:
            check(w is None, f"negative {col} kept", repr(row)[:300])
            check(any(a.startswith(col) for a in an or ()), f"negative {col} without an anomaly", repr(an))


# ---------------------------------------------------------------------------------------------
# protocol decoders

_MODES = ("keep", "truncate", "hash", "drop")


def _decoder_context(cfg: int) -> tuple[base.Context, bool]:
    """(context, midstream) from the config byte: bit0 midstream, bits1-2 payload policy, bit3 a
    4 KiB frame limit, bit4 a 4 KiB decompression limit, bit5 policy on keys, bit6 16-byte raw."""
    ctx = base.Context(
        max_frame_bytes=4096 if cfg & 8 else base.Context.max_frame_bytes,
        max_decompressed_bytes=4096 if cfg & 16 else base.Context.max_decompressed_bytes,
        max_raw_bytes=16 if cfg & 64 else base.Context.max_raw_bytes,
        payload=base.PayloadPolicy(
            mode=_MODES[(cfg >> 1) & 3], truncate_bytes=8, apply_to_keys=bool(cfg & 32)
        ),
    )
    return ctx, bool(cfg & 1)


def stream_ops(data: bytes) -> Iterator[tuple[str, str, int, bytes | int]]:
    """(kind "data"/"gap", direction, time step, bytes or gap size) from decoder-encoded records."""
    pos, n = 0, len(data)
    while pos + 3 <= n:
        op = data[pos]
        (arg,) = struct.unpack_from(">H", data, pos + 1)
        pos += 3
        direction = base.S2C if op & 1 else base.C2S
        dt = DT[(op >> 2) & 3]
        if op & 2:
            yield "gap", direction, dt, max(1, arg << (2 * (op >> 4)))
        else:
            chunk = data[pos : pos + arg]
            pos += arg
            yield "data", direction, dt, chunk


def encode_stream(events: Iterable[tuple[str, str, bytes | int]], cfg: int = 0) -> bytes:
    """The decoder encoding of (kind, direction, bytes or gap size) events (1 µs apart)."""
    out = bytearray([cfg])
    for kind, direction, val in events:
        d = 1 if direction == base.S2C else 0
        if kind == "gap":
            n, shift = int(val), 0
            while n > 0xFFFF and shift < 15:  # rounds very large gaps down to what fits
                n, shift = n >> 2, shift + 1
            out += bytes([d | 2 | (shift << 4)]) + struct.pack(">H", min(n, 0xFFFF))
            continue
        for i in range(0, len(val), 0xFFFF):
            chunk = val[i : i + 0xFFFF]
            out += bytes([d]) + struct.pack(">H", len(chunk)) + chunk
    return bytes(out)


def decode(name: str, data: bytes, make: Callable | None = None) -> tuple[list, dict]:
    """Drive one conversation of protocol `name` with `data`: (its rows, the driver's shared
    columns). `make(conn, ctx)`: the conversation, where not the protocol's own."""
    cfg = data[0] if data else 0
    ctx, midstream = _decoder_context(cfg)
    proto = base.protocols()[name]
    conn = base.ConnInfo("fuzz", "10.0.0.1", 50000, "10.0.0.2", proto.default_ports[0], midstream)
    conv = make(conn, ctx) if make is not None else proto.conversation(conn, ctx)
    rows: list = []
    t = T0
    for kind, direction, dt, val in stream_ops(data[1:]):
        t += dt
        if kind == "gap":
            rows.extend(conv.gap(direction, val, t) or ())
        elif val:  # reassembly never delivers empty data
            rows.extend(conv.feed(direction, val, t) or ())
    rows.extend(conv.close() or ())
    shared = {
        "capture_id": "fuzz",
        "protocol": name,
        "conn_id": conn.conn_id,
        "client_ip": conn.client_ip,
        "client_port": conn.client_port,
        "server_ip": conn.server_ip,
        "server_port": conn.server_port,
    }
    return rows, shared


def run_decoder(name: str, data: bytes) -> dict[str, int]:
    """Drive one conversation of protocol `name` with `data`, then check its rows."""
    return check_rows(*decode(name, data))


def fuzz_kafka(data: bytes) -> None:
    run_decoder("kafka", data)


def fuzz_pulsar(data: bytes) -> None:
    run_decoder("pulsar", data)


def fuzz_iggy(data: bytes) -> None:
    run_decoder("iggy", data)


def fuzz_tubemq(data: bytes) -> None:
    run_decoder("tubemq", data)


def fuzz_tubemq_exchanges(data: bytes) -> None:
    """The `tubemq` decoder input fed to a conversation with the compiled sendMessageP2B path
    (_rpc.exchanges) and to one without it: the same rows, table by table, in order."""
    from brokerscope.protocols.tubemq.conversation import TubeMQConversation

    got = []
    for compiled in (True, False):
        rows, _ = decode("tubemq", data, partial(TubeMQConversation, compiled=compiled))
        per_table: dict[str, list] = defaultdict(list)
        for table, row in rows:
            if isinstance(row, tables.Block) and compiled:  # its Arrow columns as their values convert
                lists = tables.Block(row.n, {k: row.column(k) for k in row.cols}, row.const)
                if tables.conform(table, [row]).to_pylist() != tables.conform(table, [lists]).to_pylist():
                    raise FuzzFailure(
                        "tubemq-columns-conform", f"{table}: a block's Arrow columns convert apart"
                    )
            for r in row.rows() if isinstance(row, tables.Block) else [row]:
                per_table[table].append({k: v for k, v in r.items() if v is not None})
        got.append(dict(per_table))
    if got[0] != got[1]:
        for table in sorted(set(got[0]) | set(got[1])):
            a, b = got[0].get(table, []), got[1].get(table, [])
            if a != b:
                at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                raise FuzzFailure(
                    "tubemq-exchanges-differ",
                    f"{table} row {at}: compiled {a[at] if at < len(a) else None!r} python {b[at] if at < len(b) else None!r}",
                )


# ---------------------------------------------------------------------------------------------
# segment readers

_WORKDIR: str | None = None
BASE_OFFSETS = (0, 100, 5, 2**31 - 1, 2**32, 2**63 - 1, 99_999_999_999_999_999_999, 10**19)
SPLITS = (1 << 30, 1, 100, 4096)


def workdir() -> str:
    """One scratch directory per process, reused by every input (under $BROKERSCOPE_FUZZ_WORKDIR
    when set: the fuzz driver removes that one afterwards)."""
    global _WORKDIR
    if _WORKDIR is None:
        _WORKDIR = tempfile.mkdtemp(
            prefix="brokerscope-fuzz-", dir=os.environ.get("BROKERSCOPE_FUZZ_WORKDIR")
        )
    return _WORKDIR


def _fresh_dir(*parts: str) -> str:
    d = os.path.join(workdir(), *parts)
    os.makedirs(d, exist_ok=True)
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    return d


def _segment_context(cfg: int) -> base.Context:
    return base.Context(
        max_frame_bytes=4096 if cfg & 32 else base.Context.max_frame_bytes,
        max_decompressed_bytes=4096 if cfg & 64 else base.Context.max_decompressed_bytes,
        payload=base.PayloadPolicy(mode="hash" if cfg & 128 else "keep"),
    )


def split_segment(data: bytes, companions: int) -> tuple[int, list[bytes], bytes]:
    """(config byte, companion files, log) from a segment-encoded input."""
    cfg = data[0] if data else 0
    pos = 1
    lens = []
    for _ in range(companions):
        lens.append(struct.unpack_from(">H", data, pos)[0] if pos + 2 <= len(data) else 0)
        pos += 2
    parts = []
    for n in lens:
        parts.append(data[pos : pos + n])
        pos += n
    return cfg, parts, data[pos:]


def encode_segment(log: bytes, companions: list[bytes | None], cfg: int = 0) -> bytes:
    """The segment encoding of a log and its companion files (None or b"": absent)."""
    comps = [(c or b"")[:0xFFFF] for c in companions]
    return bytes([cfg]) + b"".join(struct.pack(">H", len(c)) for c in comps) + b"".join(comps) + log


def _write(path: str, data: bytes | None) -> None:
    if data:
        with open(path, "wb") as f:
            f.write(data)


def _read_segment(mod, path: str, split: int, ctx: base.Context, proto: str) -> dict[str, int]:
    mod.matches(path)  # discovery's check: must not raise either
    rows: list = []
    for start, end in mod.plan(path, split):
        check(0 <= start <= end <= os.path.getsize(path), "plan range outside the file", f"{start}-{end}")
        rows.extend(mod.read(path, start, end, ctx))
    return check_rows(rows, {"capture_id": "fuzz", "protocol": proto})


def fuzz_kafka_segment(data: bytes) -> None:
    """A Kafka `.log` with optional `.index` / `.timeindex` in `<topic>-<partition>/`."""
    from brokerscope.protocols.kafka import segments as seg

    cfg, (index, timeindex), log = split_segment(data, 2)
    d = _fresh_dir("kafka", "fuzz-topic-3")
    stem = os.path.join(d, f"{BASE_OFFSETS[cfg & 7]:020d}")
    _write(stem + ".log", log or b"")
    open(stem + ".log", "ab").close()  # an empty log exists too
    _write(stem + ".index", index)
    _write(stem + ".timeindex", timeindex)
    _read_segment(seg, stem + ".log", SPLITS[(cfg >> 3) & 3], _segment_context(cfg), "kafka")


def fuzz_iggy_segment(data: bytes) -> None:
    """An Iggy `.log` with an optional `.index` in `streams/<s>/topics/<t>/partitions/<p>/`."""
    from brokerscope.protocols.iggy import segments as seg

    cfg, (index,), log = split_segment(data, 1)
    d = _fresh_dir("iggy", "streams", "1", "topics", "2", "partitions", "3")
    stem = os.path.join(d, f"{BASE_OFFSETS[cfg & 7]:020d}")
    _write(stem + ".log", log)
    open(stem + ".log", "ab").close()
    _write(stem + ".index", index)
    _read_segment(seg, stem + ".log", SPLITS[(cfg >> 3) & 3], _segment_context(cfg), "iggy")


# ---------------------------------------------------------------------------------------------
# compiled walks


def iggy_batch_both(buf: bytes, pos: int, count: int | None, sums: bool = True) -> tuple:
    """An Iggy batch record at `pos` read by read_batch_v48 (the compiled walk, or the Python
    reader where the walk leaves it) and by parse_batch_v48 alone: each (batch fields, Messages,
    next position) or the DecodeError's (status, text); then what the walk itself returned.
    `sums` false: the checksums left out (a payload policy other than keep)."""
    from brokerscope.protocols.iggy import messages as im

    def python():
        batch, nxt = im.parse_batch_v48(buf, pos, len(buf), count)
        if not sums:
            del batch["batch_checksum"]
        return batch, im.Messages.of(batch.pop("messages"), sums), nxt

    out = []
    for read in (lambda: im.read_batch_v48(buf, pos, len(buf), count, sums), python):
        try:
            out.append(read())
        except base.DecodeError as e:
            out.append((e.status, str(e)))
    walked = im._batch.walk(buf, pos, len(buf), -1 if count is None else count, im._XXH3, sums)
    return out[0], out[1], walked


def fuzz_iggy_batch(data: bytes) -> None:
    """The compiled Iggy batch walk gives what the plain-Python reader gives, and leaves to it
    every record that reader rejects."""
    cfg = data[0] if data else 0
    buf = data[1:]
    count = None if cfg & 8 else cfg >> 4
    for sums in (True, False):
        got, want, walked = iggy_batch_both(buf, min(cfg & 7, len(buf)), count, sums)
        check(got == want, "walk differs", f"{got!r:.300} != {want!r:.300}")
        if len(want) == 2:  # (status, error): the Python reader rejects it
            check(walked is None, "walk takes a record the reader rejects")


PULSAR_BASE_SEQUENCES = (0, 5, 2**63 - 1, 2**64 - 1)  # a batch's sequence_id, by the config's bits 6-7


def pulsar_batch_both(buf: bytes, count: int, base_sequence: int) -> tuple:
    """An uncompressed Pulsar batch payload of `count` entries read by the compiled walk (or
    split_batch where the walk leaves it) and by split_batch alone: each the Columns as lists or
    the PayloadError's (status, text); then what the walk itself returned."""
    from brokerscope.protocols.pulsar import messages as pm
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    md = pb.MessageMetadata(producer_name="p", sequence_id=base_sequence, publish_time=1)
    md.num_messages_in_batch = count
    out = []
    for read in (
        lambda: pm.walk(md, buf) or pm.columns(pm.split_batch(md, buf)),
        lambda: pm.columns(pm.split_batch(md, buf)),
    ):
        try:
            out.append(read().pylists())
        except pm.PayloadError as e:
            out.append((e.status, str(e)))
    return out[0], out[1], pm._batch.split(buf, count, base_sequence)


def fuzz_pulsar_batch(data: bytes) -> None:
    """The compiled Pulsar batch walk gives the columns split_batch gives (values, keys, headers,
    sequences, the messages' own fields), and leaves to it every payload split_batch rejects."""
    cfg, buf = (data[0], data[1:]) if data else (0, b"")
    got, want, walked = pulsar_batch_both(buf, cfg & 0x3F, PULSAR_BASE_SEQUENCES[cfg >> 6])
    check(got == want, "walk differs", f"{got!r:.300} != {want!r:.300}")
    if isinstance(want, tuple) and len(want) == 2:  # (status, error): split_batch rejects it
        check(walked is None, "walk takes a payload split_batch rejects")


def tubemq_envelope_both(body: bytes) -> tuple:
    """A TubeMQ frame's joined blocks read by decode_envelope (the compiled reader, or protobuf
    where it leaves them) and by protobuf alone (read_envelope): each an Envelope or the
    error's text; then what the compiled reader itself returned."""
    from brokerscope.protocols.tubemq import rpc

    out = []
    for read in (rpc.decode_envelope, rpc.read_envelope):
        try:
            out.append(read(body))
        except ValueError as e:
            out.append(str(e))
    return out[0], out[1], rpc._rpc.envelope(body)


def tubemq_body_both(entry: int, body: bytes) -> tuple:
    """A method's body read as built-in message `entry` (rpc.BUILTIN) by the compiled reader
    (_rpc.body: its dict or None) and by protobuf (rpc.plain of the message, or the error's
    text)."""
    from google.protobuf.message import DecodeError

    from brokerscope.protocols.tubemq import rpc

    name = sorted(rpc.BUILTIN.index)[entry % len(rpc.BUILTIN.index)]
    cls = next(
        c
        for m in rpc.METHODS.values()
        for c in (m.request, m.response)
        if c and c.DESCRIPTOR.full_name == name
    )
    msg = cls()
    try:
        msg.ParseFromString(body)
        want = rpc.plain(msg)
    except DecodeError as e:
        want = str(e)
    return rpc._rpc.body(body, rpc.BUILTIN.table, rpc.BUILTIN.index[name]), want


def tubemq_body_json_both(entry: int, fields: dict) -> tuple:
    """A body's `details` JSON as the compiled reader writes it (_rpc.body_json of what _rpc.body
    gave for built-in message `entry`) and as to_json writes rpc.sized of it."""
    from brokerscope.protocols.tubemq import rpc

    i = rpc.BUILTIN.index[sorted(rpc.BUILTIN.index)[entry % len(rpc.BUILTIN.index)]]
    return rpc._rpc.body_json(fields, rpc.BUILTIN.table, i), base.to_json(rpc.sized(fields, rpc.BUILTIN, i))


def tubemq_read_json_both(data: bytes) -> tuple | None:
    """What _rpc.read wrote of a frame's `details` (the open head, the body's JSON) and what
    to_json writes of what it read (the head's four keys; rpc.sized of the body's dict); None
    where it read no envelope."""
    from brokerscope.protocols.tubemq import rpc

    reader = (rpc.BUILTIN.table, *rpc.body_entries())
    got = rpc._rpc.read(data, *reader)
    if got is None or got[3] is None:
        return None
    serial, sizes, _joined, env, fields, head, body = got
    want_head = base.to_json({"serial": serial, "blocks": sizes, "flag": env[0], "rpc_header": env[1]})[:-1]
    want_body = None
    if fields is not None:
        entry = reader[2 if env[0] == rpc.FLAG_RESPONSE else 1][env[4]]
        want_body = base.to_json(rpc.sized(fields, rpc.BUILTIN, entry))
    return (head, body), (want_head, want_body)


def tubemq_read_all_both(data: bytes, limits: tuple[int, int] = (1 << 20, 64)) -> tuple:
    """A chunk's whole frames read by one _rpc.read_all call, and by _rpc.split then _rpc.read
    of each frame: (sizes, reads) both."""
    from brokerscope.protocols.tubemq import rpc

    reader = (rpc.BUILTIN.table, *rpc.body_entries())
    sizes, at, reads = rpc._rpc.split(data, *limits), 0, []
    for size in sizes:
        reads.append(rpc._rpc.read(data[at : at + size], *reader))
        at += size
    return rpc._rpc.read_all(data, *limits, *reader), (sizes, reads)


def tubemq_message_both(data: bytes, flag: int | None) -> tuple:
    """A message's data split and its attributes read by the compiled content.message_parts and
    by content.split_payload and parse_attributes."""
    from brokerscope.protocols.tubemq import content

    attr, payload, err = content.split_payload(data, flag)
    return content.message_parts(data, flag), (attr, payload, err, content.parse_attributes(attr))


def tubemq_columns_both(body: bytes, deliver: bool) -> tuple | None:
    """A getMessagesC2B response's messages (`deliver`) or a sendMessageP2B request read from
    `body` by protobuf (rpc.plain), then their columns by the compiled rows.message_columns and
    by content.split_payload, parse_attributes, checksum_ok and base.json_value; None when
    protobuf rejects `body`."""
    import socket

    from google.protobuf.message import DecodeError

    from brokerscope.protocols.tubemq import content, rows, rpc

    cls = rpc.METHODS[17].response if deliver else rpc.METHODS[13].request
    msg = cls()
    try:
        msg.ParseFromString(body)
    except DecodeError:
        return None
    got = rpc.plain(msg)
    msgs = got.get("messages", []) if deliver else [got]
    payload, spec = ("payLoadData", rows.DELIVER_DETAILS) if deliver else ("data", rows.PRODUCE_DETAILS)
    tail = ',"curr_offset":5}' if deliver else "}"
    want: tuple = ([], [], [], [], [], [])
    for m in msgs:
        data = m.get(payload) or b""
        attr, value, err = content.split_payload(data, m.get("flag"))
        text = ""
        for key, name, kind in spec:
            v = attr if kind == 2 else len(data) if kind == 3 else m.get(name)
            if kind == 1 and v is not None:  # a dotted IPv4 address
                v = socket.inet_ntoa(struct.pack(">I", v & 0xFFFFFFFF))
            text += key + base.json_value(v)
        row = (value, err, content.parse_attributes(attr), content.checksum_ok(m.get("checkSum"), data))
        for col, v in zip(want, (*row, text + tail, len(value))):
            col.append(v)
    return rows.message_columns(msgs, payload, spec, tail), want


def fuzz_tubemq_rpc(data: bytes) -> None:
    """The compiled TubeMQ frame, envelope and body readers give what the Python ones give, and
    leave to them every input those reject."""
    from brokerscope.protocols.tubemq import framing

    cfg, buf = (data[0], data[1:]) if data else (0, b"")
    if cfg & 1:
        got = framing._rpc.frame(buf)
        if got is not None:
            check(got == framing.join_blocks(buf), "frame differs", f"{got!r:.300}")
        both = tubemq_read_json_both(buf)
        if both is not None:
            check(both[0] == both[1], "details JSON differs", f"{both!r:.600}")
        got, want = tubemq_read_all_both(buf)
        check(repr(got) == repr(want), "read_all differs", f"{got!r:.300} != {want!r:.300}")
        return
    if cfg & 2 and cfg & 4:
        got, want = tubemq_message_both(buf, cfg >> 3 or None)
        check(got == want, "message parts differ", f"{got!r:.300} != {want!r:.300}")
        return
    if cfg & 4:
        both = tubemq_columns_both(buf, bool(cfg & 8))
        if both is not None:
            check(repr(both[0]) == repr(both[1]), "message columns differ", f"{both!r:.600}")
        return
    if cfg & 2:
        got, want = tubemq_body_both(cfg >> 3, buf)
        if got is not None:
            check(repr(got) == repr(want), "body differs", f"{got!r:.300} != {want!r:.300}")
            text, want_text = tubemq_body_json_both(cfg >> 3, got)
            check(text == want_text, "body JSON differs", f"{text!r:.300} != {want_text!r:.300}")
        return
    got, want, walked = tubemq_envelope_both(buf)
    check(got == want, "envelope differs", f"{got!r:.300} != {want!r:.300}")
    if isinstance(want, str):
        check(walked is None, "compiled reader takes an envelope protobuf rejects")


def kafka_body_both(plan, buf: bytes, pos: int) -> tuple[str, str]:
    """A Kafka message body read under `plan` by the compiled reader (plan.read: _body.c, or the
    Python reader where it leaves the body) and by the Python reader alone (plan.read_py): each
    the repr of (fields, end) or the error's class, status and text; reprs, so key order, bool
    against int and str against bytes count."""
    out = []
    for read in (plan.read, plan.read_py):
        try:
            out.append(repr(read(buf, pos)))
        except base.DecodeError as e:
            out.append(repr((type(e).__name__, e.status, str(e))))
    return out[0], out[1]


def kafka_body_plan(cfg: bytes):
    """The plan a kafka_body input names in its first 4 bytes: api key (big-endian, modulo 128),
    version, and request (even) or response (odd); None when there is none."""
    from brokerscope.protocols.kafka import schema

    key, version, kind = (
        (int.from_bytes(cfg[:2], "big") % 128, cfg[2], cfg[3]) if len(cfg) == 4 else (0, 0, 0)
    )
    return schema.plan(key, version, "response" if kind & 1 else "request")


def fuzz_kafka_body(data: bytes) -> None:
    """The compiled Kafka body reader gives what the Python reader gives: the same fields in the
    same order, or the same error (class, status, text); and of a body that decodes, the compiled
    summary (topics, partition, error codes) and details copy are the Python ones."""
    from brokerscope.protocols.kafka import rows

    plan = kafka_body_plan(data[:4])
    if plan is None:
        return
    what = f"{plan.name} v{plan.version} {plan.kind}"
    got, want = kafka_body_both(plan, data[4:], 0)
    check(got == want, "body differs", f"{what}: {got:.300} != {want:.300}")
    try:
        body = plan.read_py(data[4:], 0)[0]
    except base.DecodeError:
        return
    got, want = repr(plan.summarize(body)), repr(plan.summarize_py(body))
    check(got == want, "summary differs", f"{what}: {got:.300} != {want:.300}")
    records, cap = frozenset(plan.records_fields), 1 << 16
    got, want = repr(rows.clean(body, records, cap)), repr(rows.clean_py(body, records, cap))
    check(got == want, "details differ", f"{what}: {got:.300} != {want:.300}")


# ---------------------------------------------------------------------------------------------
# capture reader

CAPTURE_SPLITS = (0, 24, 97, 500, 4096, 1 << 20, 7, 64)
_ROW_COLS = ["lo_ip", "lo_port", "hi_port", "payload_len", "payload", "snap_truncated", "wire_len"]


def _capture_file(data: bytes) -> tuple[int, str, str] | None:
    """(cfg, path, kind) of the capture file a capture input holds (gzip-compressed when cfg
    bit0), or None when discovery would skip it."""
    from brokerscope.capture import identify
    from brokerscope.capture.files import KINDS

    cfg = data[0] if data else 0
    body = data[1:]
    if cfg & 1:
        body = gzip.compress(body, 1)
    path = os.path.join(workdir(), "capture.gz" if cfg & 1 else "capture.pcap")
    with open(path, "wb") as f:
        f.write(body)
    kind = identify(path)
    return (cfg, path, kind) if kind in KINDS else None


def fuzz_capture(data: bytes) -> None:
    """A pcap / pcapng file (gzip-compressed when cfg bit0), read split by split as tasks do."""
    from brokerscope.capture import capture_id, parse_stats, plan_splits, read_split

    got = _capture_file(data)
    if got is None:
        return  # discovery skips it
    cfg, path, kind = got
    cid = capture_id(path)
    for sp in plan_splits(path, 0, cid, kind, CAPTURE_SPLITS[(cfg >> 1) & 7]):
        batches = list(
            read_split(
                sp, batch_packets=1 if cfg & 32 else 8192, max_pending_fragments=1 if cfg & 16 else 4096
            )
        )
        check(batches and parse_stats(batches[-1]) is not None, "split does not end with its stats batch")
        for b in batches[:-1]:
            check(parse_stats(b) is None, "stats batch before the end of a split")
            check(b.schema.equals(tables.PACKETS), "packets batch with another schema", str(b.schema)[:300])
            for r in b.select(_ROW_COLS).to_pylist():
                check(r["lo_ip"] is not None, "packet row without lo_ip")
                check(
                    0 <= r["lo_port"] < 65536 and 0 <= r["hi_port"] < 65536,
                    "port out of range",
                    repr(r)[:200],
                )
                check(r["payload_len"] >= 0, "negative payload_len", repr(r)[:200])
                pl = r["payload"] or b""
                check(len(pl) <= r["payload_len"], "payload longer than payload_len", repr(r)[:200])
                check(
                    len(pl) == r["payload_len"] or r["snap_truncated"],
                    "short payload not marked snap_truncated",
                    repr(r)[:200],
                )


COMPILED_SPLITS = (0, 300, 1000, 4096)  # whole files and splits starting mid-file
BROKER_PORTS = (9092, 6650, 8090, 8715)  # Kafka, Pulsar, Iggy, TubeMQ


def fuzz_capture_compiled(data: bytes) -> None:
    """The compiled record walk against the Python reader: equal batches, counters included."""
    from brokerscope.capture import capture_id, plan_splits, read_split
    from brokerscope.capture.filter import PacketFilter

    got = _capture_file(data)
    if got is None:
        return
    cfg, path, kind = got
    splits = plan_splits(path, 0, capture_id(path), kind, COMPILED_SPLITS[(cfg >> 1) & 3])
    which = (cfg >> 5) & 3
    flt = None
    if which == 1:
        flt = PacketFilter.parse(ports=BROKER_PORTS)
    elif which == 2:
        flt = PacketFilter.parse(hosts=["127.0.0.0/8", "::1"])
    elif which == 3:  # from the middle of the first split's packet times to an hour later
        times = sorted(
            t for b in list(read_split(splits[0], compiled=False))[:-1] for t in b.column("ts_ns").to_pylist()
        )
        mid = times[len(times) // 2] if times else T0
        flt = PacketFilter.parse(since=str(mid // 10**9), until=str(mid // 10**9 + 3600))
    kw = {"batch_packets": 1 if cfg & 16 else 8192, "payload_refs": bool(cfg & 8), "flt": flt}
    for sp in splits:
        compiled = list(read_split(sp, compiled=True, **kw))
        python = list(read_split(sp, compiled=False, **kw))
        check(
            len(compiled) == len(python), "compiled walk gives another number of batches", f"split {sp.start}"
        )
        for i, (c, p) in enumerate(zip(compiled, python, strict=True)):
            for name in p.schema.names:
                check(
                    c.column(name).equals(p.column(name)),
                    "compiled walk's batch differs",
                    f"split {sp.start} batch {i} column {name}: {c.column(name)!s:.200} != {p.column(name)!s:.200}",
                )


# ---------------------------------------------------------------------------------------------
# TCP reassembly

_REC = struct.Struct(">BBIIHB")  # flags/dir/snap, modes, seq param, ack param, payload len, cap
MASK = 0xFFFFFFFF


def _byte_at(seq: int) -> int:
    """The content of sequence number `seq` (the same in every copy, so delivery can be checked)."""
    seq &= MASK
    return (seq * 2654435761 >> 13) & 0xFF


def _payload(seq: int, n: int) -> bytes:
    return bytes(_byte_at(seq + i) for i in range(n))


def encode_tcp(packets: Iterable[tuple], cfg: int = 0) -> bytes:
    """The tcp encoding of (flags, from_lo, seq_mode, seq_param, ack_mode, ack_param, payload_len,
    captured_fraction_or_None, dt_sel, window_zero) tuples."""
    out = bytearray([cfg])
    for flags, from_lo, sm, sp, am, ap, n, cap, dt, wz in packets:
        b0 = (flags & 0x3F) | (0x40 if from_lo else 0) | (0x80 if cap is not None else 0)
        b1 = sm | am << 2 | dt << 4 | (0x40 if wz else 0)
        out += _REC.pack(b0, b1, sp & MASK, ap & MASK, n, cap or 0)
    return bytes(out)


def _tcp_packets(data: bytes):
    """Packets from 13-byte records. Sequence numbers follow a sender model: mode 0 the next byte
    the sender would send, 1 that plus param (a hole), 2 that minus param (a retransmission), 3
    absolute; ACKs likewise from the peer's next byte (0 exactly, 1 behind, 2 ahead, 3 absolute).
    The payload's content is a function of each byte's sequence number."""
    from brokerscope.tcp import FIN, SYN, Packet

    nxt = {True: 1000, False: 900_000}
    t = T0
    for off in range(0, len(data) - _REC.size + 1, _REC.size):
        b0, b1, sp, ap, n, cap = _REC.unpack_from(data, off)
        flags, from_lo, snap = b0 & 0x3F, bool(b0 & 0x40), bool(b0 & 0x80)
        n %= 3000
        sm, am = b1 & 3, (b1 >> 2) & 3
        t += (0, 1_000, 2_000_000_000, 700_000_000_000)[(b1 >> 4) & 3]
        base_seq = nxt[from_lo]
        seq = (base_seq, base_seq + (sp & 0xFFFF), base_seq - (sp & 0xFFFF), sp)[sm] & MASK
        peer = nxt[not from_lo]
        ack = (peer, peer - (ap & 0xFFFF), peer + (ap & 0xFFFF), ap)[am] & MASK
        data_seq = (seq + 1) & MASK if flags & SYN else seq
        captured = n * cap // 255 if snap else n
        payload = _payload(data_seq, captured)
        if sm != 2:
            nxt[from_lo] = (data_seq + n + (1 if flags & FIN else 0)) & MASK
        yield Packet(t, from_lo, seq, ack, flags, 0 if b1 & 0x40 else 65535, payload, n, n + 54, snap)


def fuzz_tcp(data: bytes) -> None:
    """Packets of one 4-tuple through TcpConnection as the stream driver feeds them (a new
    connection when `starts_new`); delivered bytes are checked against what was sent."""
    from brokerscope.tcp import DATA, FIN, GAP, TcpConnection

    cfg = data[0] if data else 0
    kw = {
        "max_reorder_bytes": 4096 if cfg & 1 else 8 << 20,
        "reorder_timeout_ns": 1_000_000 if cfg & 2 else 5_000_000_000,
        "idle_timeout_ns": 1_000_000_000 if cfg & 4 else 600_000_000_000,
    }
    conn: TcpConnection | None = None
    state: dict = {}

    def finish() -> None:
        if conn is not None:
            account(conn.finish())
            verify(conn, state)

    def account(events: list) -> None:
        for ev in events:
            kind, from_lo = ev[0], ev[1]
            s = state[from_lo]
            if kind == DATA:
                chunk = ev[2]
                check(len(chunk) > 0, "empty data event")
                s["data"] += len(chunk)
                reasm = conn.direction(from_lo).reasm
                if not s["fin"] and reasm.base_seq is not None:
                    want = _payload(reasm.base_seq + s["off"], len(chunk))
                    check(
                        bytes(chunk) == want, "delivered bytes differ from the bytes sent", f"at {s['off']}"
                    )
                s["off"] += len(chunk)
            elif kind == GAP:
                check(ev[2] > 0, "gap event of no bytes", repr(ev))
                s["gap"] += ev[2]
                s["off"] += ev[2]
            else:
                raise FuzzFailure("unknown event kind", repr(ev)[:100])

    for pkt in _tcp_packets(data[1:]):
        if conn is None or conn.starts_new(pkt):
            finish()
            conn = TcpConnection(pkt, **kw)
            state = {d: {"sent": 0, "data": 0, "gap": 0, "off": 0, "fin": False} for d in (True, False)}
        s = state[pkt.from_lo]
        s["sent"] += len(pkt.payload)
        if pkt.flags & FIN:  # the FIN takes a stream offset no event reports: stop comparing content
            s["fin"] = True
        account(conn.add(pkt))
    finish()


def verify(conn, state: dict) -> None:
    """Counters non-negative; data delivered = the reassembler's count <= captured bytes sent."""
    for from_lo in (True, False):
        d = conn.direction(from_lo)
        r = d.reasm
        s = state[from_lo]
        for name in (*reassembly.COUNTERS, "buffered_bytes"):
            v = getattr(r, name)
            check(v >= 0, f"negative counter {name}", str(v))
        for name in ("packets", "payload_bytes", "frame_bytes", "snap_truncated_packets"):
            check(getattr(d, name) >= 0, f"negative counter {name}", str(getattr(d, name)))
        check(r.buffered_bytes == 0, "bytes still held after finish", str(r.buffered_bytes))
        check(
            s["data"] == r.delivered_bytes,
            "data events disagree with delivered_bytes",
            f"{s} {r.delivered_bytes}",
        )
        check(s["data"] <= s["sent"], "delivered more bytes than were captured", f"{s['data']} > {s['sent']}")
        check(s["gap"] == r.gap_bytes, "gap events disagree with gap_bytes", f"{s['gap']} != {r.gap_bytes}")


# ---------------------------------------------------------------------------------------------
# TLS

TLS_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "tls")
_TLS: dict = {}
# every reason docs/protocols/tls.md lists (a failure's where: " (c2s record 5)", " (s2c)")
TLS_REASONS = re.compile(
    r"(no key log|no ClientHello captured|the client random is not in the key log"
    r"|failed: (authentication failed \((AEAD tag|record MAC)\)|bad CBC padding"
    r"|record shorter than its (nonce and )?tag|no content type in the inner plaintext"
    r"|CBC record of a size no cipher text has"
    r"|the record sequence number is unknown after a gap: decryption stopped"
    r"|cipher suite \S+ is not supported"
    r"|(TLS 1\.[01]|SSL 3\.0|0x[0-9A-F]{4}) is not decrypted \(TLS 1\.2 and 1\.3 are\)"
    r"|renegotiation is not followed"
    r"|no application data decrypted \(\d+ records without their keys\))( \((c2s|s2c)( record \d+)?\))?)"
)


def tls_keys():
    """The key logs of tests/data/tls/ as one KeyLog (read once per process)."""
    if "keys" not in _TLS:
        from brokerscope import tls

        _TLS["keys"] = tls.load(sorted(glob.glob(os.path.join(TLS_DATA, "*.log"))), force=True)
    return _TLS["keys"]


def _secret_forms() -> dict[int, set[bytes]]:
    """The pieces of every key of the key logs, by length (see `_forms`)."""
    if "forms" not in _TLS:
        _TLS["forms"] = _forms(tls_keys().secrets())
    return _TLS["forms"]


def _forms(secrets: Iterable[bytes]) -> dict[int, set[bytes]]:
    """tests/unit/tls/test_tls_secrets.py's forms of each secret (raw, hex either case, UTF-16,
    base64, Python's bytes repr pieces), grouped by length for a windowed lookup."""
    from tests.support import cuts

    out: dict[int, set[bytes]] = defaultdict(set)
    for secret in secrets:
        if len(secret) < 8:
            continue
        shown = repr(secret)[2:-1].encode()
        for f in cuts.forms(secret) | {shown[i : i + 24] for i in range(max(1, len(shown) - 23))}:
            out[len(f)].add(f)
    return out


def check_no_keys(texts: Iterable[str], extra: Iterable[bytes] = ()) -> None:
    """No key of the key logs (nor `extra`, keys derived from them) in any of `texts`."""
    groups = [_secret_forms()]
    extra = list(extra)
    if extra:
        groups.append(_forms(extra))
    for text in texts:
        raw = text.encode("utf-8", "surrogateescape")
        for forms in groups:
            for n, pieces in forms.items():
                for i in range(len(raw) - n + 1):
                    if raw[i : i + n] in pieces:
                        raise FuzzFailure("key material shown", text[:120])


def _session_texts(s) -> tuple[list[str], list[bytes]]:
    """The session's printable texts, and the keys it derived (the secret scan's inputs)."""
    texts = [repr(s), str(s), s.status, str(s.reason), repr(s.info()), repr(s.counters())]
    texts += [repr(s.client_hello), repr(s.server_hello), repr(s._key_block)]
    derived: list[bytes] = []
    kb = s._key_block
    if kb is not None:
        derived += [kb.client_mac, kb.server_mac, kb.client_key, kb.server_key, kb.client_iv, kb.server_iv]
    for side in s.sides.values():
        texts += [repr(side), repr(side.opener), repr(side.records), repr(side.secret), repr(side.messages)]
        if side.secret is not None and s.suite is not None and s.suite.tls13:
            from brokerscope.tls import kdf

            derived += list(kdf.traffic_keys(s.suite, side.secret.reveal()))
    return texts, derived


def run_tls(ops: list, keys, midstream: bool) -> tuple:
    """Feed one TlsSession `ops` (stream_ops' tuples); check each event. Returns (session,
    plaintext per direction, gap bytes per direction)."""
    from brokerscope.tls import TlsSession

    s = TlsSession(keys, midstream=midstream)
    plain = {base.C2S: bytearray(), base.S2C: bytearray()}
    gaps = {base.C2S: 0, base.S2C: 0}
    last_ts = {base.C2S: 0, base.S2C: 0}
    t = T0
    for kind, direction, dt, val in [*ops, ("close", None, 0, None)]:
        t += dt
        if kind == "close":
            events = s.close()
        elif kind == "gap":
            events = s.gap(direction, val, t)
        elif val:
            events = s.feed(direction, val, t)
        else:
            continue
        check(isinstance(events, list), "events are not a list", type(events).__name__)
        for ev in events:
            check(
                isinstance(ev, tuple) and len(ev) == 4,
                "event is not (kind, direction, value, ts)",
                repr(ev)[:100],
            )
            k, d, v, ts = ev
            check(d in plain, "event of an unknown direction", repr(ev)[:100])
            check(keys is not None, "an event without a key log", repr(ev)[:100])
            check(T0 <= ts <= t, "event time outside the times fed", f"{ts - T0} after {t - T0}")
            check(ts >= last_ts[d], "events out of time order", f"{d}: {ts - T0} < {last_ts[d] - T0}")
            last_ts[d] = ts
            if k == "data":
                check(isinstance(v, bytes) and len(v) > 0, "data event without bytes", repr(ev)[:100])
                plain[d] += v
            elif k == "gap":
                check(isinstance(v, int) and v > 0, "gap event of no bytes", repr(ev)[:100])
                gaps[d] += v
            else:
                raise FuzzFailure("unknown event kind", repr(ev)[:100])
    return s, plain, gaps


def check_tls_session(s, plain: dict, fed: dict) -> None:
    """The statuses are documented ones, the counters agree with the events, no key is shown."""
    check(s.decrypted in ("yes", "no key", "failed"), "undocumented decrypted value", repr(s.decrypted))
    check(
        (s.status == "yes") == (s.reason is None),
        "a reason with yes, or none without",
        f"{s.status} {s.reason}",
    )
    if s.decrypted != "yes":
        shown = s.status if s.decrypted == "failed" else s.reason
        check(TLS_REASONS.fullmatch(shown), "undocumented status", shown)
    check(s.info()["tls_decrypted"] == s.status, "info() disagrees with status", repr(s.info()))
    counters = s.counters()
    for d, c in counters.items():
        for name, v in c.items():
            check(isinstance(v, int) and v >= 0, f"negative counter {name}", f"{d} {v}")
        check(
            c["app_bytes"] == len(plain[d]),
            "app_bytes disagrees with the data events",
            f"{d} {c} {len(plain[d])}",
        )
        check(len(plain[d]) <= fed[d], "more plaintext than ciphertext", f"{d} {len(plain[d])} > {fed[d]}")
    texts, derived = _session_texts(s)
    check_no_keys(texts, derived)


def fuzz_tls(data: bytes) -> None:
    """One TLS connection's byte streams, cut and with gaps as the input says, through a
    TlsSession with the test key logs (or none); when the input has no gap the same bytes fed
    in one piece per run of a direction give the same plaintext and status."""
    cfg = data[0] if data else 0
    keys = None if cfg & 1 else tls_keys()
    midstream = bool(cfg & 2)
    ops = list(stream_ops(data[1:]))
    fed = {base.C2S: 0, base.S2C: 0}
    for kind, direction, _dt, val in ops:
        fed[direction] += len(val) if kind == "data" else 0
    s, plain, _gaps = run_tls(ops, keys, midstream)
    check_tls_session(s, plain, fed)
    if keys is not None and not any(kind == "gap" for kind, *_ in ops):
        merged: list = []
        for kind, direction, dt, val in ops:
            if merged and merged[-1][1] == direction:
                merged[-1] = ("data", direction, 0, merged[-1][3] + val)
            else:
                merged.append((kind, direction, dt, val))
        s2, plain2, _ = run_tls(merged, keys, midstream)
        check(s2.status == s.status, "the cuts changed the status", f"{s.status} / {s2.status} uncut")
        for d in plain:
            check(
                plain2[d] == plain[d],
                "the cuts changed the plaintext",
                f"{d} {len(plain[d])} / {len(plain2[d])} uncut",
            )


def fuzz_tls_capture(data: bytes) -> None:
    """A capture of TLS connections (pcap / pcapng) through the reader and the stream driver with
    the test key logs (or none): rows conform, every connection has its streams row, whose
    tls_decrypted is a documented status, and no row shows a key."""
    import pyarrow as pa

    from brokerscope.capture import capture_id, identify, parse_stats, plan_splits, read_split
    from brokerscope.capture.files import KINDS
    from brokerscope.config import Settings
    from brokerscope.streams import SORT_COLS, StreamDriver

    cfg = data[0] if data else 0
    path = os.path.join(workdir(), "tls_capture.pcap")
    with open(path, "wb") as f:
        f.write(data[1:])
    kind = identify(path)
    if kind not in KINDS:
        return
    if "settings" not in _TLS:
        _TLS["settings"] = Settings.load()
    keys = None if cfg & 1 else tls_keys()
    batches = []
    for sp in plan_splits(path, 0, capture_id(path), kind, CAPTURE_SPLITS[(cfg >> 1) & 7]):
        batches += [b for b in read_split(sp) if parse_stats(b) is None]
    if not batches:
        return
    packets = pa.Table.from_batches(batches, schema=tables.PACKETS)
    packets = packets.sort_by([(c, "ascending") for c in SORT_COLS])
    tuples = {  # the endpoints of each 4-tuple (lo/hi: the reader's order, not the rows')
        frozenset({(r["lo_ip"], r["lo_port"]), (r["hi_ip"], r["hi_port"])})
        for r in packets.select(["lo_ip", "lo_port", "hi_ip", "hi_port"]).to_pylist()
    }
    drv = StreamDriver(_TLS["settings"], tls_keys=keys)
    rows = list(drv.run_batches(packets.to_batches()))
    check_rows(rows, {})
    streams = [r for t, r in rows if t == "streams"]
    seen = set()
    for r in streams:
        seen.add(frozenset({(r["client_ip"], r["client_port"]), (r["server_ip"], r["server_port"])}))
        st = r.get("tls_decrypted")
        if st is not None and st not in ("yes", "no key"):
            check(TLS_REASONS.fullmatch(st), "undocumented tls_decrypted", st)
    check(tuples <= seen, "a connection without its streams row", repr(sorted(tuples - seen))[:300])
    # the streams rows whole (the tls_* columns), and every row's decode_error and anomalies
    texts = [repr(r) for r in streams]
    texts += [repr((r.get("decode_error"), r.get("anomalies"))) for _t, r in _spread(rows)]
    check_no_keys(texts)


# ---------------------------------------------------------------------------------------------
# details JSON

DETAILS_DEPTH = 40  # nesting of a details_value (the writer's own limit is tested in the unit tests)


class _DictSub(dict):
    """A dict subclass, as the decoders hand some over (kafka.rows.Summary)."""


class _ListSub(list):
    pass


def details_value(data: bytes) -> object:
    """A Python value from fuzz bytes: a tag byte, then what the tag reads (see _value)."""
    at = [0]

    def take(n: int) -> bytes:
        b = data[at[0] : at[0] + n]
        at[0] += n
        return b

    def byte() -> int:
        b = take(1)
        return b[0] if b else 0

    def value(depth: int) -> object:
        tag = byte() % 16
        if depth >= DETAILS_DEPTH and tag >= 9:
            tag = 3
        if tag == 0:
            return None
        if tag in (1, 2):
            return tag == 1
        if tag == 3:
            return int.from_bytes(take(1), "big", signed=True)
        if tag == 4:
            return int.from_bytes(take(8), "big", signed=True)
        if tag == 5:  # past int64 too
            return int.from_bytes(take(byte() % 24), "big", signed=True)
        if tag == 6:  # any bit pattern: NaN, infinities, subnormals, -0.0
            return struct.unpack(">d", take(8).ljust(8, b"\0"))[0]
        if tag == 7:  # any BMP code point, control characters and lone surrogates among them
            raw = take(2 * (byte() % 32))
            return raw[: len(raw) & ~1].decode("utf-16-le", "surrogatepass")
        if tag == 8:  # bytes: text or base64 by base._jsonable
            return take(byte() % 16)
        n = byte() % 6
        if tag in (9, 10, 11):
            items = [value(depth + 1) for _ in range(n)]
            return items if tag == 9 else tuple(items) if tag == 10 else _ListSub(items)
        if tag == 12:
            return {byte() for _ in range(n)}
        d = _DictSub() if tag == 13 else {}
        for _ in range(n):
            k = value(depth + 1)
            # a container as a key: a short name instead (its str() would nest exponentially)
            d[k if k.__class__ in _KEY_CLASSES else f"{type(k).__name__}{len(d)}"] = value(depth + 1)
        if tag == 15 and n:  # a key json refuses (a tuple)
            d[(n,)] = None
        return d

    return value(0)


_KEY_CLASSES = (str, int, float, bool, type(None))


def encode_details(v: object) -> bytes:
    """The details_value encoding of a JSON-like value (strings cut to 31 UTF-16 units, lists and
    dicts to 5 items): seeds from real details."""
    if v is None or v is True or v is False:
        return bytes([0 if v is None else 1 if v else 2])
    if isinstance(v, int):
        if -128 <= v < 128:
            return b"\x03" + v.to_bytes(1, "big", signed=True)
        if -(1 << 63) <= v < 1 << 63:
            return b"\x04" + v.to_bytes(8, "big", signed=True)
        n = min((v.bit_length() + 8) // 8, 23)
        return bytes([5, n]) + (v % (1 << (8 * n))).to_bytes(n, "big")
    if isinstance(v, float):
        return b"\x06" + struct.pack(">d", v)
    if isinstance(v, str):
        raw = v.encode("utf-16-le", "surrogatepass")[:62]
        return bytes([7, len(raw) // 2]) + raw
    if isinstance(v, list):
        return bytes([9, min(len(v), 5)]) + b"".join(encode_details(x) for x in v[:5])
    if isinstance(v, dict):
        items = list(v.items())[:5]
        return bytes([14, len(items)]) + b"".join(encode_details(k) + encode_details(x) for k, x in items)
    raise TypeError(f"no details_value encoding for {type(v).__name__}")


def fuzz_details_json(data: bytes) -> None:
    """base.to_json (the compiled writer) writes what json's encoder writes, or fails alike."""
    v = details_value(data)
    outcome = []
    for f in (base.to_json, base.to_json_py):
        try:
            outcome.append(("text", f(v)))
        except (TypeError, ValueError, RecursionError) as e:
            outcome.append(("error", type(e).__name__))
    check(outcome[0] == outcome[1], "details_json_differs", f"{outcome[0]!r:.300} != {outcome[1]!r:.300}")


# ---------------------------------------------------------------------------------------------

TARGETS: dict[str, Callable[[bytes], None]] = {
    "kafka": fuzz_kafka,
    "pulsar": fuzz_pulsar,
    "iggy": fuzz_iggy,
    "tubemq": fuzz_tubemq,
    "kafka_segment": fuzz_kafka_segment,
    "iggy_segment": fuzz_iggy_segment,
    "capture": fuzz_capture,
    "capture_compiled": fuzz_capture_compiled,
    "tcp": fuzz_tcp,
    "tls": fuzz_tls,
    "tls_capture": fuzz_tls_capture,
    "iggy_batch": fuzz_iggy_batch,
    "tubemq_rpc": fuzz_tubemq_rpc,
    "tubemq_exchanges": fuzz_tubemq_exchanges,
    "pulsar_batch": fuzz_pulsar_batch,
    "kafka_body": fuzz_kafka_body,
    "details_json": fuzz_details_json,
}
