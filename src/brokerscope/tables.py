"""The schemas of every table brokerscope writes, and of its internal packet batches.

This file is the one source of truth: decoders emit plain dicts (or `Block`s of many rows) whose
keys are column names listed here, `conform()` turns them into Arrow batches, and the lake creates its Delta tables from
these schemas. Column names are a contract with users' queries: add columns, never rename.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from itertools import accumulate

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TS = pa.timestamp("us", tz="UTC")

# Columns every output table starts with. Rows from segment files leave the connection ones null.
SHARED: list[pa.Field] = [
    pa.field("capture_id", pa.string()),  # stable id of the input file (content hash)
    pa.field("protocol", pa.string()),  # kafka | pulsar | iggy | tubemq | unknown
    pa.field("conn_id", pa.string()),
    pa.field("client_ip", pa.string()),
    pa.field("client_port", pa.int32()),
    pa.field("server_ip", pa.string()),
    pa.field("server_port", pa.int32()),
    pa.field("ts", TS),
    pa.field("ts_ns", pa.int64()),  # the same instant with the capture's full resolution
]
PARTITION: list[pa.Field] = [pa.field("date", pa.date32())]
# Delta partition columns: the UTC date only, so compaction merges the files of every capture of a
# day (rows of one capture are replaced by a predicate on capture_id, see lake.py). Lakes created
# before this partition by (date, capture_id) and keep that layout.
PARTITION_BY = ["date"]

HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
# The last body column of every decoded table: the values of the row that did not fit their column
# (out of range, not UTF-8, a timestamp no reader can represent, a negative latency), each as
# "column: value (why)"; the column itself holds null. See conform().
ANOMALIES = pa.field("anomalies", pa.list_(pa.string()))

COMMANDS = [
    pa.field("direction", pa.string()),  # c2s | s2c
    pa.field("command", pa.string()),
    pa.field("command_code", pa.int32()),
    pa.field("api_version", pa.int32()),
    pa.field("correlation_id", pa.int64()),
    pa.field("client_id", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("topic_id", pa.string()),  # the topic as the wire named it, where only by id
    pa.field("topics", pa.list_(pa.string())),
    pa.field("partition", pa.int32()),
    pa.field("error_code", pa.int32()),
    pa.field("throttle_time_ms", pa.int32()),
    pa.field("size", pa.int64()),  # frame bytes on the wire, framing included
    pa.field("stream_offset", pa.int64()),  # offset of the frame's first byte in its direction
    pa.field("ts_end", TS),  # time of the packet holding the frame's last byte
    pa.field("ts_end_ns", pa.int64()),
    # frame numbers (1-based packet record index in the capture file, as Wireshark counts them) of
    # the packets holding the frame's first and last byte (README "From a row to the packets")
    pa.field("first_frame", pa.int64()),
    pa.field("last_frame", pa.int64()),
    pa.field("decode_status", pa.string()),  # ok | malformed | truncated | checksum_mismatch | ...
    pa.field("decode_error", pa.string()),
    pa.field("details", pa.string()),  # JSON of every decoded field
    pa.field("raw", pa.binary()),  # the frame, kept only when it could not be decoded (capped)
]

MESSAGES = [
    pa.field("direction", pa.string()),  # produce | deliver | stored
    pa.field("source", pa.string()),  # capture | segment
    pa.field("topic", pa.string()),
    pa.field("topic_id", pa.string()),  # the topic as the wire named it, where only by id
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("message_id", pa.string()),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),  # per the payload policy
    pa.field("value_size", pa.int64()),  # size before the payload policy was applied
    pa.field("value_hash", pa.string()),  # sha256 hex when the policy is `hash`
    pa.field("headers", pa.list_(HEADER)),
    pa.field("message_ts", TS),
    pa.field("producer_id", pa.int64()),
    pa.field("producer_name", pa.string()),
    pa.field("producer_epoch", pa.int32()),
    pa.field("sequence", pa.int64()),
    pa.field("compression", pa.string()),
    pa.field("checksum_ok", pa.bool_()),
    pa.field("correlation_id", pa.int64()),  # of the command that carried the message
    pa.field("consumer", pa.string()),  # deliver rows: the subscription, group or consumer it went to
    # frame numbers of the first and last packet of the frame that carried the message (its
    # commands row's; a chunked Pulsar message: its first chunk's first to its last chunk's last)
    pa.field("first_frame", pa.int64()),
    pa.field("last_frame", pa.int64()),
    pa.field("decode_status", pa.string()),
    pa.field("decode_error", pa.string()),
    pa.field("details", pa.string()),
]

LATENCIES = [
    pa.field("request_command", pa.string()),
    pa.field("response_command", pa.string()),
    pa.field("api_version", pa.int32()),
    pa.field("correlation_id", pa.int64()),
    pa.field("request_ts", TS),  # last byte of the request
    pa.field("response_ts", TS),  # first byte of the response
    pa.field("latency_us", pa.float64()),
    pa.field("error_code", pa.int32()),
    pa.field("topic", pa.string()),
    pa.field("topic_id", pa.string()),  # the topic as the wire named it, where only by id
    pa.field("partition", pa.int32()),
]

ACKS = [
    pa.field("ack_type", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("topic_id", pa.string()),  # the topic as the wire named it, where only by id
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("message_id", pa.string()),
    pa.field("producer_id", pa.int64()),
    pa.field("sequence", pa.int64()),
    pa.field("consumer", pa.string()),
    pa.field("error_code", pa.int32()),
    pa.field("ack_latency_us", pa.float64()),
    pa.field("correlation_id", pa.int64()),
    pa.field("details", pa.string()),
]

STREAMS = [
    pa.field("detected_by", pa.string()),  # port | content | none
    pa.field("roles_by", pa.string()),  # syn | port | content | heuristic: how client/server was decided
    pa.field("first_ts", TS),
    pa.field("last_ts", TS),
    pa.field("duration_us", pa.float64()),  # last_ts - first_ts: first to last packet, any direction
    # frame numbers of the first and last packet (any direction): first_frame in the file of
    # capture_id, last_frame in the file the connection ends in (the same one unless it spans files)
    pa.field("first_frame", pa.int64()),
    pa.field("last_frame", pa.int64()),
    pa.field("c2s_packets", pa.int64()),
    pa.field("s2c_packets", pa.int64()),
    pa.field("c2s_bytes", pa.int64()),  # TCP payload bytes
    pa.field("s2c_bytes", pa.int64()),
    pa.field("c2s_frame_bytes", pa.int64()),  # whole frames on the wire, as tshark's conv,tcp counts
    pa.field("s2c_frame_bytes", pa.int64()),
    pa.field("gap_count", pa.int64()),
    pa.field("gap_bytes", pa.int64()),
    pa.field("retransmitted_bytes", pa.int64()),
    pa.field("out_of_order", pa.int64()),
    pa.field("frames_ok", pa.int64()),
    pa.field("frames_failed", pa.int64()),
    pa.field("syn_seen", pa.bool_()),
    pa.field("fin_seen", pa.bool_()),
    pa.field("rst_seen", pa.bool_()),
    pa.field("midstream", pa.bool_()),  # the capture starts after the handshake
    # Zeek's conn.log conn_state (S0 S1 SF REJ S2 S3 RSTO RSTR RSTOS0 RSTRH SH SHR OTH) and history
    # letters (S H A D F R I Q G T W, upper case: the client, as originator); README "Connection state"
    pa.field("conn_state", pa.string()),
    pa.field("history", pa.string()),
    pa.field("snap_truncated_packets", pa.int64()),
    pa.field("capture_ids", pa.list_(pa.string())),  # every input file the connection spans
    # TLS connections (docs/protocols/tls.md), null for clear ones: "TLS 1.2" | "TLS 1.3", the IANA
    # name of the suite chosen, the ClientHello's server name, the ALPN protocol chosen (TLS 1.3:
    # only when decrypted), and "yes" | "no key" | "failed: <why>". Packets and bytes above are
    # the TCP payload (ciphertext), frames_ok / frames_failed the plaintext's frames
    pa.field("tls_version", pa.string()),
    pa.field("tls_cipher", pa.string()),
    pa.field("tls_sni", pa.string()),
    pa.field("tls_alpn", pa.string()),
    pa.field("tls_decrypted", pa.string()),
    # application-data plaintext bytes decrypted per direction (what tshark's key log decrypts;
    # 0 without keys): records lost to gaps or failed are not counted
    pa.field("tls_c2s_bytes", pa.int64()),
    pa.field("tls_s2c_bytes", pa.int64()),
]

# What was ingested: one row per path and content, the nightly job's memory. Identical content
# under two paths is one input (decoded once) with a row per path; a path whose content changed
# keeps its earlier rows with status `replaced`.
INPUTS = [
    pa.field("capture_id", pa.string()),  # null for files that were rejected unread
    pa.field("path", pa.string()),
    pa.field("kind", pa.string()),  # pcap | pcapng | pcap.gz | pcapng.gz | kafka_segment | iggy_segment
    pa.field("size", pa.int64()),
    pa.field("mtime", TS),
    pa.field("run_id", pa.string()),
    pa.field("ingested_at", TS),
    pa.field("packets", pa.int64()),
    # ok | partial | error | replaced, or skipped: a file found in a directory that is no capture
    # or segment by its first bytes nor by its name (a README, checksums): no failure
    pa.field("status", pa.string()),
    pa.field("error", pa.string()),  # why partial, error or skipped: the first problems found, `; `-joined
    pa.field("damaged_bytes", pa.int64()),  # bytes skipped as damaged or cut off
    pa.field("replaced_by", pa.string()),  # status replaced: the capture_id of the path's newer content
    # the ingest filter (capture/filter.py: since=..;until=..;host=..;port=..), null when none,
    # and the packets it dropped (records outside the window, TCP segments of other endpoints)
    pa.field("filter", pa.string()),
    pa.field("filtered", pa.int64()),
    # the payload policy the rows were decoded under (PayloadPolicy.text: keep, truncate N, hash,
    # drop; " keys" where keys too): --skip-ingested decodes a file again under another one
    pa.field("payload", pa.string()),
    # several vantage points (docs/design.md "Vantage points"): the capture_id of the first capture
    # of this capture's vantage point in its run (a place's files chain in time; captures whose
    # record times overlap are two places); null for segment files
    pa.field("vantage", pa.string()),
    # its clock against the run's reference vantage point (brokerscope.clocks), from requests and
    # responses seen at both ends: its time minus the reference's for one instant (µs: subtract it
    # from its times to put them on the reference's clock), the bound the true offset lies within,
    # the reference (the capture_id naming its vantage point) and the request/response exchanges
    # matched with other vantage points. Null when it shares no exchange with another vantage point
    pa.field("clock_offset_us", pa.float64()),
    pa.field("clock_offset_bound_us", pa.float64()),
    pa.field("clock_offset_ref", pa.string()),
    pa.field("clock_offset_pairs", pa.int64()),
    # the run whose derived rows (journeys, lag) cover this capture: they were computed over every
    # capture naming the same run, and are computed again with them when one is ingested again
    # (Lake.finish_derived); null: none computed (or a lake older than this column): the capture's
    # set is then the captures of its run (run_id)
    pa.field("derived_run", pa.string()),
    # a plain capture's identity chunk digests (capture/files.py: blake2b-128 of each 8 MiB chunk,
    # hex, in order; null for other inputs and in rows older than the column): a file later found
    # shorter than this capture is checked against them (pipeline._shrunk: cut short, or other
    # content under the name)
    pa.field("chunk_digests", pa.string()),
]

# Message journeys (brokerscope.journeys, `[journeys] enabled` / `ingest --journeys`; README
# "Message journeys", each protocol's identity rule in docs/protocols/<name>.md "Journeys"): one
# row per message and consumer (Kafka group, Pulsar subscription, Iggy consumer, TubeMQ group),
# derived from the other tables of a run's captures after they are committed. Timestamps are the
# capture times of each step's frame; latencies are differences of them (µs, signed:
# ack_to_deliver_us is negative when the consumer got the message before the producer its ack).
JOURNEYS = [
    # the capture of the message's first sighting in the run (its produce row, else its first delivery)
    pa.field("capture_id", pa.string()),
    pa.field("protocol", pa.string()),  # kafka | pulsar | iggy | tubemq
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),  # null for Pulsar (no offsets)
    # as in messages: Kafka topic-partition@offset, Pulsar ledger:entry:batch_index, Iggy's u128
    # message id, TubeMQ's broker message id
    pa.field("message_id", pa.string()),
    # sha256 hex of the key sent (null key, or a key the payload policy truncated or dropped: null)
    pa.field("key_hash", pa.string()),
    # the consumer group (Kafka, TubeMQ), subscription (Pulsar), consumer:<id> | group:<id> (Iggy);
    # null: deliveries to a consumer no rule names (<protocol>.md "Journeys")
    pa.field("consumer", pa.string()),
    pa.field("ts", TS),  # the first step seen: produced, else first delivered (dates the row)
    # each step's time as Kafka takes it (the others from their own frames: <protocol>.md "Journeys")
    pa.field("produced_ts", TS),  # first byte of the Produce request carrying it
    pa.field("acked_ts", TS),  # first byte of the Produce response giving its partition's base offset
    pa.field("delivered_ts", TS),  # first byte of the first Fetch response delivering it to the group
    pa.field("committed_ts", TS),  # first successful OffsetCommit response of the group beyond it
    # the record's time in a segment file of the same run (Kafka, Iggy; joined on topic, partition,
    # offset; null: not in a segment read), the earliest where several hold it, as the segment
    # gives it (not moved onto a capture's clock); what that time is: stored_ts_type
    pa.field("stored_ts", TS),
    # log_append: the broker's clock when it appended the record (Kafka LogAppendTime: the batch's
    # MaxTimestamp; Iggy: the message's timestamp); create: the producer's timestamp the broker
    # kept (Kafka CreateTime), not a storage time
    pa.field("stored_ts_type", pa.string()),
    pa.field("deliveries", pa.int64()),  # deliveries to the consumer (0: not delivered)
    pa.field("redeliveries", pa.int64()),  # deliveries after the first
    pa.field("produce_to_ack_us", pa.float64()),
    pa.field("ack_to_deliver_us", pa.float64()),
    pa.field("produce_to_deliver_us", pa.float64()),
    pa.field("deliver_to_commit_us", pa.float64()),
    pa.field("status", pa.string()),  # delivered | delivered-not-committed | not-delivered | duplicate
    # produce requests carrying the record (Kafka: an idempotent producer's retries repeat its
    # producer id, epoch and sequence; Pulsar: a resent SEND its producer name and sequence id;
    # Iggy: its message id), answered or not
    pa.field("produce_attempts", pa.int64()),
    # status duplicate: the message_id of the same record's first copy (Iggy, whose copies share
    # their id: its topic-partition@offset), a resend the broker stored again (<protocol>.md)
    pa.field("duplicate_of", pa.string()),
    pa.field("producer_conn_id", pa.string()),  # the connection of the produce request
    pa.field("consumer_conn_id", pa.string()),  # the connection of the first delivery
    # several vantage points (docs/design.md "Vantage points"): some of the row's times come from a
    # capture whose clock is off the reference's and were moved onto it by its estimated offset
    # (inputs.clock_offset_us); its latencies are then between corrected times. False: as captured
    pa.field("clock_corrected", pa.bool_()),
]

# Consumer lag (brokerscope.lag, `[lag] enabled` / `ingest --lag`; README "Consumer lag",
# docs/protocols/kafka.md and iggy.md "Lag"): one row per consumer, partition and minute in which a
# sample was seen, derived from the other tables of a run's captures like the journeys. Offsets
# are "next to read" (Kafka's convention: Iggy's stored offsets + 1), each the latest known at
# the end of the minute (carried over from earlier minutes: a consumer that stopped keeps rows
# while its partition's high watermark is seen moving).
LAG = [
    pa.field("capture_id", pa.string()),  # the capture of the minute's last sample
    pa.field("protocol", pa.string()),  # kafka | iggy | pulsar
    # the consumer group (Kafka, as journeys attribute deliveries); the consumer or consumer group
    # the Iggy client named (`consumer:7`, `group:3`, as in acks); the Pulsar subscription
    pa.field("consumer", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("minute", TS),  # the minute's start
    pa.field("ts", TS),  # the minute's last sample (dates the row)
    # the partition's high watermark: Kafka Fetch responses' HighWatermark, Iggy poll replies'
    # current_offset + 1
    pa.field("high_watermark", pa.int64()),
    pa.field("log_start_offset", pa.int64()),  # Kafka: the partition's first offset kept
    pa.field("committed_offset", pa.int64()),  # OffsetCommit's offset; Iggy's stored offset + 1
    pa.field("committed_ts", TS),  # first byte of the response that acknowledged it
    pa.field("delivered_offset", pa.int64()),  # the latest message delivered to the consumer + 1
    pa.field("delivered_ts", TS),  # first byte of the response that delivered it
    # high_watermark - committed_offset; Pulsar: the consumer-stats answer's msg_backlog
    pa.field("lag_committed", pa.int64()),
    pa.field("lag_delivered", pa.int64()),  # high_watermark - delivered_offset
    # high watermarks of the partition seen in the minute (Pulsar: consumer-stats answers)
    pa.field("hwm_samples", pa.int64()),
    pa.field("commits", pa.int64()),  # the consumer's commits of the partition in the minute
    pa.field("deliveries", pa.int64()),  # messages of the partition delivered to it in the minute
]

_BODIES: dict[str, list[pa.Field]] = {
    "commands": COMMANDS,
    "messages": MESSAGES,
    "latencies": LATENCIES,
    "acks": ACKS,
    "streams": STREAMS,
}
DECODED_TABLES = ("commands", "messages", "latencies", "acks", "streams")
TABLES = (*DECODED_TABLES, "inputs")  # the tables every lake has
# tables derived from the decoded ones, created by the first run that computes them
DERIVED_TABLES = ("journeys", "lag")
ALL_TABLES = (*DECODED_TABLES, *DERIVED_TABLES, "inputs")


def schema(table: str) -> pa.Schema:
    """The full Arrow schema of an output table (partition column last)."""
    if table == "inputs":
        return pa.schema(INPUTS + [pa.field("date", pa.date32())])
    if table == "journeys":
        return pa.schema(JOURNEYS + PARTITION)
    if table == "lag":
        return pa.schema(LAG + PARTITION)
    return pa.schema(SHARED + _BODIES[table] + [ANOMALIES] + PARTITION)


def partition_by(table: str) -> list[str]:
    return [] if table == "inputs" else list(PARTITION_BY)


_EPOCH_DATE = _dt.date(1970, 1, 1)


_DAY_NS = 86_400_000_000_000  # nanoseconds in a day (dates from ts_ns)
# datetime's range, which Spark, pandas and Python readers convert timestamps through
_TS_MIN_US = -62_135_596_800_000_000  # 0001-01-01
_TS_MAX_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999
# columns whose negative value is a clock's doing: null, and an anomaly saying why
_RESPONSE_FIRST = "negative: the response is timed before the request"
_NON_NEGATIVE = {
    "latencies": {"latency_us": _RESPONSE_FIRST},
    "acks": {"ack_latency_us": _RESPONSE_FIRST},
    "streams": {"duration_us": "negative: the last packet is timed before the first (a clock stepped back)"},
}


class PerRun:
    """A `Block` constant that changes from one run of its rows to the next: `values[i]` for
    `counts[i]` rows (the batch-level fields of a block of several Kafka batches). `conform`
    repeats each value over its rows as it does a constant."""

    __slots__ = ("values", "counts")

    def __init__(self, values: list, counts: list[int]):
        self.values = values
        self.counts = counts

    def expand(self) -> list:
        """One value per row."""
        return [v for v, k in zip(self.values, self.counts) for _ in range(k)]


def _const_rows(v, n: int) -> list:
    """A block constant as one value per row (n rows)."""
    return v.expand() if v.__class__ is PerRun else [v] * n


class Parts:
    """A block's column left as `n` rows of buffers a compiled walk wrote (`parts`, in the form
    its kind's `gather` reads), not built into an array: `conform` builds the column of every
    block of a batch that gives it as parts of one kind in one `gather` call, without an array
    per block to join. A subclass is a kind: `typ`, the type `gather` builds, and `gather`."""

    __slots__ = ("parts", "n")
    typ: pa.DataType

    def __init__(self, parts: list[tuple], n: int):
        self.parts = parts
        self.n = n

    def array(self) -> pa.Array:
        """These rows alone as an array."""
        whole = self.gather([self])
        if whole is None:
            raise ValueError(f"{self.n} rows of {type(self).__name__} do not fit one {self.typ} array")
        return whole

    @classmethod
    def gather(cls, cols: list[Parts]) -> pa.Array | None:
        """The rows of `cols`, in order, as one array; None where they do not fit one (a binary
        column past 2 GiB): conform then joins each one's `array()` as it does arrays."""
        raise NotImplementedError(f"{cls.__name__} names no way to gather its parts")


class Block:
    """Rows of one table held as columns: the decoders' fast path for many rows at once (a Kafka
    record batch). `cols` maps a column (or an `X_ns` key) to `n` values, as a list, an Arrow
    array or `Parts`; `const` maps one to the value every row has (or a `PerRun`: a value per run
    of rows). `conform` takes blocks among dict rows."""

    __slots__ = ("n", "cols", "const")

    def __init__(self, n: int, cols: dict | None = None, const: dict | None = None):
        self.n = n
        self.cols: dict[str, list | pa.Array] = cols or {}
        self.const: dict = const or {}

    def __len__(self) -> int:
        return self.n

    def column(self, name: str) -> list:
        """The values of `name`, one per row, as Python values."""
        if name in self.cols:
            v = self.cols[name]
            if isinstance(v, Parts):
                v = v.array()
            return v.to_pylist() if isinstance(v, pa.Array) else list(v)
        return _const_rows(self.const.get(name), self.n)

    def rows(self) -> list[dict]:
        """The block as dict rows (tests, tools): every key it has, on every row."""
        names = [*self.cols, *(k for k in self.const if k not in self.cols)]
        columns = [self.column(k) for k in names]
        return [dict(zip(names, vals)) for vals in zip(*columns)] if self.n else []

    def take(self, idx: list[int]) -> Block:
        """The rows at positions `idx`, in that order."""
        at = pa.array(idx, pa.int64())
        cols = {}
        for k, v in self.cols.items():
            if isinstance(v, Parts):
                v = v.array()
            cols[k] = v.take(at) if isinstance(v, pa.Array) else [v[i] for i in idx]
        const = {k: v for k, v in self.const.items() if v.__class__ is not PerRun}
        for k, v in self.const.items():
            if v.__class__ is PerRun:
                rows = v.expand()
                cols[k] = [rows[i] for i in idx]
        return Block(len(idx), cols, const)


def size(row: Mapping | Block) -> int:
    """Rows in one item a decoder gives: a block's length, 1 for a dict row."""
    return len(row) if isinstance(row, Block) else 1


def conform(table: str, rows: Iterable[Mapping | Block]) -> pa.RecordBatch:
    """Build an Arrow batch of `table` from dict rows and `Block`s, in their order.

    Every timestamp column `X` may be given as integer nanoseconds under the key `X_ns` (`ts_ns`,
    `ts_end_ns`, `request_ts_ns`, `message_ts_ns`, ...): where `X_ns` is itself a column it is kept,
    and `X` is derived from it. `date` defaults to the UTC date of `ts_ns` (1970-01-01 without
    one). Unknown keys are an error (a typo would otherwise silently drop data). Consecutive dict
    rows convert in one pass of Arrow over the dicts; a block's Arrow columns need no conversion.

    A value that does not fit its column never fails the batch: it becomes null and the row's
    `anomalies` says which column held what and why (values are kept as found, a timestamp in the
    wrong unit is not reinterpreted). Good columns take one conversion; only a column that fails
    is converted value by value.
    """
    sch = schema(table)
    runs = _runs(rows if isinstance(rows, list) else list(rows), sch)
    n = sum(r[0] for r in runs)
    keys: set = set()
    for _n, cols, const in runs:
        keys.update(cols, const)
    unknown = keys - set(sch.names) - {f"{f.name}_ns" for f in sch if pa.types.is_timestamp(f.type)}
    if unknown:
        raise KeyError(f"{table}: unknown column(s) {sorted(unknown)}")
    bad: dict[int, list[str]] = {}  # row index -> anomalies found here
    ns_cols: dict[str, pa.Array] = {}

    def ns(key: str) -> pa.Array:  # an `X_ns` key as int64, converted once for its column, X and date
        if key not in ns_cols:
            if key in sch.names:
                ns_cols[key] = _column(runs, key, pa.int64(), bad)
            else:  # the anomaly names the column the value was for, and its unit
                found: dict[int, list[str]] = {}
                ns_cols[key] = _column(runs, key, pa.int64(), found)
                for i, texts in found.items():
                    bad.setdefault(i, []).extend(_for_column(t, key) for t in texts)
        return ns_cols[key]

    arrays = []
    for f in sch:
        name = f.name
        if name == "anomalies":
            arrays.append(None)  # filled last
        elif pa.types.is_timestamp(f.type):
            arrays.append(_timestamps(runs, n, name, keys, f.type, bad, ns))
        elif name == "date" and name not in keys:
            arrays.append(_dates(n, keys, ns))
        elif name in keys and name.endswith("_ns") and f.type == pa.int64():
            arrays.append(ns(name))
        elif name in keys:
            arrays.append(_column(runs, name, f.type, bad))
        else:
            arrays.append(pa.nulls(n, type=f.type))
    for name, why in _NON_NEGATIVE.get(table, {}).items():
        i = sch.get_field_index(name)
        arrays[i] = _non_negative(arrays[i], name, why, bad)
    if "anomalies" in sch.names:
        i = sch.get_field_index("anomalies")
        if bad:
            given = list(_gather(runs, "anomalies")) if "anomalies" in keys else [None] * n
            for r, found in bad.items():  # a ts_ns that overflows is reported once, not for ts too
                given[r] = list(dict.fromkeys([*(given[r] or []), *found]))
            arrays[i] = pa.array(given, type=ANOMALIES.type)
        elif "anomalies" in keys:
            arrays[i] = _column(runs, "anomalies", ANOMALIES.type, bad)
        else:
            arrays[i] = pa.nulls(n, type=ANOMALIES.type)
    return pa.RecordBatch.from_arrays(arrays, schema=sch)


Run = tuple[int, dict, dict]  # rows, columns (lists or arrays), constants


class Runs(list):
    """The runs of one conform call, and what converting each column asks of them, found in one
    pass: the names some run gives as a column (`given`), as an Arrow array (`arrow`, with how
    many runs do)."""

    def __init__(self, runs: list[Run]):
        super().__init__(runs)
        self.given: set[str] = set()
        self.arrow: dict[str, int] = {}  # name -> how many runs give it as an Arrow array
        self.per_run: set[str] = set()  # constants some block gives as a PerRun
        self.parts: dict[str, int] = {}  # name -> how many runs give it as Parts
        self.rows = 0
        for n, cols, const in runs:
            self.rows += n
            self.given.update(cols)
            for k, v in cols.items():
                if isinstance(v, pa.Array):
                    self.arrow[k] = self.arrow.get(k, 0) + 1
                elif isinstance(v, Parts):
                    self.parts[k] = self.parts.get(k, 0) + 1
            for k, v in const.items():
                if v.__class__ is PerRun:
                    self.per_run.add(k)
        self._ends: pa.Array | None = None
        self._counts: np.ndarray | None = None

    def ends(self) -> pa.Array:
        """The run ends (int32) of the runs that hold rows: every constant column repeats its
        values over them."""
        if self._ends is None:
            self._ends = pa.array(list(accumulate(n for n, _c, _k in self if n)), type=pa.int32())
        return self._ends

    def counts(self) -> np.ndarray:
        """The rows of each run that holds some (what `ends` ends)."""
        if self._counts is None:
            self._counts = np.array([n for n, _c, _k in self if n], dtype=np.int64)
        return self._counts


def _runs(rows: list, sch: pa.Schema) -> Runs:
    """Consecutive dict rows as one run of columns; each block a run of its own."""
    runs: list[Run] = []
    i = 0
    while i < len(rows):
        if isinstance(rows[i], Block):
            b = rows[i]
            runs.append((b.n, b.cols, b.const))
            i += 1
            continue
        j = i
        while j < len(rows) and not isinstance(rows[j], Block):
            j += 1
        part = rows[i:j] if i or j < len(rows) else rows
        runs.append((len(part), _dict_columns(part, sch), {}))
        i = j
    return Runs(runs)


def _dict_columns(part: list[Mapping], sch: pa.Schema) -> dict:
    """The columns of dict rows: typed ones converted by Arrow in one pass over the dicts (a
    struct array), the rest (timestamps given as datetimes or µs, unknown keys) and every column
    of rows holding a value that does not fit as lists, for conform to convert column by column."""
    keys = set().union(*part)
    types = {k: t for k in keys if (t := _key_type(sch, k)) is not None}
    cols: dict = {k: [r.get(k) for r in part] for k in keys - types.keys()}
    if types:
        try:
            whole = pa.array(part, type=pa.struct([pa.field(k, t) for k, t in types.items()]))
            cols.update({k: whole.field(k) for k in types})
        except _CONVERSION_ERRORS:
            cols.update({k: [r.get(k) for r in part] for k in types})
    return cols


def _key_type(sch: pa.Schema, key: str) -> pa.DataType | None:
    """The Arrow type a row key converts to: its column's, int64 for `X_ns` of a timestamp
    column `X`, none for `X` itself (µs or datetimes, see _to_us) and for unknown keys."""
    i = sch.get_field_index(key)
    if i >= 0:
        typ = sch.field(i).type
        return None if pa.types.is_timestamp(typ) else typ
    if key.endswith("_ns") and sch.get_field_index(key[:-3]) >= 0:
        return pa.int64()
    return None


def _gather(runs: list[Run], name: str, convert=None) -> list:
    """The values of `name` over every run, as one Python list."""
    if len(runs) == 1 and name in runs[0][1] and not isinstance(runs[0][1][name], pa.Array) and not convert:
        return runs[0][1][name]
    out: list = []
    for n, cols, const in runs:
        v = cols.get(name)
        if isinstance(v, Parts):
            v = v.array()
        if v is None:
            out.extend(_const_rows(const.get(name), n))
        elif isinstance(v, pa.Array):
            out.extend(v.to_pylist())
        else:
            out.extend(v)
    return [convert(v) for v in out] if convert else out


def _column(runs: Runs, name: str, typ: pa.DataType, bad: dict[int, list[str]], convert=None) -> pa.Array:
    """Column `name` as an array of `typ`: Arrow columns of blocks as they are, every other stretch
    of runs converted in one step (value by value only where that fails)."""
    if convert is None and (len(runs) > 1 or name in runs.per_run) and name not in runs.given:
        return _repeated(runs, name, typ, bad)
    if name in runs.parts:
        whole = _gathered(runs, name, typ)
        if whole is not None:
            return whole
    if name not in runs.arrow:
        return _values(_gather(runs, name, convert), name, typ, bad)
    if runs.arrow[name] == len(runs):  # every run an array: joined as they are where all are `typ`
        chunks = [cols[name] for _n, cols, _c in runs]
        if all(c.type == typ for c in chunks):
            return chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    chunks = []
    start = 0
    pending: list[Run] = []
    at = 0
    for run in [*runs, None]:
        arr = None if run is None else run[1].get(name)
        if run is None or isinstance(arr, pa.Array):
            if pending:
                chunks.append(_values(_gather(pending, name, convert), name, typ, bad, start))
                pending = []
            if run is not None:
                chunks.append(_typed(arr, name, typ, bad, at))
                at += run[0]
                start = at
            continue
        pending.append(run)
        at += run[0]
    return pa.concat_arrays(chunks)


def _gathered(runs: Runs, name: str, typ: pa.DataType) -> pa.Array | None:
    """Column `name` by one `gather` where every run gives it as Parts of one kind building
    `typ`; else None, each run's Parts made its own array for the ways of `_column`."""
    given = [cols[name] for _n, cols, _c in runs if name in cols]
    if runs.parts[name] == len(runs):
        kind = given[0].__class__
        if kind.typ == typ and all(v.__class__ is kind for v in given):
            whole = kind.gather(given)
            if whole is not None:
                return whole
    for _n, cols, _c in runs:
        v = cols.get(name)
        if isinstance(v, Parts):
            cols[name] = v.array()
    runs.arrow[name] = runs.arrow.get(name, 0) + runs.parts.pop(name)
    return None


_INT32_MAX = 2**31 - 1
_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError)


def _repeated(runs: Runs, name: str, typ: pa.DataType, bad: dict[int, list[str]]) -> pa.Array:
    """A column every run gives as a constant (a block's batch-level fields): one value per run,
    converted once and repeated by Arrow, not a Python value per row."""
    kept = [const.get(name) for n, _cols, const in runs if n]
    if not kept:
        return pa.nulls(0, type=typ)
    end_list = None
    if name in runs.per_run:  # a PerRun: its values and the ends of its runs of rows
        kept, at, end_list = [], 0, []
        for n, _cols, const in runs:
            v = const.get(name)
            if v.__class__ is PerRun:
                for value, k in zip(v.values, v.counts):
                    if k:
                        at += k
                        kept.append(value)
                        end_list.append(at)
            elif n:
                at += n
                kept.append(v)
                end_list.append(at)
    first = kept[0]
    classes = set(map(type, kept))  # one class: 1 == True, yet they convert differently
    if len(classes) == 1 and kept.count(first) == len(kept):  # one value for all rows
        whole = _one_value(first, typ, runs.rows)
        if whole is not None:
            return whole
    ends = runs.ends() if end_list is None else pa.array(end_list, type=pa.int32())
    if classes == _INT and pa.types.is_integer(typ):
        try:  # a value out of the type's range goes the general way below, which notes it
            values_np = np.array(kept, dtype=typ.to_pandas_dtype())
        except OverflowError:
            pass
        else:  # 8x quicker than run-end decoding a few dozen runs
            counts = runs.counts() if end_list is None else np.diff(ends.to_numpy(), prepend=0)
            return pa.array(np.repeat(values_np, counts), type=typ)
    try:
        values = pa.array(kept, type=typ)
    except _CONVERSION_ERRORS:  # value by value, each bad row noted
        return _values(_gather(runs, name), name, typ, bad)
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, values))


_INT = {int}


def _one_value(v, typ: pa.DataType, n: int) -> pa.Array | None:
    """`v` as `n` values of `typ`, built whole rather than run-end decoded (which goes row by
    row for lists); None where this does not apply or `v` does not convert (the caller then
    converts it the general way, noting why)."""
    if v is None:
        return pa.nulls(n, type=typ)
    if v.__class__ is list:
        if v or not pa.types.is_list(typ):
            return None
        # empty lists: n + 1 zero offsets
        return pa.Array.from_buffers(
            typ, n, [None, pa.py_buffer(bytes(4 * (n + 1)))], children=[pa.array([], typ.value_type)]
        )
    if v.__class__ is str and typ == pa.string():
        try:
            data = v.encode()
        except UnicodeEncodeError:
            return None
        if n * len(data) > _INT32_MAX:
            return None
        offsets = np.arange(0, (n + 1) * len(data), len(data), dtype=np.int32) if data else bytes(4 * (n + 1))
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])
    if v.__class__ is int and pa.types.is_integer(typ):
        try:  # 3x quicker than pa.repeat
            return pa.array(np.full(n, v, dtype=typ.to_pandas_dtype()), type=typ)
        except OverflowError:
            return None
    if v.__class__ in (int, bool, float) and pa.types.is_primitive(typ):
        try:
            return pa.repeat(pa.scalar(v, type=typ), n)
        except _CONVERSION_ERRORS:
            return None
    return None


def _typed(arr: pa.Array, name: str, typ: pa.DataType, bad: dict[int, list[str]], start: int) -> pa.Array:
    """A block's Arrow column as `typ`; one that does not cast goes value by value."""
    if arr.type == typ:
        return arr
    try:
        return arr.cast(typ)
    except _CONVERSION_ERRORS:
        return _values(arr.to_pylist(), name, typ, bad, start)


def _values(vals: list, name: str, typ: pa.DataType, bad: dict[int, list[str]], start: int = 0) -> pa.Array:
    """`vals` as an array of `typ`; a value that does not convert is null and noted in `bad` (by
    row index, `vals[0]` being row `start`)."""
    try:
        return pa.array(vals, type=typ)
    except _CONVERSION_ERRORS:
        pass
    out = []
    for i, v in enumerate(vals):
        try:
            pa.array([v], type=typ)
            out.append(v)
        except _CONVERSION_ERRORS as e:
            out.append(None)
            bad.setdefault(start + i, []).append(_anomaly(name, v, _why(v, typ, e)))
    return pa.array(out, type=typ)


def _why(v, typ: pa.DataType, e: Exception) -> str:
    if isinstance(v, int) and pa.types.is_integer(typ):
        return f"out of range for {typ}"
    if isinstance(v, bytes | bytearray) and pa.types.is_string(typ):
        return "not UTF-8"
    return f"not a {typ}: {type(e).__name__}"


def _for_column(text: str, key: str) -> str:
    """An anomaly of key `X_ns` (not a column) as one of column `X`: `X: <value> ns (<why>)`."""
    value, why = text[len(key) + 2 :].split(" (", 1)
    return f"{key[:-3]}: {value} ns since 1970 ({why}"


def _anomaly(name: str, v, why: str) -> str:
    text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{name}: {text} ({why})"


def _non_negative(arr: pa.Array, name: str, why: str, bad: dict[int, list[str]]) -> pa.Array:
    neg = pc.fill_null(pc.less(arr, 0), False)
    if not pc.any(neg).as_py():
        return arr
    for i in pc.indices_nonzero(neg).to_pylist():
        bad.setdefault(i, []).append(_anomaly(name, arr[i].as_py(), why))
    return pc.if_else(neg, pa.scalar(None, arr.type), arr)


def _timestamps(
    runs: Runs, n: int, name: str, keys: set, typ: pa.DataType, bad: dict[int, list[str]], ns
) -> pa.Array:
    ns_key = f"{name}_ns"
    from_ns = None
    if ns_key in keys:  # checked as found, whatever else the batch holds
        from_ns = pc.divide(ns(ns_key), 1000)
        if name not in keys:
            # int64 nanoseconds are years 1677-2262 as microseconds: always in range
            return from_ns.cast(typ)
    if name not in keys:
        return pa.nulls(n, type=typ)
    # explicit values (us ints or datetimes) win, ns fill where they are missing
    us = _column(runs, name, pa.int64(), bad, convert=_to_us)
    if from_ns is not None:
        us = pc.coalesce(us, from_ns)
    out = pc.and_(pc.greater_equal(us, _TS_MIN_US), pc.less_equal(us, _TS_MAX_US))
    out = pc.invert(pc.fill_null(out, True))
    if pc.any(out).as_py():
        for i in pc.indices_nonzero(out).to_pylist():
            bad.setdefault(i, []).append(_anomaly(name, us[i].as_py(), "µs since 1970 outside years 1-9999"))
        us = pc.if_else(out, pa.scalar(None, pa.int64()), us)
    return us.cast(typ)


def _dates(n: int, keys: set, ns) -> pa.Array:
    if "ts_ns" not in keys:
        return pa.array([_EPOCH_DATE] * n, type=pa.date32())
    ts_ns = ns("ts_ns")
    if n and not ts_ns.null_count:
        bounds = pc.min_max(ts_ns)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if lo >= 0 and lo // _DAY_NS == hi // _DAY_NS:  # one day (as a batch mostly is): filled
            return pa.array(np.full(n, lo // _DAY_NS, np.int32)).cast(pa.date32())
    days = pc.divide(ts_ns, _DAY_NS)  # floor for the (non-negative) capture times
    return pc.fill_null(days, 0).cast(pa.int32()).cast(pa.date32())


def _to_us(v) -> int | None:
    """Timestamps are given as microseconds since the epoch (int) or datetime."""
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        return int(v.timestamp() * 1_000_000)
    return int(v)


# ---------------------------------------------------------------------------------------------
# Internal: the packet batches the capture stage produces and the stream stage consumes.
# One row per TCP segment (after IPv4 defragmentation). The canonical endpoint pair (lo, hi)
# orders the two endpoints so both directions of a connection share one key.
PACKETS = pa.schema(
    [
        pa.field("capture_id", pa.string()),
        pa.field("file_index", pa.int32()),  # position of the file in the capture set
        pa.field("rec_offset", pa.int64()),  # byte offset of the record in its (decompressed) file
        # the record's 1-based number among the packet records of its split (every record read,
        # whatever it holds or the filter drops); the decode stage adds the records of the file's
        # earlier splits (capture.files.FrameNumbers): the frame number Wireshark shows
        pa.field("record_no", pa.int64()),
        pa.field("ts_ns", pa.int64()),
        pa.field("lo_ip", pa.string()),
        pa.field("lo_port", pa.int32()),
        pa.field("hi_ip", pa.string()),
        pa.field("hi_port", pa.int32()),
        pa.field("from_lo", pa.bool_()),  # sender is the lo endpoint
        pa.field("seq", pa.int64()),
        pa.field("ack", pa.int64()),
        pa.field("flags", pa.int32()),  # TCP flags byte (FIN=1 SYN=2 RST=4 PSH=8 ACK=16 URG=32)
        pa.field("window", pa.int32()),
        pa.field("wire_len", pa.int32()),  # original frame length on the wire
        pa.field("payload_len", pa.int32()),  # TCP payload length per the IP header
        pa.field("snap_truncated", pa.bool_()),  # payload shorter than payload_len (snap length)
        pa.field("payload", pa.binary()),
        # when payload is null: the payload's offset in its (plain) file, payload_len bytes long
        pa.field("payload_at", pa.int64()),
        # where the packet sorts among its connection's (streams.SORT_COLS): ts_ns, or where the
        # file's timestamps go back (a clock stepped back, merged queues, a wrong time) the key
        # that keeps the file's own order, as Wireshark's (capture.decode._Order, SplitOrder)
        pa.field("order_ns", pa.int64()),
    ]
)
# Per-split counters travel in the same stream as rows with a null lo_ip (see capture.reader).
