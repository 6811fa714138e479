"""Kafka message journeys: one row per message and consumer group, from a run's committed rows.

Computed on the driver after a run has committed the decoded tables (lake.finish_run), over the
rows of the run's capture ids only, read back through delta-rs and pyarrow (no Spark): the
capture set is the unit, as for topic names (topics.py). The identity rules are in
docs/protocols/kafka.md ("Journeys"); the columns in tables.JOURNEYS.

- a message is (topic, partition, offset): its produce rows (offsets from the Produce response),
  its deliver rows; the produce and ack times are its first Produce request's and that request's
  response's (the `acks` row of the same connection, correlation id, topic and partition);
- a delivery belongs to the group of its connection's client: the (client_ip, client_id) of the
  Fetch requests on that connection, named by the group commands (JoinGroup, SyncGroup,
  Heartbeat, OffsetCommit, OffsetFetch, LeaveGroup, ConsumerGroupHeartbeat) sent with the same
  (client_ip, client_id) on connections whose time span overlaps the Fetch connection's; a
  client naming several groups names none (consumer null);
- a group follows a topic when it was delivered or committed any of its messages: every message
  of the topic then has a row for the group, `not-delivered` where no delivery was seen;
  deliveries to no known group are rows of their own (consumer null), for those messages only;
- a retried produce: messages of one partition with the same idempotent producer id, epoch and
  sequence and the same key and value are one record written again; the lowest offset is the
  original, the others have status `duplicate` (`duplicate_of` names the original); the produce
  rows of that identity, answered or not, are its `produce_attempts`, and an original whose
  response was lost is produced by its unanswered attempt;
- ShareFetch deliveries (share groups, whose rows name their group in `consumer`) are left out;
- committed: the first successful OffsetCommit of the group for the partition (by response time)
  whose offset (the next one to consume) is beyond the message's.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections import defaultdict

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from . import tables

# commands whose requests name the client's consumer group (their details' GroupId)
GROUP_COMMANDS = (
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "LeaveGroup",
    "OffsetCommit",
    "OffsetFetch",
    "ConsumerGroupHeartbeat",
)
STATUSES = ("delivered", "delivered-not-committed", "not-delivered", "duplicate")


def _read(path: str, capture_ids: list[str], columns: list[str], where) -> list[dict]:
    """The rows of the Delta table at `path` of `capture_ids` matching `where`, as dicts. Only
    capture_id is filtered in the scan: delta-rs's dataset takes a column the files' Delta
    statistics leave out (lake.STATS_COLUMNS) for all null, and would skip every file for
    `where` on such a column; `where` is applied to the rows read."""
    dset = DeltaTable(path).to_pyarrow_dataset()
    t = dset.to_table(filter=pc.field("capture_id").isin(capture_ids))
    return t.filter(where).select(columns).to_pylist()


def compute(root: str, capture_ids: list[str]) -> pa.RecordBatch:
    """The journeys rows of the captures `capture_ids` from the lake at `root`."""
    ids = sorted(capture_ids)
    kafka = pc.field("protocol") == "kafka"
    produce = pc.field("direction") == "produce"
    # deliveries naming their consumer are ShareFetch's (share groups): not journeys yet
    fetched = (pc.field("direction") == "deliver") & pc.field("consumer").is_null()
    msgs = _read(
        f"{root}/messages",
        ids,
        [
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
            "value",
            "value_hash",
            "value_size",
        ],
        # produce rows without an offset (no response) only of idempotent producers: attempts
        kafka
        & (
            (produce & (pc.field("offset").is_valid() | (pc.field("producer_id") >= 0)))
            | (fetched & pc.field("offset").is_valid())
        ),
    )
    acks = _read(
        f"{root}/acks",
        ids,
        [
            "ack_type",
            "topic",
            "partition",
            "offset",
            "consumer",
            "error_code",
            "ts_ns",
            "conn_id",
            "correlation_id",
        ],
        kafka & pc.field("ack_type").isin(["kafka_produce", "kafka_offset_commit"]),
    )
    cmds = _read(
        f"{root}/commands",
        ids,
        ["command", "client_ip", "client_id", "conn_id", "ts_ns", "details"],
        kafka
        & (pc.field("direction") == "c2s")
        & pc.field("client_id").is_valid()
        & pc.field("command").isin(["Fetch", *GROUP_COMMANDS]),
    )
    return tables.conform("journeys", _journeys(msgs, acks, cmds))


def _groups_of_connections(cmds: list[dict]) -> dict[str, str | None]:
    """conn_id of each Fetch connection -> its client's group (None: not exactly one group).

    The candidates are the groups named by connections of the same (client_ip, client_id) whose
    commands' time span overlaps the Fetch connection's (librdkafka names every client `rdkafka`
    by default: two consumers of one host meet only when they run at the same time)."""
    spans: dict[str, list] = {}  # conn_id -> [client, first ts, last ts, groups, fetches]
    for c in cmds:
        sp = spans.setdefault(
            c["conn_id"], [(c["client_ip"], c["client_id"]), c["ts_ns"], c["ts_ns"], set(), False]
        )
        sp[1], sp[2] = min(sp[1], c["ts_ns"]), max(sp[2], c["ts_ns"])
        if c["command"] == "Fetch":
            sp[4] = True
            continue
        try:
            g = json.loads(c["details"] or "{}").get("GroupId")
        except (ValueError, AttributeError):
            g = None
        if isinstance(g, str) and g:
            sp[3].add(g)
    by_client: dict[tuple, list] = defaultdict(list)
    for sp in spans.values():
        if sp[3]:
            by_client[sp[0]].append(sp)
    out = {}
    for conn, (client, lo, hi, _groups, fetches) in spans.items():
        if fetches:
            named = {
                g
                for other in by_client.get(client, ())
                if other[1] <= hi and lo <= other[2]
                for g in other[3]
            }
            out[conn] = next(iter(named)) if len(named) == 1 else None
    return out


def _journeys(msgs: list[dict], acks: list[dict], cmds: list[dict]) -> list[dict]:
    produce_acks = {
        (a["conn_id"], a["correlation_id"], a["topic"], a["partition"]): a["ts_ns"]
        for a in acks
        if a["ack_type"] == "kafka_produce" and a["error_code"] in (0, None)
    }
    # (group, topic, partition) -> commits in response order, with the running maximum offset
    commits: dict[tuple, list] = defaultdict(list)
    for a in sorted(acks, key=lambda a: a["ts_ns"]):
        if a["ack_type"] == "kafka_offset_commit" and a["error_code"] in (0, None) and a["consumer"]:
            commits[(a["consumer"], a["topic"], a["partition"])].append((a["offset"], a["ts_ns"]))
    commit_index = {}
    for k, seq in commits.items():
        highs, hi = [], -1
        for off, _ts in seq:
            hi = max(hi, off)
            highs.append(hi)
        commit_index[k] = (highs, [ts for _off, ts in seq])
    group_of = _groups_of_connections(cmds)

    produced: dict[tuple, dict] = {}  # (topic, partition, offset) -> the first produce row
    delivered: dict[tuple, dict[str | None, list]] = defaultdict(lambda: defaultdict(list))
    first_seen: dict[tuple, dict] = {}
    attempts: dict[tuple, list] = defaultdict(list)  # a retry identity -> its produce rows
    copies: dict[tuple, set] = defaultdict(set)  # a retry identity -> the offsets holding it
    for m in sorted(msgs, key=lambda m: m["ts_ns"]):
        retry = _retry_identity(m)
        if m["direction"] == "produce" and retry is not None:
            attempts[retry].append(m)
        if m["offset"] is None:
            continue
        ident = (m["topic"], m["partition"], m["offset"])
        first_seen.setdefault(ident, m)
        if retry is not None:
            copies[retry].add(m["offset"])
        if m["direction"] == "produce":
            produced.setdefault(ident, m)
        else:
            delivered[ident][group_of.get(m["conn_id"])].append(m)
    follows: dict[str, set] = defaultdict(set)  # topic -> the groups that follow it
    for ident, per_group in delivered.items():  # deliveries to no known group: only those rows
        follows[ident[0]].update(g for g in per_group if g is not None)
    for g, topic, _p in commits:
        follows[topic].add(g)

    rows = []
    for ident, first in first_seen.items():
        topic, partition, offset = ident
        p = produced.get(ident)
        retry = _retry_identity(p or first)
        original = min(copies[retry]) if retry is not None else offset
        if p is None and retry is not None and offset == original:
            # the original of a retried produce whose response was lost: its unanswered attempt
            p = next((a for a in attempts[retry] if a["offset"] is None), None)
        produced_ns = p["ts_ns"] if p else None
        acked_ns = produce_acks.get((p["conn_id"], p["correlation_id"], topic, partition)) if p else None
        n_attempts = len(attempts[retry]) if retry is not None else int(p is not None)
        key = (p or first)["key"]
        base = {
            "capture_id": (p or first)["capture_id"],
            "protocol": "kafka",
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "message_id": f"{topic}-{partition}@{offset}",
            "key_hash": hashlib.sha256(key).hexdigest() if key is not None else None,
            "produced_ts_ns": produced_ns,
            "acked_ts_ns": acked_ns,
            "producer_conn_id": p["conn_id"] if p else None,
            "produce_to_ack_us": _us(produced_ns, acked_ns),
            "produce_attempts": n_attempts,
            "duplicate_of": f"{topic}-{partition}@{original}" if offset != original else None,
        }
        per_group = delivered.get(ident, {})
        for g in sorted(follows[topic] | set(per_group), key=lambda g: (g is None, g or "")):
            got = per_group.get(g, [])
            deliver_ns = got[0]["ts_ns"] if got else None
            commit_ns = _committed(commit_index.get((g, topic, partition)), offset) if g else None
            if offset != original:
                status = "duplicate"
            elif not got:
                status = "not-delivered"
            elif commit_ns is None:
                status = "delivered-not-committed"
            else:
                status = "delivered"
            rows.append(
                {
                    **base,
                    "consumer": g,
                    "ts_ns": produced_ns if produced_ns is not None else deliver_ns,
                    "delivered_ts_ns": deliver_ns,
                    "committed_ts_ns": commit_ns,
                    "deliveries": len(got),
                    "redeliveries": max(len(got) - 1, 0),
                    "ack_to_deliver_us": _us(acked_ns, deliver_ns),
                    "produce_to_deliver_us": _us(produced_ns, deliver_ns),
                    "deliver_to_commit_us": _us(deliver_ns, commit_ns),
                    "status": status,
                    "consumer_conn_id": got[0]["conn_id"] if got else None,
                }
            )
    return rows


def _retry_identity(m: dict) -> tuple | None:
    """What an idempotent producer's retry repeats: the partition, producer id, epoch and
    sequence, and the record's key and value (None for a producer without idempotence)."""
    if m["producer_id"] is None or m["producer_id"] < 0 or m["sequence"] is None or m["sequence"] < 0:
        return None
    return (
        m["topic"],
        m["partition"],
        m["producer_id"],
        m["producer_epoch"],
        m["sequence"],
        m["key"],
        m["value"],
        m["value_hash"],
        m["value_size"],
    )


def _committed(index: tuple[list, list] | None, offset: int) -> int | None:
    """The response time of the first commit whose offset is beyond `offset`."""
    if index is None:
        return None
    highs, times = index
    i = bisect.bisect_right(highs, offset)  # highs never decrease: the first commit past offset
    return times[i] if i < len(times) else None


def _us(a: int | None, b: int | None) -> float | None:
    return None if a is None or b is None else (b - a) / 1000.0
