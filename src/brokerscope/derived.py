"""What the derived tables (journeys.py, lag.py) share: the run's rows read back from the lake
with delta-rs, Arrow and numpy helpers over them, and the consumer group of each Kafka Fetch
connection."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import snapshot

# commands whose requests name the client's consumer group (their details' GroupId; FindCoordinator's
# Key, or its one CoordinatorKeys entry from v4 on, when its KeyType is a group's)
GROUP_COMMANDS = (
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "LeaveGroup",
    "OffsetCommit",
    "OffsetFetch",
    "ConsumerGroupHeartbeat",
    "FindCoordinator",
)
COORDINATOR_KEY_GROUP = (
    0  # FindCoordinator KeyType: 0 a consumer group, 1 a transactional id, 2 a share group
)


def read_rows(path: str, capture_ids: list[str], columns, where, where_columns) -> pa.RecordBatch:
    """The rows of the Delta table at `path` of `capture_ids` matching `where` (which reads
    `where_columns`), only `columns`. Only capture_id is filtered in the scan: delta-rs's dataset
    takes a column the files' Delta statistics leave out (lake.STATS_COLUMNS) for all null, and
    would skip every file for `where` on such a column; `where` is applied to the rows read.
    The table is the path's last part (a lake's layout: Lake.path)."""
    dset = snapshot.dataset(path, os.path.basename(os.path.normpath(path)))
    names = [*columns, *(c for c in where_columns if c not in columns)]
    t = dset.to_table(columns=names, filter=pc.field("capture_id").isin(capture_ids), use_threads=False)
    return one_batch(t.filter(where).select(list(columns)))


def one_batch(t: pa.Table | pa.RecordBatch) -> pa.RecordBatch:
    """One batch of the table's rows (columns as single arrays)."""
    if isinstance(t, pa.RecordBatch):
        return t
    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in t.columns], schema=t.schema)


def ints(a: pa.Array, fill=0) -> np.ndarray:
    """An integer column as numpy, nulls as `fill` (their validity is taken apart)."""
    return (
        pc.fill_null(a, fill).to_numpy(zero_copy_only=False)
        if a.null_count
        else a.to_numpy(zero_copy_only=False)
    )


def row_codes(*cols: pa.Array) -> np.ndarray:
    """Dense int64 codes of the rows of equal-length columns: equal tuples of values (null equal
    to null, as None is to None) get one code."""
    code = None
    for c in cols:
        if isinstance(c, pa.ChunkedArray):
            c = c.combine_chunks()
        i = pc.dictionary_encode(c, null_encoding="encode").indices.to_numpy(zero_copy_only=False)
        i = i.astype(np.int64)
        if code is None:
            code = i
        elif len(i):
            combined = pa.array(code * (int(i.max()) + 1) + i)
            code = pc.dictionary_encode(combined).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return code if code is not None else np.zeros(0, np.int64)


def _group_named(details: dict) -> object:
    """The consumer group a request's details name: GroupId, else a FindCoordinator's group key
    (Key up to v3; from v4 the CoordinatorKeys batch, when it holds one key), else None."""
    if "GroupId" in details:
        return details["GroupId"]
    if details.get("KeyType", COORDINATOR_KEY_GROUP) != COORDINATOR_KEY_GROUP:
        return None
    keys = details.get("CoordinatorKeys")
    if isinstance(keys, list):
        return keys[0] if len(keys) == 1 else None
    return details.get("Key")


def _group_of_details(details: pa.Array) -> tuple[np.ndarray, list]:
    """Each row's group code (-1: none; _group_named) and the names, each distinct details text
    parsed once."""
    enc = pc.dictionary_encode(details, null_encoding="encode")
    names, code = [], []
    for d in enc.dictionary.to_pylist():
        try:
            g = _group_named(json.loads(d or "{}"))
        except (ValueError, AttributeError):
            g = None
        if isinstance(g, str) and g:
            code.append(len(names))
            names.append(g)
        else:
            code.append(-1)
    idx = enc.indices.to_numpy(zero_copy_only=False)
    return (np.asarray(code, np.int64)[idx] if len(idx) else np.zeros(0, np.int64)), names


def groups_of_connections(cmds: pa.Table) -> dict[str | None, str | None]:
    """conn_id of each Fetch connection -> its client's group (None: not exactly one group).

    A group named on the Fetch connection itself (the consumer's FindCoordinator, sent to the
    broker it then fetches from) is its group: a connection is one client's. Without one, the
    candidates are the groups named by connections of the same (client_ip, client_id) whose
    commands' time span overlaps the Fetch connection's (librdkafka names every client `rdkafka`
    and kafka-python every consumer `kafka-python-<version>` by default: two consumers of one
    host meet only when they run at the same time). Computed per connection (the commands' rows
    aggregated by Arrow and numpy), not per command."""
    cmds = one_batch(cmds)
    n = cmds.num_rows
    if not n:
        return {}
    conn = row_codes(cmds["conn_id"])
    k = int(conn.max()) + 1
    first = np.full(k, n)
    np.minimum.at(first, conn, np.arange(n))  # the connection's client: its first command's
    ts = ints(cmds["ts_ns"])
    lo, hi = np.full(k, np.iinfo(np.int64).max), np.full(k, np.iinfo(np.int64).min)
    np.minimum.at(lo, conn, ts)
    np.maximum.at(hi, conn, ts)
    fetch = ints(pc.equal(cmds["command"], "Fetch"), False).astype(bool)
    fetches = np.zeros(k, bool)
    fetches[conn[fetch]] = True
    gcode, gnames = _group_of_details(cmds["details"])
    named = (~fetch) & (gcode >= 0)
    groups: list[set] = [set() for _ in range(k)]
    for c, g in np.unique(np.stack([conn[named], gcode[named]]), axis=1).T.tolist():
        groups[c].add(gnames[g])
    head = cmds.take(pa.array(first))
    conn_ids = head["conn_id"].to_pylist()
    clients = list(zip(head["client_ip"].to_pylist(), head["client_id"].to_pylist()))
    by_client: dict[tuple, list] = {}
    for c in range(k):
        if groups[c]:
            by_client.setdefault(clients[c], []).append(c)
    out = {}
    for c in np.nonzero(fetches)[0].tolist():
        if groups[c]:  # named on the connection itself
            out[conn_ids[c]] = next(iter(groups[c])) if len(groups[c]) == 1 else None
            continue
        found = {
            g for o in by_client.get(clients[c], ()) if lo[o] <= hi[c] and lo[c] <= hi[o] for g in groups[o]
        }
        out[conn_ids[c]] = next(iter(found)) if len(found) == 1 else None
    return out


def nullable(values: np.ndarray, ok: np.ndarray, typ: pa.DataType | None = None) -> pa.Array:
    """`values` where `ok`, else null (int64 unless `typ`)."""
    return pa.array(values, type=typ or pa.int64(), mask=~ok)
