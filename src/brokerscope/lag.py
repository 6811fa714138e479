"""Consumer lag per minute: the broker's high watermark against each consumer's committed and
delivered offsets, from a run's committed rows.

Computed on the driver after a run has committed the decoded tables, like the journeys (and with
the readers and group rules of derived.py), over the rows of the run's capture ids only, as Arrow and
numpy columns. One row per (protocol, consumer, topic, partition, minute) in which a sample of
any kind was seen; each offset is the latest one known at the end of that minute (carried over
from earlier minutes), so a consumer that stopped keeps rows, with its lag growing, for as long
as the partition's high watermark is seen moving (another consumer's fetches). The columns are
in tables.LAG, the rules in docs/protocols/kafka.md, iggy.md and pulsar.md ("Lag").

The samples, in offsets "next to read" (the Kafka convention: a committed offset of 5 means
messages 0-4 are done):

- high watermark: Kafka Fetch responses, per partition (`HighWatermark`, with `LogStartOffset`),
  from the commands rows' details (any consumer's, follower fetches too: it is the partition's);
  Iggy POLL_MESSAGES replies, `current_offset` + 1 (the offset of the partition's last message);
- committed: Kafka `kafka_offset_commit` acks (OffsetCommit, succeeded) of the group, and until
  the first of them, the group's committed offset read back by OffsetFetch (a commit made before
  the capture began; not counted in `commits`); Iggy `iggy_offset` acks (stored offsets,
  explicit or a poll's auto-commit) + 1;
- delivered: the latest delivered message + 1: Kafka Fetch `deliver` rows, attributed to their
  consumer group as journeys attribute them (derived.groups_of_connections; deliveries no group
  rule names are left out); Iggy deliver rows, whose `consumer` the poll named.

Pulsar has no offsets (its message ids are ledger:entry positions), but a subscription's backlog
in messages is on the wire in the broker's CONSUMER_STATS_RESPONSE, the answer to a client's
CONSUMER_STATS (sent only when an application asks for a consumer's broker stats): each answer
with a `msg_backlog` is a BACKLOG sample of the
subscription, its row's `lag_committed` (the messages not yet acknowledged), the offset columns
null (docs/protocols/pulsar.md "Lag"). TubeMQ has none: its responses' currOffset and maxOffset
are byte positions in its index files, whose entry size is a broker constant no frame carries, so
no count of messages (docs/protocols/tubemq.md "Journeys").
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import tables
from .derived import GROUP_COMMANDS, groups_of_connections, ints, nullable, one_batch, read_rows, row_codes

MINUTE_NS = 60 * 1_000_000_000
# sample kinds; READ_BACK: a Kafka group's committed offset read back (OffsetFetch responses)
HWM, COMMIT, DELIVER, BACKLOG, READ_BACK = 0, 1, 2, 3, 4
STATS_RESPONSE = "CONSUMER_STATS_RESPONSE"  # Pulsar's answer holding a subscription's backlog

# commands rows read: Kafka Fetch responses (high watermarks), Metadata responses (topic ids),
# OffsetFetch requests and responses (committed offsets read back), the requests naming a
# client's group (journeys' attribution); Iggy poll replies; Pulsar consumer-stats answers
# (backlogs)
CMD_COLUMNS = (
    "capture_id",
    "protocol",
    "direction",
    "command",
    "client_ip",
    "client_id",
    "conn_id",
    "topic",
    "topic_id",
    "partition",
    "correlation_id",
    "ts_ns",
    "details",
)
ACK_COLUMNS = (
    "capture_id",
    "protocol",
    "ack_type",
    "consumer",
    "topic",
    "partition",
    "offset",
    "error_code",
    "ts_ns",
)
MSG_COLUMNS = (
    "capture_id",
    "protocol",
    "topic",
    "topic_id",
    "partition",
    "offset",
    "consumer",
    "ts_ns",
    "conn_id",
)
# a sample of any kind: the consumer (null for a high watermark, the partition's), the offset as
# "next to read" (BACKLOG: the backlog in messages), the log start offset (Kafka's high
# watermarks)
SAMPLE = pa.schema(
    [
        ("kind", pa.int8()),
        ("capture_id", pa.string()),
        ("protocol", pa.string()),
        ("consumer", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("ts_ns", pa.int64()),
        ("value", pa.int64()),
        ("log_start", pa.int64()),
    ]
)


def compute(root: str, capture_ids: list[str]) -> pa.RecordBatch:
    """The lag rows of the captures `capture_ids` from the lake at `root`."""
    ids = sorted(capture_ids)
    kafka, iggy = pc.field("protocol") == "kafka", pc.field("protocol") == "iggy"
    pulsar = pc.field("protocol") == "pulsar"
    s2c = (pc.field("direction") == "s2c") & (pc.field("decode_status") == "ok")
    cmds = read_rows(
        f"{root}/commands",
        ids,
        CMD_COLUMNS,
        (kafka & s2c & pc.field("command").isin(["Fetch", "Metadata", "OffsetFetch"]))
        | (iggy & s2c & (pc.field("command") == "POLL_MESSAGES"))
        | (pulsar & s2c & (pc.field("command") == STATS_RESPONSE))
        | (
            kafka
            & (pc.field("direction") == "c2s")
            & (pc.field("client_id").is_valid() | (pc.field("command") == "OffsetFetch"))
            & pc.field("command").isin(["Fetch", *GROUP_COMMANDS])
        ),
        ("protocol", "direction", "command", "decode_status", "client_id"),
    )
    acks = read_rows(
        f"{root}/acks",
        ids,
        ACK_COLUMNS,
        pc.field("ack_type").isin(["kafka_offset_commit", "iggy_offset"]),
        ("ack_type",),
    )
    # deliveries with an offset: Kafka Fetch's (a named consumer: ShareFetch, share groups, left
    # out), Iggy's (the consumer the poll named)
    msgs = read_rows(
        f"{root}/messages",
        ids,
        MSG_COLUMNS,
        (pc.field("direction") == "deliver")
        & pc.field("offset").is_valid()
        & ((kafka & pc.field("consumer").is_null()) | (iggy & pc.field("consumer").is_valid())),
        ("protocol", "direction"),
    )
    names = _topic_names(cmds, msgs)
    samples = pa.concat_tables(
        [
            _watermarks(cmds, names),
            _commits(acks),
            _read_back(cmds, names),
            _deliveries(msgs, cmds),
            _backlogs(cmds),
        ]
    )
    return tables.conform("lag", [_lag_block(one_batch(samples.combine_chunks()))])


def _samples(kind: int, n: int, **cols) -> pa.Table:
    """`n` samples of `kind` from columns named as in SAMPLE (Arrow arrays or lists; others null)."""
    arrays = [pa.array(np.full(n, kind, np.int8))]
    for f in list(SAMPLE)[1:]:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(v, pa.Array | pa.ChunkedArray):
            arrays.append(v.cast(f.type))
        else:
            arrays.append(pa.array(v, f.type))
    return pa.Table.from_arrays(arrays, schema=SAMPLE)


def _tuples(kind: int, fields: tuple[str, ...], found: list[tuple], **cols) -> pa.Table:
    """Samples of `kind` from tuples of the `fields` (and columns `cols`, as _samples takes them)."""
    columns = zip(*found) if found else [[]] * len(fields)
    return _samples(kind, len(found), **dict(zip(fields, columns)), **cols)


def _json(text: str | None) -> dict:
    try:
        d = json.loads(text or "{}")
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _topic_names(cmds: pa.RecordBatch, msgs: pa.RecordBatch) -> dict[str, str]:
    """Topic id -> name from the pairs the rows hold (named across the capture set, topics.py),
    then from Kafka Metadata responses."""
    names: dict[str, str] = {}
    for t in (cmds, msgs):
        both = t.filter(pc.and_(t["topic_id"].is_valid(), t["topic"].is_valid()))
        if both.num_rows:
            g = pa.table({"i": both["topic_id"], "n": both["topic"]}).group_by(["i", "n"]).aggregate([])
            names.update(zip(g["i"].to_pylist(), g["n"].to_pylist()))
    meta = cmds.filter(pc.equal(cmds["command"], "Metadata"))
    for details in meta["details"].to_pylist():
        for t in _json(details).get("Topics") or ():
            if isinstance(t, dict) and t.get("Name") and t.get("TopicId"):
                names.setdefault(t["TopicId"], t["Name"])
    return names


def _watermarks(cmds: pa.RecordBatch, names: dict[str, str]) -> pa.Table:
    """The high watermark samples: each partition of a Kafka Fetch response without an error
    (its topic by name, or by id `names` names), each Iggy poll reply (`current_offset` + 1; a
    reply of no messages at offset 0 may be an empty partition or one of a single message: left
    out)."""
    resp = cmds.filter(
        pc.and_(
            pc.equal(cmds["direction"], "s2c"),
            pc.is_in(cmds["command"], pa.array(["Fetch", "POLL_MESSAGES"])),
        )
    )
    found: list[tuple] = []  # (protocol, capture_id, topic, partition, ts_ns, value, log_start)
    fetches = []
    cols = ("capture_id", "protocol", "command", "topic", "partition", "ts_ns", "details")
    for cap, proto, command, topic, part, ts, details in zip(*(resp[c].to_pylist() for c in cols)):
        body = _json(details)
        if command == "Fetch":
            fetches.append((cap, ts, body))
        elif proto == "iggy":
            cur, count = body.get("current_offset"), body.get("count")
            if isinstance(cur, int) and topic is not None and part is not None and (cur or count):
                found.append(("iggy", cap, topic, part, ts, cur + 1, None))
    for cap, ts, body in fetches:
        for t in body.get("Responses") or ():
            topic = (t.get("Topic") or names.get(t.get("TopicId"))) if isinstance(t, dict) else None
            for p in t.get("Partitions") or () if topic else ():
                hw = p.get("HighWatermark") if isinstance(p, dict) else None
                if not isinstance(hw, int) or hw < 0 or p.get("ErrorCode"):
                    continue
                ls = p.get("LogStartOffset")
                ls = ls if isinstance(ls, int) and ls >= 0 else None
                found.append(("kafka", cap, topic, p.get("PartitionIndex"), ts, hw, ls))
    return _tuples(
        HWM, ("protocol", "capture_id", "topic", "partition", "ts_ns", "value", "log_start"), found
    )


def _commits(acks: pa.RecordBatch) -> pa.Table:
    """The committed offset samples: Kafka OffsetCommit acks (the offset committed is the next to
    read), Iggy stored offsets (the last message consumed: + 1), of a named consumer, not failed
    (an error code of 0, or none: the response did not say)."""
    ok = pc.and_(
        pc.fill_null(pc.equal(acks["error_code"], 0), True),
        pc.fill_null(pc.not_equal(acks["consumer"], ""), False),
    )
    ok = pc.and_(ok, pc.fill_null(pc.greater_equal(acks["offset"], 0), False))
    ok = pc.and_(ok, pc.and_(acks["topic"].is_valid(), acks["partition"].is_valid()))
    c = acks.filter(ok)
    iggy = pc.equal(c["ack_type"], "iggy_offset")
    value = pc.if_else(iggy, pc.add(c["offset"], 1), c["offset"])
    return _samples(
        COMMIT,
        c.num_rows,
        **{k: c[k] for k in ("capture_id", "protocol", "consumer", "topic", "partition", "ts_ns")},
        value=value,
    )


def _deliveries(msgs: pa.RecordBatch, cmds: pa.RecordBatch) -> pa.Table:
    """The delivered offset samples (offset + 1): Kafka deliveries with the group of their
    connection (journeys' rule; none: left out), Iggy deliveries with the consumer of their poll."""
    requests = cmds.filter(pc.and_(pc.equal(cmds["direction"], "c2s"), cmds["client_id"].is_valid()))
    group_of = groups_of_connections(requests)
    conns = list(group_of)
    group = pa.array([group_of[c] for c in conns], pa.string()).take(
        pc.index_in(msgs["conn_id"], value_set=pa.array(conns, pa.string()))
    )
    consumer = pc.if_else(pc.equal(msgs["protocol"], "kafka"), group, msgs["consumer"])
    m = msgs.append_column("group", consumer).filter(
        pc.and_(consumer.is_valid(), pc.and_(msgs["topic"].is_valid(), msgs["partition"].is_valid()))
    )
    return _samples(
        DELIVER,
        m.num_rows,
        **{k: m[k] for k in ("capture_id", "protocol", "topic", "partition", "ts_ns")},
        consumer=m["group"],
        value=pc.add(m["offset"], 1),
    )


def _read_back(cmds: pa.RecordBatch, names: dict[str, str]) -> pa.Table:
    """The committed offsets read back: each partition of a Kafka OffsetFetch response (v0-7:
    `Topics`, the group the request of the same connection and correlation id named; v8+:
    `Groups`, each with its GroupId) with a committed offset (-1: none) and no error, the group's
    or the partition's; topics by name, or by id (v10+) `names` names."""
    kafka_fetch = pc.and_(pc.equal(cmds["protocol"], "kafka"), pc.equal(cmds["command"], "OffsetFetch"))
    rows = cmds.filter(kafka_fetch)
    group_of: dict[tuple, str] = {}  # (capture_id, conn_id, correlation_id) -> the request's group
    found: list[tuple] = []  # (capture_id, consumer, topic, partition, ts_ns, value)
    cols = ("capture_id", "direction", "conn_id", "correlation_id", "ts_ns", "details")
    for cap, direction, conn, corr, ts, details in zip(*(rows[c].to_pylist() for c in cols)):
        body = _json(details)
        if direction == "c2s":
            if isinstance(body.get("GroupId"), str):
                group_of[(cap, conn, corr)] = body["GroupId"]
            continue
        if "Groups" in body:
            groups = [(g.get("GroupId"), g) for g in body["Groups"] or () if isinstance(g, dict)]
        else:
            groups = [(group_of.get((cap, conn, corr)), body)]
        for group, g in groups:
            if not isinstance(group, str) or not group or g.get("ErrorCode"):
                continue
            for t in g.get("Topics") or ():
                topic = (t.get("Name") or names.get(t.get("TopicId"))) if isinstance(t, dict) else None
                for p in t.get("Partitions") or () if topic else ():
                    off = p.get("CommittedOffset") if isinstance(p, dict) else None
                    if isinstance(off, int) and off >= 0 and not p.get("ErrorCode"):
                        found.append((cap, group, topic, p.get("PartitionIndex"), ts, off))
    fields = ("capture_id", "consumer", "topic", "partition", "ts_ns", "value")
    return _tuples(READ_BACK, fields, found, protocol=["kafka"] * len(found))


def _backlogs(cmds: pa.RecordBatch) -> pa.Table:
    """The backlog samples: each Pulsar CONSUMER_STATS_RESPONSE with a `msg_backlog` (its
    subscription's messages not yet acknowledged) and the consumer its request named (the
    decoder adds `consumer_id` and `subscription`; the consumer is the subscription, else the id
    as text, as acks.consumer is); an error answer has no backlog."""
    stats = cmds.filter(pc.equal(cmds["command"], STATS_RESPONSE))
    found: list[tuple] = []  # (capture_id, consumer, topic, partition, ts_ns, backlog)
    cols = ("capture_id", "topic", "partition", "ts_ns", "details")
    for cap, topic, part, ts, details in zip(*(stats[c].to_pylist() for c in cols)):
        body = _json(details)
        backlog, cid = body.get("msg_backlog"), body.get("consumer_id")
        if not isinstance(backlog, int) or not isinstance(cid, int) or topic is None:
            continue
        found.append((cap, body.get("subscription") or str(cid), topic, part, ts, backlog))
    fields = ("capture_id", "consumer", "topic", "partition", "ts_ns", "value")
    return _tuples(BACKLOG, fields, found, protocol=["pulsar"] * len(found))


def _lag_block(s: pa.RecordBatch) -> tables.Block:
    """The lag rows of the samples `s` as one Block: each consumer's samples (its commits and
    deliveries, and its partition's high watermarks from its first minute on) in time order, the
    latest of each kind at the end of each minute with samples, counts per minute."""
    kind = ints(s["kind"]).astype(np.int8)
    own = np.nonzero(kind != HWM)[0]
    if not len(own):
        return tables.Block(0)
    ts, value = ints(s["ts_ns"]), ints(s["value"])
    minute = ts // MINUTE_NS
    part = row_codes(s["protocol"], s["topic"], s["partition"])
    o = s.take(pa.array(own))
    pair_own = row_codes(o["protocol"], o["consumer"], o["topic"], o["partition"])
    npairs = int(pair_own.max()) + 1
    rep = np.full(npairs, -1, np.int64)  # each pair's first sample (its identity columns)
    rep[pair_own[::-1]] = own[::-1]
    first_minute = np.full(npairs, np.iinfo(np.int64).max)
    np.minimum.at(first_minute, pair_own, minute[own])
    # each high watermark, once for every pair of its partition that has begun by its minute
    by_part = np.argsort(part[rep], kind="stable")
    sorted_parts = part[rep][by_part]
    hw = np.nonzero(kind == HWM)[0]
    lo = np.searchsorted(sorted_parts, part[hw], "left")
    cnt = np.searchsorted(sorted_parts, part[hw], "right") - lo
    hw_src = np.repeat(hw, cnt)
    within = np.arange(len(hw_src)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    hw_pair = by_part[np.repeat(lo, cnt) + within]
    begun = minute[hw_src] >= first_minute[hw_pair]
    src = np.concatenate([own, hw_src[begun]])
    pair = np.concatenate([pair_own, hw_pair[begun]])
    # in time order per pair (ties: the higher offset last), then one row per (pair, minute)
    order = np.lexsort((value[src], ts[src], pair))
    src, pair = src[order], pair[order]
    mins = minute[src]
    total = len(src)
    new = np.ones(total, bool)
    new[1:] = (pair[1:] != pair[:-1]) | (mins[1:] != mins[:-1])
    starts = np.nonzero(new)[0]
    ends = np.append(starts[1:], total) - 1
    k = kind[src]
    pos = np.arange(total)

    def latest(which: int) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the position (in src) of the pair's latest sample of `which` by the minute's
        end, and whether there is one."""
        last = np.maximum.accumulate(np.where(k == which, pos, -1))[ends]
        ok = last >= 0
        ok[ok] = pair[last[ok]] == pair[ends[ok]]
        return src[np.maximum(last, 0)], ok

    def count(which: int) -> pa.Array:
        return pa.array(np.add.reduceat((k == which).astype(np.int64), starts), pa.int64())

    (h, h_ok), (c, c_ok), (d, d_ok) = latest(HWM), latest(COMMIT), latest(DELIVER)
    b, b_ok = latest(BACKLOG)  # Pulsar's pairs have backlogs only
    # a committed offset read back stands for the group's commit until one of its own is seen
    r, r_ok = latest(READ_BACK)
    c, c_ok = np.where(c_ok, c, r), c_ok | r_ok
    hwm, committed, delivered = value[h], value[c], value[d]
    log_start = s["log_start"].take(pa.array(h))
    ident = s.select(["protocol", "consumer", "topic", "partition"]).take(pa.array(rep[pair[ends]]))
    pulsar = pc.fill_null(pc.equal(ident["protocol"], "pulsar"), False)
    cols = {
        "capture_id": s["capture_id"].take(pa.array(src[ends])),
        "protocol": ident["protocol"],
        "consumer": ident["consumer"],
        "topic": ident["topic"],
        "partition": ident["partition"],
        "minute_ns": pa.array(mins[ends] * MINUTE_NS, pa.int64()),
        "ts_ns": pa.array(ts[src[ends]], pa.int64()),
        "high_watermark": nullable(hwm, h_ok),
        "log_start_offset": pc.if_else(pa.array(h_ok), log_start, pa.nulls(len(ends), pa.int64())),
        "committed_offset": nullable(committed, c_ok),
        "committed_ts_ns": nullable(ts[c], c_ok),
        "delivered_offset": nullable(delivered, d_ok),
        "delivered_ts_ns": nullable(ts[d], d_ok),
        "lag_committed": nullable(np.where(b_ok, value[b], hwm - committed), b_ok | (h_ok & c_ok)),
        "lag_delivered": nullable(hwm - delivered, h_ok & d_ok),
        "hwm_samples": pc.add(count(HWM), count(BACKLOG)),
        # Pulsar: its acks and deliveries are not counted (no offsets to place them by)
        "commits": pc.if_else(pulsar, pa.nulls(len(ends), pa.int64()), count(COMMIT)),
        "deliveries": pc.if_else(pulsar, pa.nulls(len(ends), pa.int64()), count(DELIVER)),
    }
    rows = pa.table(cols)
    keys = [(c, "ascending", "at_end") for c in ("protocol", "consumer", "topic", "partition", "minute_ns")]
    rows = rows.take(pc.sort_indices(rows, sort_keys=keys))
    return tables.Block(rows.num_rows, {c: rows[c].combine_chunks() for c in rows.column_names})
