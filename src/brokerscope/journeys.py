"""Message journeys: one row per message and consumer, from a run's committed rows.

Kafka's identity rule is this module's first part (below); Pulsar's, Iggy's and TubeMQ's are in
their packages (protocols/<name>/journeys.py, `Protocol.journeys`), which give their rows as
`Steps`, made into rows alike by `steps_block` (the last part); `_step_columns` builds the times
and latencies of every protocol's rows.

Computed on the driver after a run has committed the decoded tables (lake.finish_run), over the
rows of the run's capture ids only, read back through delta-rs and pyarrow (no Spark; only the
columns used: `value` only when an idempotent producer's rows need it to tell records apart),
and computed as columns (Arrow and numpy: codes for the identities, firsts, counts and minima per
code; Python per connection, group and distinct details text, not per row): the capture set is
the unit, as for topic names (topics.py). Kafka's identity rules are
in docs/protocols/kafka.md ("Journeys"); the columns in tables.JOURNEYS.

- a message is (topic, partition, offset): its produce rows (offsets from the Produce response),
  its deliver rows; the produce and ack times are its first Produce request's and that request's
  response's (the `acks` row of the same connection, correlation id, topic and partition);
- a delivery belongs to the group of its connection's client: the group a request on that
  connection names (a consumer's FindCoordinator for its group), else the group the group
  commands (JoinGroup, SyncGroup, Heartbeat, OffsetCommit, OffsetFetch, LeaveGroup,
  ConsumerGroupHeartbeat, FindCoordinator) name when sent with the Fetch requests' (client_ip,
  client_id) on connections whose time span overlaps the Fetch connection's; a connection or
  client naming several groups names none (consumer null);
- a group follows a topic when it was delivered or committed any of its messages: every message
  of the topic then has a row for the group, `not-delivered` where no delivery was seen;
  deliveries to no known group are rows of their own (consumer null), for those messages only;
- a retried produce: messages of one partition with the same idempotent producer id, epoch and
  sequence and the same key and value are one record written again; the lowest offset is the
  original, the others have status `duplicate` (`duplicate_of` names the original); the produce
  rows of that identity, answered or not, are its `produce_attempts`, and an original whose
  response was lost is produced by its unanswered attempt;
- committed: the first successful OffsetCommit of the group for the partition (by response time)
  whose offset (the next one to consume) is beyond the message's;
- share groups (KIP-932): a ShareFetch delivery names its share group (`consumer`); committed is
  the group's first successful ACCEPT acknowledgement of the offset (`_share_accepts`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import tables
from .clocks import Clocks
from .derived import (
    GROUP_COMMANDS,
    groups_of_connections,
    ints,
    nullable,
    one_batch,
    read_rows,
    row_codes,
)

SHARE_ACK, SHARE_ACCEPT = "kafka_share_ack", "accept"  # a share group's acknowledgement, its accept type
STATUSES = ("delivered", "delivered-not-committed", "not-delivered", "duplicate")


MSG_COLUMNS = (
    "capture_id",
    "direction",
    "topic",
    "partition",
    "offset",
    "key",
    "ts_ns",
    "conn_id",
    "correlation_id",
    "producer_id",
    "producer_epoch",
    "sequence",
    "value_hash",
    "value_size",
)
ACK_COLUMNS = (
    "ack_type",
    "topic",
    "partition",
    "offset",
    "consumer",
    "error_code",
    "ts_ns",
    "conn_id",
    "correlation_id",
)
CMD_COLUMNS = ("command", "client_ip", "client_id", "conn_id", "ts_ns", "details")


def compute(
    root: str, capture_ids: list[str], clocks: Clocks | None = None, payload: dict[str, str] | None = None
) -> pa.RecordBatch:
    """The journeys rows of the captures `capture_ids` from the lake at `root`; `clocks`: the
    run's vantage points (clocks.estimate): the rows of a connection's other copies left out,
    times put on the reference's clock; `payload`: the policy each capture was decoded under
    (inputs.payload: the run's record, not yet committed), for the key hashes."""
    ids = sorted(capture_ids)
    kafka = pc.field("protocol") == "kafka"
    produce = pc.field("direction") == "produce"
    fetched = pc.field("direction") == "deliver"  # Fetch's, and ShareFetch's naming their group
    # produce rows without an offset (no response) only of idempotent producers: attempts
    where = kafka & (
        (produce & (pc.field("offset").is_valid() | (pc.field("producer_id") >= 0)))
        | (fetched & pc.field("offset").is_valid())
    )
    on = ("protocol", "direction", "offset", "producer_id", "consumer")
    msgs = read_rows(f"{root}/messages", ids, (*MSG_COLUMNS, "consumer"), where, on)
    if _retries_collide(msgs):  # an idempotent producer's records: their values may tell apart
        msgs = read_rows(f"{root}/messages", ids, (*MSG_COLUMNS, "consumer", "value"), where, on)
    acks = read_rows(
        f"{root}/acks",
        ids,
        (*ACK_COLUMNS, "capture_id", "details"),
        kafka & pc.field("ack_type").isin(["kafka_produce", "kafka_offset_commit", "kafka_share_ack"]),
        ("protocol", "ack_type"),
    )
    cmds = read_rows(
        f"{root}/commands",
        ids,
        (*CMD_COLUMNS, "capture_id"),
        kafka
        & (pc.field("direction") == "c2s")
        & pc.field("client_id").is_valid()
        & pc.field("command").isin(["Fetch", *GROUP_COMMANDS]),
        ("protocol", "direction", "client_id", "command"),
    )
    one_clock = clocks is not None and bool(clocks.offsets or clocks.copies)
    if one_clock:
        msgs, acks, cmds = (_on_one_clock(t, clocks) for t in (msgs, acks, cmds))
    others, moved_conns = _compute_others(root, ids, clocks if one_clock else None)
    blocks = [_journeys_block(msgs, acks, cmds), *others]
    stored = _stored(root, ids)
    for b in blocks:
        _add_stored(b, stored)
    out = tables.conform("journeys", blocks)
    return _key_hashes_as_kept(_mark_others_moved(out, moved_conns), root, payload or {})


# the protocols whose segment files give `stored` messages rows (a record's time in the log)
STORED_PROTOCOLS = ("kafka", "iggy")
STORED_KEY = ("topic", "partition", "offset")  # a record's place in its log
_LOG_APPEND = r'"timestamp_type":\s*"log_append"'  # a Kafka stored row's details: LogAppendTime


def _stored(root: str, ids: list[str]) -> pa.Table:
    """(protocol, topic, partition, offset) -> the earliest `stored` time (ns) and its type
    (tables.JOURNEYS stored_ts_type) of the segment rows of the run's inputs `ids`. A Kafka
    record's time is its CreateTime, or its batch's MaxTimestamp under LogAppendTime (the
    decoder's ts); an Iggy message's timestamp is the server's, set when it appended it."""
    cols = ("protocol", "topic", "partition", "offset", "ts_ns", "details")
    where = (
        pc.field("protocol").isin(list(STORED_PROTOCOLS))
        & (pc.field("direction") == "stored")
        & pc.field("offset").is_valid()
        & pc.field("ts_ns").is_valid()
    )
    t = pa.table(read_rows(f"{root}/messages", ids, cols, where, ("direction",)))
    kind = pc.if_else(
        pc.or_(
            pc.equal(t["protocol"], "iggy"),
            pc.fill_null(pc.match_substring_regex(t["details"], _LOG_APPEND), False),
        ),
        "log_append",
        "create",
    )
    t = t.select(cols[:5]).append_column("kind", kind).sort_by([("ts_ns", "ascending")])
    return t.group_by(["protocol", *STORED_KEY], use_threads=False).aggregate(
        [("ts_ns", "first"), ("kind", "first")]
    )


def _add_stored(b: tables.Block, stored: pa.Table) -> None:
    """Set the `stored_ts_ns` and `stored_ts_type` of the journeys rows of `b` (one protocol's)
    from `_stored`'s: the record at the row's (topic, partition, offset); null where none."""
    proto = b.const.get("protocol")
    if not b.n or proto not in STORED_PROTOCOLS:
        return
    s = stored.filter(pc.equal(stored["protocol"], proto))
    if not s.num_rows:
        return
    sch = tables.schema("journeys")
    key = pa.schema([sch.field(c) for c in STORED_KEY])
    cols = [b.cols.get(c) for c in STORED_KEY]
    cols = [(v if isinstance(v, pa.Array) else pa.array(b.column(c))) for c, v in zip(STORED_KEY, cols)]
    rows = pa.table([v.cast(f.type) for v, f in zip(cols, key)], schema=key)
    rows = rows.append_column("_row", pa.array(np.arange(b.n)))
    found = s.select(list(STORED_KEY)).cast(key)
    found = found.append_column("stored_ns", s["ts_ns_first"]).append_column("kind", s["kind_first"])
    j = rows.join(found, list(STORED_KEY), join_type="left outer", use_threads=False).sort_by("_row")
    b.cols["stored_ts_ns"] = j["stored_ns"].combine_chunks()
    b.cols["stored_ts_type"] = j["kind"].combine_chunks()


def _on_one_clock(t: pa.RecordBatch, clocks: Clocks) -> pa.RecordBatch:
    """The rows of `t` less those of connections another vantage point's copy stands for
    (clocks.copies), `ts_ns` on the reference's clock, and `moved`: whether it was moved."""
    t = t.filter(pc.invert(pc.is_in(t["conn_id"], value_set=pa.array(sorted(clocks.copies), pa.string()))))
    enc = pc.dictionary_encode(t["capture_id"], null_encoding="encode")
    shifts = np.array([clocks.shift_ns(c) for c in enc.dictionary.to_pylist()], np.int64)
    shift = shifts[enc.indices.to_numpy(zero_copy_only=False)] if len(shifts) else np.zeros(0, np.int64)
    ts = t["ts_ns"]
    moved = _valid(ts) & (shift != 0)
    i = t.schema.get_field_index("ts_ns")
    t = t.set_column(i, "ts_ns", nullable(ints(ts) - shift, _valid(ts)))
    return t.append_column("moved", pa.array(moved))


def _journeys(msgs: list[dict], acks: list[dict], cmds: list[dict]) -> list[dict]:
    """The journeys rows of dict rows (tests, tools): `_journeys_block` on them as tables."""

    def table(rows, name, columns):
        sch = tables.schema(name)
        return pa.Table.from_pylist(
            [{c: r.get(c) for c in columns} for r in rows], pa.schema([sch.field(c) for c in columns])
        )

    block = _journeys_block(
        table(msgs, "messages", (*MSG_COLUMNS, "value", "consumer")),
        table(acks, "acks", (*ACK_COLUMNS, "details")),
        table(cmds, "commands", CMD_COLUMNS),
    )
    return block.rows()


def _moved(t: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Each row's `moved` flag (_on_one_clock), all False without the column."""
    if "moved" not in t.column_names:
        return np.zeros(t.num_rows, bool)
    return ints(t["moved"], False).astype(bool)


def _valid(a: pa.Array) -> np.ndarray:
    return a.is_valid().to_numpy(zero_copy_only=False)


def _retry_codes(m: pa.Table, value: bool = True) -> np.ndarray:
    """Each row's retry identity as a code, -1 for none: what an idempotent producer's retry
    repeats, the partition, producer id, epoch and sequence, and the record's key and value (none
    for a producer without idempotence). Without `value` (or its column): the identity less the
    value itself (its hash and size stay)."""
    pid, seq = m["producer_id"], m["sequence"]
    ok = (_valid(pid) & (ints(pid, -1) >= 0)) & (_valid(seq) & (ints(seq, -1) >= 0))
    names = [
        "topic",
        "partition",
        "producer_id",
        "producer_epoch",
        "sequence",
        "key",
        "value_hash",
        "value_size",
    ]
    if value and "value" in m.column_names:
        names.append("value")
    out = np.full(m.num_rows, -1, np.int64)
    if ok.any():  # only the idempotent producers' rows
        sel = m.select(names).filter(pa.array(ok))
        out[ok] = row_codes(*sel.columns)
    return out


def _retries_collide(m: pa.Table) -> bool:
    """Whether the value could tell apart rows of one retry identity less the value: an identity
    with two offsets, or with a produce row among two rows or more (attempts, the original's
    produce). Otherwise the identities without the value give the same rows."""
    r = _retry_codes(m, value=False)
    has = r >= 0
    if not has.any():
        return False
    rows = np.bincount(r[has])
    prod = ints(pc.equal(m["direction"], "produce"), False).astype(bool)
    if ((rows > 1) & (np.bincount(r[has & prod], minlength=len(rows)) > 0)).any():
        return True
    offs = _valid(m["offset"]) & has
    pairs = np.unique(np.stack([r[offs], ints(m["offset"])[offs]]), axis=1)
    return bool(pairs.shape[1] and np.bincount(pairs[0]).max() > 1)


def _first(codes: np.ndarray, k: int, where: np.ndarray | None = None) -> np.ndarray:
    """The first position holding each of `k` codes (among `where`), -1 where none."""
    pos = np.arange(len(codes)) if where is None else np.nonzero(where)[0]
    c = codes if where is None else codes[where]
    out = np.full(k, -1, np.int64)
    u, i = np.unique(c, return_index=True)
    out[u] = pos[i]
    return out


def _us(a: np.ndarray, a_ok: np.ndarray, b: np.ndarray, b_ok: np.ndarray) -> pa.Array:
    ok = a_ok & b_ok
    return nullable(np.where(ok, b - a, 0) / 1000.0, ok, pa.float64())


def _step_columns(
    produced: np.ndarray,
    p_ok: np.ndarray,
    acked: np.ndarray,
    a_ok: np.ndarray,
    delivered: np.ndarray,
    d_ok: np.ndarray,
    committed: np.ndarray,
    c_ok: np.ndarray,
    deliveries: np.ndarray,
) -> dict:
    """The columns every protocol's rows take from the times of their steps (ns, each with
    whether it was seen) and their delivery counts: the times, `ts` (the first step), the
    latencies between them, deliveries and redeliveries."""
    return {
        "ts_ns": nullable(np.where(p_ok, produced, delivered), p_ok | d_ok),
        "produced_ts_ns": nullable(produced, p_ok),
        "acked_ts_ns": nullable(acked, a_ok),
        "delivered_ts_ns": nullable(delivered, d_ok),
        "committed_ts_ns": nullable(committed, c_ok),
        "deliveries": pa.array(deliveries, pa.int64()),
        "redeliveries": pa.array(np.maximum(deliveries - 1, 0), pa.int64()),
        "produce_to_ack_us": _us(produced, p_ok, acked, a_ok),
        "ack_to_deliver_us": _us(acked, a_ok, delivered, d_ok),
        "produce_to_deliver_us": _us(produced, p_ok, delivered, d_ok),
        "deliver_to_commit_us": _us(delivered, d_ok, committed, c_ok),
    }


def _message_ids(topic: pa.Array, partition: pa.Array, offset: pa.Array) -> pa.Array:
    """topic-partition@offset (a null offset: null; a null topic or partition reads None)."""
    t = pc.fill_null(topic, "None")
    p = pc.fill_null(pc.cast(partition, pa.string()), "None")
    return pc.binary_join_element_wise(t, "-", p, "@", pc.cast(offset, pa.string()), "")


def _key_hashes_as_kept(out: pa.RecordBatch, root: str, payload: dict[str, str]) -> pa.RecordBatch:
    """`out` with each row's key_hash as of the key the producer sent, where the capture of its
    first sighting (its key's row) was decoded under a policy for keys (`payload`: capture id ->
    inputs.payload, `... keys`): a hashed key is that sha256 already (the stored key, not hashed
    again); a truncated or dropped one gives none."""
    hashed, lost = set(), set()
    for cid, policy in payload.items():
        if policy and policy.endswith(" keys"):
            (hashed if policy.startswith("hash") else lost).add(cid)
    if not (hashed or lost) or not out.num_rows:
        return out
    caps = out["capture_id"].to_pylist()
    kh = out["key_hash"].to_pylist()
    stored = {}  # sha256 of a stored (hashed) key -> that key
    if hashed & set(caps):
        keys = read_rows(f"{root}/messages", sorted(hashed), ("key",), pc.field("key").is_valid(), ())
        stored = {
            hashlib.sha256(k).hexdigest(): k.decode("ascii", "replace") for k in set(keys["key"].to_pylist())
        }
    fixed = [None if c in lost else stored.get(h, h) if c in hashed else h for c, h in zip(caps, kh)]
    i = out.schema.get_field_index("key_hash")
    return out.set_column(i, out.schema.field(i), pa.array(fixed, pa.string()))


def _key_hashes(keys: pa.Array) -> pa.Array:
    """sha256 hex of each key (null: null), each distinct key hashed once."""
    enc = pc.dictionary_encode(keys)
    digests = [hashlib.sha256(k).hexdigest() for k in enc.dictionary.to_pylist()]
    return pa.array(digests, pa.string()).take(enc.indices)


def _journeys_block(msgs: pa.Table, acks: pa.Table, cmds: pa.Table) -> tables.Block:
    """The journeys rows (docstring above) as one Block of Arrow columns: the messages' rows in
    time order (a stable sort: ties in read order), codes for the identities (numpy), first
    sightings by position, counts and minima per code, then one row per message and group."""
    empty = tables.Block(0)
    msgs, acks, cmds = one_batch(msgs), one_batch(acks), one_batch(cmds)
    # the rows in time order (m: the columns needed by position; msgs.take(order[i]) the others)
    order = np.argsort(ints(msgs["ts_ns"]), kind="stable")
    m = msgs.select(["direction", "topic", "partition", "offset", "ts_ns", "conn_id", "correlation_id"])
    m = m.take(pa.array(order))
    ts = ints(m["ts_ns"])
    m_moved = _moved(msgs)[order]  # a time put on another capture's clock (_on_one_clock)
    produce = ints(pc.equal(m["direction"], "produce"), False).astype(bool)
    retry = _retry_codes(msgs)[order]
    nr = int(retry.max(initial=-1)) + 2  # (one more: never empty)
    # an identity's produce rows, answered or not (its attempts), and its first unanswered one
    att = produce & (retry >= 0)
    attempts = np.bincount(retry[att], minlength=nr)
    off_ok = _valid(m["offset"])
    unanswered = _first(retry, nr, att & ~off_ok)
    # the rows with an offset: one message each (topic, partition, offset)
    oi = np.nonzero(off_ok)[0]
    if not len(oi):
        return empty
    off = ints(m["offset"])
    o = m.select(["topic", "partition", "offset", "conn_id"]).take(pa.array(oi))
    ident = row_codes(o["topic"], o["partition"], o["offset"])
    ni = int(ident.max()) + 1
    i_first = _first(ident, ni)  # each message's first row among oi
    first = oi[i_first]  # its position in m
    produced = _first(ident, ni, produce[oi])
    produced = np.where(produced >= 0, oi[np.maximum(produced, 0)], -1)
    # a retry identity's lowest offset holding it: the original
    original_of = np.full(nr, np.iinfo(np.int64).max)
    r_oi = retry[oi]
    np.minimum.at(original_of, r_oi[r_oi >= 0], off[oi][r_oi >= 0])

    # deliveries: each row's group from its connection
    group_of = groups_of_connections(cmds)
    conn_keys = list(group_of)
    dl = ~produce[oi]
    g_name = pa.array([group_of[c] for c in conn_keys], pa.string()).take(
        pc.index_in(o["conn_id"], value_set=pa.array(conn_keys, pa.string()), skip_nulls=False)
    )
    if "consumer" in msgs.column_names:  # a ShareFetch delivery names its share group
        g_name = pc.coalesce(msgs["consumer"].take(pa.array(order[oi])), g_name)
    # commits: successful OffsetCommits naming their group, by response time
    ok_err = pc.fill_null(pc.equal(acks["error_code"], 0), True)
    cm = acks.filter(
        pc.and_(
            pc.and_(pc.equal(acks["ack_type"], "kafka_offset_commit"), ok_err),
            pc.fill_null(pc.not_equal(acks["consumer"], ""), False),
        )
    )
    accepts = _share_accepts(acks)
    names = sorted(
        set(pc.unique(g_name.filter(pc.and_(pa.array(dl), g_name.is_valid()))).to_pylist())
        | set(pc.unique(cm["consumer"]).to_pylist())
        | set(pc.unique(accepts["consumer"]).to_pylist())
    )
    nn = len(names)  # code nn: no group (sorts last)
    gcode = ints(pc.index_in(g_name, value_set=pa.array(names, pa.string())), nn)
    pair = ident * (nn + 1) + gcode
    d_pairs, d_first, d_count = np.unique(pair[dl], return_index=True, return_counts=True)
    d_first = oi[np.nonzero(dl)[0][d_first]]

    # which groups follow each topic: those delivered, committed or accepted any of its messages
    topics = pc.dictionary_encode(
        pa.concat_arrays([o["topic"], cm["topic"], accepts["topic"]]), null_encoding="encode"
    )
    tcode = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    t_rows, t_commits = tcode[: len(oi)], tcode[len(oi) : len(oi) + cm.num_rows]
    nt = len(topics.dictionary)
    follows = [set() for _ in range(nt)]
    named_dl = dl & (gcode < nn)
    for t, g in np.unique(np.stack([t_rows[named_dl], gcode[named_dl]]), axis=1).T.tolist():
        follows[t].add(g)
    c_g = ints(pc.index_in(cm["consumer"], value_set=pa.array(names, pa.string())), nn)
    a_g = ints(pc.index_in(accepts["consumer"], value_set=pa.array(names, pa.string())), nn)
    for t, g in set(
        zip([*t_commits.tolist(), *tcode[len(oi) + cm.num_rows :].tolist()], [*c_g.tolist(), *a_g.tolist()])
    ):
        follows[t].add(g)

    # per message (ident): its produce row, its original, its attempts, its ack
    i_topic = t_rows[i_first]
    p0 = produced
    src = np.where(p0 >= 0, p0, first)
    r_i = retry[src]
    i_off = off[first]
    orig = np.where(r_i >= 0, original_of[np.maximum(r_i, 0)], i_off)
    lost = (p0 < 0) & (r_i >= 0) & (i_off == orig)  # the original's response lost: its attempt
    p = np.where(lost, unanswered[np.maximum(r_i, 0)], p0)
    has_p = p >= 0
    src = np.where(has_p, p, first)
    n_attempts = np.where(r_i >= 0, attempts[np.maximum(r_i, 0)], has_p.astype(np.int64))
    pa_ = m.select(["conn_id", "correlation_id", "topic", "partition"]).take(pa.array(np.maximum(p, 0)))
    pk = acks.filter(pc.and_(pc.equal(acks["ack_type"], "kafka_produce"), ok_err))
    ack_codes = row_codes(
        *(pa.concat_arrays([pa_[c], pk[c]]) for c in ("conn_id", "correlation_id", "topic", "partition"))
    )
    na = int(ack_codes.max()) + 1 if len(ack_codes) else 0
    pk_codes = ack_codes[ni:]
    last = len(pk_codes) - 1 - _first(pk_codes[::-1], na)  # a key's last ack wins (as in a dict)
    ack_ok = last < len(pk_codes)
    ack_ts = np.where(
        ack_ok, ints(pk["ts_ns"])[np.minimum(last, max(len(pk_codes) - 1, 0))] if len(pk_codes) else 0, 0
    )
    acked_ok = has_p & ack_ok[ack_codes[:ni]]
    acked = np.where(acked_ok, ack_ts[ack_codes[:ni]], 0)
    pk_moved = _moved(pk)
    ack_moved = ack_ok & (pk_moved[np.minimum(last, len(pk_codes) - 1)] if len(pk_codes) else False)
    acked_moved = acked_ok & ack_moved[ack_codes[:ni]]
    produced_ns = np.where(has_p, ts[np.maximum(p, 0)], 0)

    # one row per message and group: the topic's followers, and no group for such deliveries
    row_i, row_g = [], []
    for t in range(nt):
        if not follows[t]:
            continue
        at = np.nonzero(i_topic == t)[0]
        gs = np.array(sorted(follows[t]), np.int64)
        row_i.append(np.repeat(at, len(gs)))
        row_g.append(np.tile(gs, len(at)))
    none_pairs = d_pairs[d_pairs % (nn + 1) == nn]
    row_i.append(none_pairs // (nn + 1))
    row_g.append(np.full(len(none_pairs), nn, np.int64))
    ri, rg = np.concatenate(row_i), np.concatenate(row_g)
    in_order = np.lexsort((rg, first[ri]))
    ri, rg = ri[in_order], rg[in_order]
    if not len(ri):
        return empty
    nrow = len(ri)
    at = np.searchsorted(d_pairs, ri * (nn + 1) + rg)
    got = at < len(d_pairs)
    got[got] = d_pairs[at[got]] == (ri * (nn + 1) + rg)[got]
    deliveries = np.where(got, d_count[np.minimum(at, len(d_pairs) - 1)] if len(d_pairs) else 0, 0)
    dpos = np.where(got, d_first[np.minimum(at, len(d_pairs) - 1)] if len(d_pairs) else 0, 0)
    deliver_ns = np.where(got, ts[dpos], 0)

    # committed: the first successful commit (by response time) of the group for the partition
    # beyond the offset, that is the earliest commit whose offset is beyond it
    committed = np.zeros(nrow, np.int64)
    committed_ok = np.zeros(nrow, bool)
    committed_moved = np.zeros(nrow, bool)
    if cm.num_rows:
        part_i = o["partition"].take(pa.array(i_first))
        keys = row_codes(
            pa.array(np.concatenate([c_g.astype(np.int64), rg])),
            pa.array(np.concatenate([t_commits, i_topic[ri]])),
            pa.concat_arrays([cm["partition"], part_i.take(pa.array(ri))]),
        )
        kc, kr = keys[: cm.num_rows], keys[cm.num_rows :]
        c_off, c_ts, c_moved = ints(cm["offset"]), ints(cm["ts_ns"]), _moved(cm)
        r_off = i_off[ri]
        rows_by_key = np.argsort(kr, kind="stable")
        bounds = np.searchsorted(kr[rows_by_key], np.unique(kc))
        ends = np.searchsorted(kr[rows_by_key], np.unique(kc), side="right")
        for k, b, e in zip(np.unique(kc).tolist(), bounds.tolist(), ends.tolist()):
            if b == e:
                continue
            sel = kc == k
            co = np.argsort(c_off[sel], kind="stable")
            offs, tss, mvd = c_off[sel][co], c_ts[sel][co], c_moved[sel][co]
            rev = tss[::-1]
            acc = np.minimum.accumulate(rev)
            # the position of each running minimum: the last one at or before it holding it
            at_min = np.maximum.accumulate(np.where(rev == acc, np.arange(len(rev)), 0))
            earliest, earliest_moved = acc[::-1], mvd[::-1][at_min][::-1]
            rows = rows_by_key[b:e]
            j = np.searchsorted(offs, r_off[rows], side="right")
            hit = j < len(offs)
            committed[rows[hit]] = earliest[j[hit]]
            committed_ok[rows[hit]] = True
            committed_moved[rows[hit]] = earliest_moved[j[hit]]
        committed_ok &= rg < nn
    if accepts.num_rows:  # share groups: the first accept of the message
        acc, acc_ok, acc_moved = _share_committed(
            accepts, a_g, m.select(["topic", "partition", "offset"]).take(pa.array(first[ri])), rg
        )
        take = acc_ok & (~committed_ok | (acc < committed))
        committed = np.where(take, acc, committed)
        committed_moved = np.where(take, acc_moved, committed_moved)
        committed_ok |= acc_ok
    # a time moved onto the reference's clock: the produce, ack, delivery or commit step's
    p_moved = has_p & m_moved[np.maximum(p, 0)]
    moved = p_moved[ri] | acked_moved[ri] | (got & m_moved[dpos]) | (committed_ok & committed_moved)

    r_p_ok = has_p[ri]
    r_prod = produced_ns[ri]
    r_ack_ok = acked_ok[ri]
    r_ack = acked[ri]
    dup = i_off[ri] != orig[ri]
    status = np.where(
        dup,
        "duplicate",
        np.where(~got, "not-delivered", np.where(~committed_ok, "delivered-not-committed", "delivered")),
    )
    mi = pa.array(ri)
    src_rows = msgs.select(["capture_id", "key"]).take(pa.array(order[src[ri]]))
    first_rows = m.select(["topic", "partition", "offset"]).take(pa.array(first[ri]))
    topic, partition, offset = first_rows["topic"], first_rows["partition"], first_rows["offset"]
    orig_ids = _message_ids(topic, partition, pa.array(orig[ri]))
    p_conn = pa_["conn_id"].take(mi)
    cols = {
        "capture_id": src_rows["capture_id"],
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "message_id": _message_ids(topic, partition, offset),
        "key_hash": _key_hashes(src_rows["key"]),
        "producer_conn_id": pc.if_else(pa.array(r_p_ok), p_conn, pa.nulls(nrow, pa.string())),
        "produce_attempts": pa.array(n_attempts[ri], pa.int64()),
        "duplicate_of": pc.if_else(pa.array(dup), orig_ids, pa.nulls(nrow, pa.string())),
        "consumer": pa.array(names + [None], pa.string()).take(pa.array(rg)),
        **_step_columns(
            r_prod, r_p_ok, r_ack, r_ack_ok, deliver_ns, got, committed, committed_ok, deliveries
        ),
        "status": pa.array(status, pa.string()),
        "consumer_conn_id": pc.if_else(
            pa.array(got), m["conn_id"].take(pa.array(dpos)), pa.nulls(nrow, pa.string())
        ),
        "clock_corrected": pa.array(moved, pa.bool_()),
    }
    return tables.Block(nrow, cols, {"protocol": "kafka"})


def _share_accepts(acks: pa.Table) -> pa.RecordBatch:
    """The share groups' successful ACCEPT acknowledgements among `acks` (rows `kafka_share_ack`,
    error 0 or none, naming their group), one row per offset: `topic`, `partition`, `offset`,
    `consumer`, `ts_ns` (the response's) and `moved`. A row standing for a range (a request
    acknowledging more offsets than the decoder writes rows for: `details.last_offset`) is one row
    per offset of the range. RELEASE (the record goes back to be delivered again), REJECT (archived
    unprocessed) and RENEW (the lock extended) are no commit."""
    acks = one_batch(acks)
    share = pc.fill_null(pc.equal(acks["ack_type"], SHARE_ACK), False)
    ok = pc.fill_null(pc.equal(acks["error_code"], 0), True)
    a = acks.filter(pc.and_(pc.and_(share, ok), pc.fill_null(pc.not_equal(acks["consumer"], ""), False)))
    if "details" not in a.column_names:
        a = a.append_column("details", pa.nulls(a.num_rows, pa.string()))
    # the details' type and range end, each distinct details text parsed once
    enc = pc.dictionary_encode(a["details"], null_encoding="encode")
    kinds, ends = [], []
    for d in enc.dictionary.to_pylist():
        try:
            det = json.loads(d or "{}")
        except ValueError:
            det = {}
        det = det if isinstance(det, dict) else {}
        kinds.append(det.get("type") == SHARE_ACCEPT)
        end = det.get("last_offset")
        ends.append(end if isinstance(end, int) else -1)
    idx = enc.indices.to_numpy(zero_copy_only=False)
    keep = (np.asarray(kinds, bool)[idx] if len(idx) else np.zeros(0, bool)) & _valid(a["offset"])
    end = np.asarray(ends, np.int64)[idx][keep] if len(idx) else np.zeros(0, np.int64)
    a = a.filter(pa.array(keep))
    off = ints(a["offset"])
    last = np.maximum(end, off)  # -1 (no range): the offset itself
    width = last - off + 1
    rows = np.repeat(np.arange(a.num_rows), width)  # a range: one row per offset
    step = np.arange(len(rows)) - np.repeat(np.cumsum(width) - width, width)
    out = a.select(["topic", "partition", "consumer", "ts_ns"]).take(pa.array(rows))
    out = out.append_column("offset", pa.array(off[rows] + step, pa.int64()))
    return out.append_column("moved", pa.array(_moved(a)[rows]))


def _share_committed(
    accepts: pa.RecordBatch, a_group: np.ndarray, msg: pa.RecordBatch, group: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per journeys row (its message's `topic`, `partition`, `offset` in `msg`, its group's code
    `group`): the earliest accept (`_share_accepts`, their groups' codes `a_group`) of the group
    for that offset, whether there is one, and whether its time was moved."""
    na = accepts.num_rows
    keys = row_codes(
        pa.array(np.concatenate([a_group, group]).astype(np.int64)),
        *(pa.concat_arrays([accepts[c].cast(msg[c].type), msg[c]]) for c in ("topic", "partition", "offset")),
    )
    ka, kr = keys[:na], keys[na:]
    nk = int(keys.max()) + 1
    by_time = np.argsort(ints(accepts["ts_ns"]), kind="stable")
    first = _first(ka[by_time], nk)  # the earliest accept of each key
    hit = first[kr] >= 0
    at = by_time[np.maximum(first[kr], 0)]
    ts = np.where(hit, ints(accepts["ts_ns"])[at], 0)
    moved = hit & ints(accepts["moved"], False).astype(bool)[at]
    return ts, hit, moved


# ---------------------------------------------------------------------------------------------
# Pulsar, Iggy and TubeMQ: each package's journeys module (Protocol.journeys) turns the run's
# rows of its protocol into `Steps` by its own identity rule (docs/protocols/<name>.md
# "Journeys"); the rows are built from the steps alike for all of them (`steps_block`)

# what the rules read (one read of each table for all of them)
STEP_MSG_COLUMNS = (
    "capture_id",
    "protocol",
    "direction",
    "topic",
    "partition",
    "offset",
    "message_id",
    "key",
    "ts_ns",
    "conn_id",
    "correlation_id",
    "consumer",
    "producer_name",
    "sequence",
    "value_hash",
    "value_size",
)
STEP_ACK_COLUMNS = (
    "protocol",
    "ack_type",
    "topic",
    "partition",
    "offset",
    "message_id",
    "consumer",
    "error_code",
    "ts_ns",
    "conn_id",
    "correlation_id",
)
# the columns of a message every step table has (null where the step does not tell)
MESSAGE_COLUMNS = ("topic", "partition", "offset", "message_id")
STEP_COLUMNS = (*MESSAGE_COLUMNS, "capture_id", "key", "ts_ns", "conn_id")
COMMIT_COLUMNS = ("topic", "partition", "offset", "consumer", "ts_ns")
# what makes two rows of one retry identity (Steps.retry) one record: equal key and value (null
# equal to null; `value` too where it was read: _resends_collide)
RECORD_COLUMNS = ("key", "value_hash", "value_size")


@dataclass
class Steps:
    """One protocol's journey steps by its identity rule, as Arrow tables.

    `identity` names the columns that tell one message from another (of MESSAGE_COLUMNS);
    `produced` has STEP_COLUMNS plus `acked_ns` (the broker's acknowledgement, null when not
    seen), a row per produce request that carried the message; `delivered` STEP_COLUMNS plus
    `consumer`, a row per delivery; `acked`: identity + `consumer`, `ts_ns`, a consumer's
    acknowledgement of that message; `commits`: `topic`, `partition`, `offset`, `consumer`,
    `ts_ns`, an offset a consumer committed, which covers the partition's messages below it
    (`inclusive`: at it too).

    Resends (status `duplicate`): `retry` names the columns of `produced`, `delivered` and
    `attempts` that, all set and equal, with equal RECORD_COLUMNS, make two messages one record
    the broker stored again; of those, the first by `rank` (columns of `produced` and
    `delivered`) is the original, the others are its duplicates. `attempts`: produce rows that
    carry no identity (no answer seen), with the `retry` and RECORD_COLUMNS, `ts_ns`, `conn_id`:
    they count among the record's produce attempts, and an original without a produce row of
    its own was produced by the first of them. Empty `retry`: no duplicates."""

    identity: tuple[str, ...]
    produced: pa.Table
    delivered: pa.Table
    acked: pa.Table | None = None
    commits: pa.Table | None = None
    inclusive: bool = False
    retry: tuple[str, ...] = ()
    rank: tuple[str, ...] = ()
    attempts: pa.Table | None = None


def _rules() -> dict:
    """The identity rule module of each protocol that has one (Protocol.journeys), by name."""
    from .protocols import base

    return {n: r for n, p in sorted(base.protocols().items()) if (r := p.journey_rule()) is not None}


def _compute_others(
    root: str, ids: list[str], clocks: Clocks | None = None
) -> tuple[list[tables.Block], set[str]]:
    """The journeys of the protocols with a rule, from the lake at `root` (one read of messages
    and acks for all of them); `clocks`: other copies' rows left out, times on the reference's
    clock (_on_one_clock). Also the connections whose times were moved."""
    others = pc.field("protocol").isin(list(_rules()))
    sent_or_got = pc.field("direction").isin(["produce", "deliver"])
    msgs = read_rows(
        f"{root}/messages", ids, STEP_MSG_COLUMNS, others & sent_or_got, ("protocol", "direction")
    )
    if _resends_collide(msgs):  # the values may tell apart rows of one retry identity
        msgs = read_rows(
            f"{root}/messages",
            ids,
            (*STEP_MSG_COLUMNS, "value"),
            others & sent_or_got,
            ("protocol", "direction"),
        )
    acks = read_rows(f"{root}/acks", ids, (*STEP_ACK_COLUMNS, "capture_id"), others, ("protocol",))
    moved: set[str] = set()
    if clocks is not None:
        msgs, acks = (_on_one_clock(t, clocks) for t in (msgs, acks))
        for t in (msgs, acks):
            moved |= set(pc.unique(t["conn_id"].filter(t["moved"])).to_pylist()) - {None}
        msgs, acks = (t.drop_columns(["moved"]) for t in (msgs, acks))
    return compute_others(msgs, acks), moved


def _resends_collide(msgs: pa.RecordBatch) -> bool:
    """Whether the value could tell apart the messages of one retry identity (a rule's `RETRY`,
    the messages columns a resend repeats, all set, and RECORD_COLUMNS equal): an identity that
    two messages (the rule's `IDENTITY`, all set) share. Otherwise the values change no code."""
    for name, rule in _rules().items():
        retry = getattr(rule, "RETRY", ())
        if not retry:
            continue
        m = msgs.filter(pc.equal(msgs["protocol"], name))
        has = np.ones(m.num_rows, bool)
        for c in (*retry, *rule.IDENTITY):
            has &= _valid(m[c])
        if has.sum() < 2:
            continue
        m = m.filter(pa.array(has))
        r = row_codes(*(m[c] for c in (*retry, *RECORD_COLUMNS)))
        i = row_codes(*(m[c] for c in rule.IDENTITY))
        pairs = np.unique(np.stack([r, i]), axis=1)
        if np.bincount(pairs[0]).max() > 1:
            return True
    return False


def _mark_others_moved(out: pa.RecordBatch, moved_conns: set[str]) -> pa.RecordBatch:
    """`clock_corrected` of the rows of protocols with a rule: whether the times of the
    producer's or the consumer's connection were moved onto the reference's clock (the rules keep
    a step's connection)."""
    conns = pa.array(sorted(moved_conns), pa.string())
    hit = pc.or_(
        pc.is_in(out["producer_conn_id"], value_set=conns),
        pc.is_in(out["consumer_conn_id"], value_set=conns),
    )
    col = pc.if_else(pc.equal(out["protocol"], "kafka"), out["clock_corrected"], hit)
    return out.set_column(out.schema.get_field_index("clock_corrected"), "clock_corrected", col)


def compute_others(msgs: pa.Table, acks: pa.Table) -> list[tables.Block]:
    """The journeys of every protocol with a rule, from the rows read with STEP_MSG_COLUMNS and
    STEP_ACK_COLUMNS."""
    msgs, acks = pa.table(msgs), pa.table(acks)  # (tables: the rules join and group)
    out = []
    for name, rule in _rules().items():
        m = msgs.filter(pc.equal(msgs["protocol"], name))
        if m.num_rows:
            out.append(steps_block(name, rule.steps(m, acks.filter(pc.equal(acks["protocol"], name)))))
    return out


def _offset_commits(
    m_topic: pa.Array, m_part: pa.Array, m_off: pa.Array, commits: pa.Table, inclusive: bool
) -> tuple[np.ndarray, list, np.ndarray]:
    """(message position, consumer, time) of each message covered by a consumer's committed
    offsets: the earliest commit of the consumer for the message's topic and partition whose
    offset is beyond the message's (`inclusive`: or at it). Per (consumer, topic, partition):
    its commits sorted by offset, the earliest time from each on (numpy), one search."""
    n = len(m_off)
    tp = row_codes(
        pa.concat_arrays([m_topic, commits["topic"]]), pa.concat_arrays([m_part, commits["partition"]])
    )
    m_tp, c_tp = tp[:n], tp[n:]
    ok = _valid(m_off)
    off = ints(m_off)
    c_off, c_ts = ints(commits["offset"]), ints(commits["ts_ns"])
    consumers = commits["consumer"].to_pylist()
    side = "left" if inclusive else "right"
    pos, who, when = [], [], []
    keys = row_codes(commits["consumer"], pa.array(c_tp))
    for k in np.unique(keys).tolist():
        sel = np.nonzero(keys == k)[0]
        co = np.argsort(c_off[sel], kind="stable")
        offs, tss = c_off[sel][co], c_ts[sel][co]
        earliest = np.minimum.accumulate(tss[::-1])[::-1]
        rows = np.nonzero(ok & (m_tp == c_tp[sel[0]]))[0]
        j = np.searchsorted(offs, off[rows], side=side)
        hit = j < len(offs)
        pos.append(rows[hit])
        when.append(earliest[j[hit]])
        who += [consumers[sel[0]]] * int(hit.sum())
    if not pos:
        return np.zeros(0, np.int64), [], np.zeros(0, np.int64)
    return np.concatenate(pos).astype(np.int64), who, np.concatenate(when).astype(np.int64)


def steps_block(protocol: str, s: Steps) -> tables.Block:
    """The journeys rows of one protocol's steps: a message is a distinct identity among its
    produce and deliver rows; a consumer follows a topic when it was delivered, acked or
    committed any of its messages, and then has a row for each message of the topic (deliveries
    to no known consumer: a row for those messages only); the first produce row (by time) gives
    produced, acknowledged and the producer's connection, the consumer's first delivery
    delivered, its earliest acknowledgement or covering commit committed."""
    prod = _typed(s.produced, (*STEP_COLUMNS, "acked_ns"))
    dlv = _typed(s.delivered, (*STEP_COLUMNS, "consumer"))
    acked = one_batch(s.acked) if s.acked is not None else dlv.select([*s.identity, "consumer", "ts_ns"])[:0]
    commits = _typed(
        s.commits if s.commits is not None else pa.table({c: [] for c in COMMIT_COLUMNS}), COMMIT_COLUMNS
    )
    commits = commits.filter(pc.and_(commits["offset"].is_valid(), commits["consumer"].is_valid()))
    np_, nd = prod.num_rows, dlv.num_rows
    if not np_ + nd:
        return tables.Block(0)
    # the messages: the identities produced or delivered, numbered 0..nm-1 (acks of others: -1)
    code = row_codes(*(pa.concat_arrays([prod[c], dlv[c], acked[c]]) for c in s.identity))
    seen = np.zeros(int(code.max()) + 1, bool)
    seen[code[: np_ + nd]] = True
    renum = np.full(len(seen), -1, np.int64)
    nm = int(seen.sum())
    renum[seen] = np.arange(nm)
    code = renum[code]
    p_mid, d_mid, a_mid = code[:np_], code[np_ : np_ + nd], code[np_ + nd :]
    both = one_batch(pa.Table.from_batches([prod.select(STEP_COLUMNS), dlv.select(STEP_COLUMNS)]))
    ts = ints(both["ts_ns"])
    # each message's first produce row by time, else its first delivery: its attributes
    is_dl = np.arange(np_ + nd) >= np_
    order = np.lexsort((ts, is_dl))
    src = order[_first(code[: np_ + nd][order], nm)]
    p_order = np.argsort(ts[:np_], kind="stable")
    p_first = _first(p_mid[p_order], nm)
    has_p = p_first >= 0
    p_row = np.where(has_p, p_order[np.maximum(p_first, 0)], 0) if np_ else np.zeros(nm, np.int64)
    produced_ns = np.where(has_p, ts[:np_][p_row], 0) if np_ else np.zeros(nm, np.int64)
    acked_arr = prod["acked_ns"].take(pa.array(p_row)) if np_ else pa.nulls(nm, pa.int64())
    acked_ok = has_p & _valid(acked_arr)
    acked_ns = np.where(acked_ok, ints(acked_arr), 0)
    attrs = both.select([*MESSAGE_COLUMNS, "capture_id", "key"]).take(pa.array(src))
    p_conn = prod["conn_id"].take(pa.array(p_row)) if np_ else pa.nulls(nm, pa.string())
    # resends: duplicates, their originals, attempts; an original whose answer was lost was
    # produced by its first unanswered attempt
    rs = _resends(s, code[: np_ + nd], nm, np_, src)
    attempts = np.where(rs.retry >= 0, rs.attempts, np.bincount(p_mid, minlength=nm))
    lost = ~has_p & (rs.lost_attempt >= 0)
    if lost.any():
        at = pa.array(np.maximum(rs.lost_attempt, 0))
        produced_ns = np.where(lost, ints(rs.attempt_rows["ts_ns"].take(at)), produced_ns)
        p_conn = pc.if_else(pa.array(lost), rs.attempt_rows["conn_id"].take(at), p_conn)
        has_p = has_p | lost

    # consumers: names sorted, code nc for none
    names = sorted(
        set(
            pc.unique(pa.concat_arrays([dlv["consumer"], acked["consumer"], commits["consumer"]])).to_pylist()
        )
        - {None}
    )
    nc = len(names)
    value_set = pa.array(names, pa.string())

    def ccode(a: pa.Array) -> np.ndarray:
        return ints(pc.index_in(a, value_set=value_set), nc) if len(a) else np.zeros(0, np.int64)

    # deliveries per (message, consumer), in time order: first, count
    d_order = np.argsort(ts[np_:], kind="stable")
    d_pair = (d_mid * (nc + 1) + ccode(dlv["consumer"]))[d_order]
    d_pairs, d_at, d_count = np.unique(d_pair, return_index=True, return_counts=True)
    d_first = np_ + d_order[d_at]  # the first delivery's row in `both`
    # acknowledgements and covering commits per (message, consumer): the earliest
    a_ok = a_mid >= 0
    c_pair = [(a_mid * (nc + 1) + ccode(acked["consumer"]))[a_ok]]
    c_ts = [ints(acked["ts_ns"])[a_ok]]
    if commits.num_rows:
        at, who, when = _offset_commits(
            attrs["topic"], attrs["partition"], attrs["offset"], commits, s.inclusive
        )
        c_pair.append(at * (nc + 1) + ccode(pa.array(who, pa.string())))
        c_ts.append(when)
    cp, ct = np.concatenate(c_pair), np.concatenate(c_ts)
    c_pairs = np.unique(cp)
    c_min = np.full(len(c_pairs), np.iinfo(np.int64).max)
    np.minimum.at(c_min, np.searchsorted(c_pairs, cp), ct)

    # who follows each topic; rows: the topic's messages x its followers, and null-consumer
    # deliveries for those messages only
    t_code = row_codes(attrs["topic"])
    follow = np.concatenate([d_pairs, c_pairs])
    follow = follow[follow % (nc + 1) < nc]
    ft = np.unique(t_code[follow // (nc + 1)] * (nc + 1) + follow % (nc + 1))  # (topic, consumer)
    row_m, row_c = [], []
    for t, c in zip((ft // (nc + 1)).tolist(), (ft % (nc + 1)).tolist()):
        at = np.nonzero(t_code == t)[0]
        row_m.append(at)
        row_c.append(np.full(len(at), c, np.int64))
    none = d_pairs[d_pairs % (nc + 1) == nc]
    row_m.append(none // (nc + 1))
    row_c.append(np.full(len(none), nc, np.int64))
    rm, rc = np.concatenate(row_m).astype(np.int64), np.concatenate(row_c).astype(np.int64)
    if not len(rm):
        return tables.Block(0)
    pair = rm * (nc + 1) + rc
    got, di = _lookup(d_pairs, pair)
    cgot, ci = _lookup(c_pairs, pair)
    deliver_ns = np.where(got, ts[d_first[di]] if len(d_pairs) else 0, 0)
    committed = np.where(cgot, c_min[ci] if len(c_pairs) else 0, 0)
    first_ns = np.where(has_p[rm], produced_ns[rm], deliver_ns)
    sort = np.lexsort((rc, rm, first_ns))
    rm, rc, got, di, cgot = rm[sort], rc[sort], got[sort], di[sort], cgot[sort]
    deliver_ns, committed = deliver_ns[sort], committed[sort]
    n = len(rm)
    r_p = has_p[rm]
    status = np.where(~got, "not-delivered", np.where(~cgot, "delivered-not-committed", "delivered"))
    dup = rs.duplicate[rm]
    status = np.where(dup, "duplicate", status)
    m = attrs.take(pa.array(rm))
    o = attrs.take(pa.array(rs.original[rm]))
    if "offset" in s.identity:  # the original's place (a resent Iggy message keeps its id)
        orig_ids = _message_ids(o["topic"], o["partition"], o["offset"])
    else:
        orig_ids = o["message_id"]
    deliveries = np.where(got, d_count[di] if len(d_pairs) else 0, 0)
    cols = {
        "capture_id": m["capture_id"],
        "topic": m["topic"],
        "partition": m["partition"],
        "offset": m["offset"],
        "message_id": m["message_id"],
        "key_hash": _key_hashes(m["key"]),
        "consumer": pa.array(names + [None], pa.string()).take(pa.array(rc)),
        **_step_columns(
            produced_ns[rm], r_p, acked_ns[rm], acked_ok[rm], deliver_ns, got, committed, cgot, deliveries
        ),
        "status": pa.array(status, pa.string()),
        "produce_attempts": pa.array(attempts[rm], pa.int64()),
        "duplicate_of": pc.if_else(pa.array(dup), orig_ids, pa.nulls(n, pa.string())),
        "producer_conn_id": pc.if_else(pa.array(r_p), p_conn.take(pa.array(rm)), pa.nulls(n, pa.string())),
        "consumer_conn_id": pc.if_else(
            pa.array(got),
            both["conn_id"].take(pa.array(np.where(got, d_first[di] if len(d_pairs) else 0, 0))),
            pa.nulls(n, pa.string()),
        ),
    }
    return tables.Block(n, cols, {"protocol": protocol})


@dataclass
class _Resends:
    """Per message (steps_block's numbering): its retry identity's code (-1: none), whether it
    is a duplicate, its original (itself when none), its identity's produce attempts, the
    attempt (row of `attempt_rows`) producing it when it is an original without a produce row
    of its own (-1: none)."""

    retry: np.ndarray
    duplicate: np.ndarray
    original: np.ndarray
    attempts: np.ndarray
    lost_attempt: np.ndarray
    attempt_rows: pa.RecordBatch


def _resends(s: Steps, mid: np.ndarray, nm: int, np_: int, src: np.ndarray) -> _Resends:
    """The resends among the `nm` messages of `s` (Steps: `retry`, `rank`, `attempts`); `mid`:
    the message of each produced then delivered row, `np_` of them produced; `src`: each
    message's row (among those) whose `rank` columns rank it."""
    sch = tables.schema("messages")
    att = s.attempts if s.retry and s.attempts is not None else None
    parts = [s.produced, s.delivered, *([att] if att is not None else [])]
    cols = [*s.retry, *RECORD_COLUMNS]
    if all("value" in t.column_names for t in parts):
        cols.append("value")

    def column(c: str, tabs) -> pa.Array:
        typ = sch.field(c).type if c in sch.names else None
        arrays = [one_batch(pa.table(t).select([c]))[c] for t in tabs]
        return pa.concat_arrays([a.cast(typ) if typ is not None else a for a in arrays])

    none = np.full(nm, -1, np.int64)
    arows = (
        one_batch(pa.table(att).select(["ts_ns", "conn_id"]))
        if att is not None
        else pa.record_batch({"ts_ns": pa.array([], pa.int64()), "conn_id": pa.array([], pa.string())})
    )
    if not s.retry or not nm:
        return _Resends(none, np.zeros(nm, bool), np.arange(nm), np.zeros(nm, np.int64), none, arows)
    n = sum(t.num_rows for t in parts)
    valid = np.ones(n, bool)
    for c in s.retry:
        valid &= _valid(column(c, parts))
    code = np.where(valid, row_codes(*(column(c, parts) for c in cols)), -1) if n else np.zeros(0, np.int64)
    nr = int(code.max(initial=-1)) + 1
    nrows = len(mid)
    retry = none.copy()
    sel = code[:nrows] >= 0
    np.maximum.at(retry, mid[sel], code[:nrows][sel])
    # the original: the first by rank among the messages of an identity
    rank = [ints(column(c, parts[:2]).take(pa.array(src)), np.iinfo(np.int64).max) for c in s.rank]
    order = np.lexsort((np.arange(nm), *reversed(rank), retry))
    pos = _first(retry[order], max(nr, 1), retry[order] >= 0)
    original_of = np.where(pos >= 0, order[np.maximum(pos, 0)], -1)
    has = retry >= 0
    original = np.where(has, original_of[np.maximum(retry, 0)], np.arange(nm))
    # produce attempts: the produce rows (answered or not) of the identity
    produce = np.zeros(n, bool)
    produce[:np_] = True
    produce[nrows:] = True
    counted = produce & (code >= 0)
    per = np.bincount(code[counted], minlength=max(nr, 1))
    attempts = np.where(has, per[np.maximum(retry, 0)], 0)
    lost = none.copy()
    if att is not None and att.num_rows:
        a_code = code[nrows:]
        a_order = np.argsort(ints(arows["ts_ns"]), kind="stable")
        first = _first(a_code[a_order], max(nr, 1), a_code[a_order] >= 0)
        first = np.where(first >= 0, a_order[np.maximum(first, 0)], -1)
        lost = np.where(has & (original == np.arange(nm)), first[np.maximum(retry, 0)], -1)
    return _Resends(retry, has & (original != np.arange(nm)), original, attempts, lost, arows)


def _typed(t: pa.Table, columns) -> pa.RecordBatch:
    """`columns` of a step table, each as the type of its messages column (acked_ns: int64)."""
    sch = tables.schema("messages")
    types = [pa.int64() if c == "acked_ns" else sch.field(c).type for c in columns]
    return one_batch(pa.table([pc.cast(t[c], typ) for c, typ in zip(columns, types)], names=list(columns)))


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether each of `wanted` is among the sorted unique `keys`, and its position there."""
    at = np.searchsorted(keys, wanted)
    at = np.minimum(at, max(len(keys) - 1, 0))
    got = keys[at] == wanted if len(keys) else np.zeros(len(wanted), bool)
    return got, at
