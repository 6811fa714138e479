"""Clock offsets between the vantage points of a capture set, and which copy of a connection to use.

Computed on the driver after a run's decoded tables are committed (lake.finish_run), from the
`commands` rows of its captures (delta-rs, Arrow, numpy), when the run holds more than one
vantage point (vantage.py; `inputs.vantage`). Rules in docs/design.md "Vantage points".

- An exchange is a request and its response on one connection of one capture: the commands rows
  of the two directions with the same conn_id and correlation id (a key held by two rows of a
  direction is left out). The same exchange seen from two vantage points has the same 4-tuple,
  correlation id, command and frame sizes; t1, t4 are its request's and response's first bytes
  at A, t2, t3 at B.
- Each matched exchange gives NTP's estimate of B's clock minus A's, ((t2 - t1) + (t3 - t4)) / 2,
  true within half the difference of the round trips |(t4 - t1) - (t3 - t2)| / 2 (the one-way
  delays are positive). Per pair of vantage points: the quarter of the exchanges with the least
  round-trip difference (at least one, and every one as small as the quarter's largest), their
  median estimate, and as its bound the least
  |estimate - exchange's| + exchange's half difference among them.
- The reference of each connected group of vantage points: the one sharing exchanges with the
  most others (the broker's host, in a producer, broker and consumer set), then the one with the
  most matched exchanges, then the lowest name. The others' offsets add up along a spanning tree
  taken from it edge by edge, most matched exchanges first; the bounds add up with them.
- Two connections of two vantage points whose matched exchanges agree with their vantage points'
  offset (within ALIAS_TOLERANCE_NS plus half the least round-trip difference) are one
  connection seen twice: its rows are taken from the copy nearest the client (the longest
  median round trip; equal: the reference's vantage point, then the lowest conn_id).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import snapshot

# a connection pair whose own offset is further than this from its vantage points' is no copy
# of one connection (a 4-tuple used again by a later connection that repeats the same requests)
ALIAS_TOLERANCE_NS = 50_000_000
KEEP_FRACTION = 4  # the exchanges with the least round-trip difference kept: 1 in 4

CONN = ("client_ip", "client_port", "server_ip", "server_port")
MATCH = (*CONN, "correlation_id", "command", "req_size", "resp_size")
COLUMNS = ("capture_id", "conn_id", *CONN, "direction", "correlation_id", "command", "size", "ts_ns")


@dataclasses.dataclass(frozen=True)
class Offset:
    """A capture's clock against its reference's: its times minus the reference's (ns)."""

    offset_ns: float
    bound_ns: float  # the true offset is within this of offset_ns
    ref: str  # the reference: the vantage point (its first capture_id) whose clock this is on
    pairs: int  # exchanges its vantage point matched with any other


@dataclasses.dataclass
class Clocks:
    """The estimate of a run: per capture_id its Offset (none: no vantage point to compare
    with), and the conn_ids whose rows another vantage point's copy of the connection stands for."""

    offsets: dict[str, Offset] = dataclasses.field(default_factory=dict)
    copies: set[str] = dataclasses.field(default_factory=set)

    def shift_ns(self, capture_id: str | None) -> int:
        """What to subtract from a time of `capture_id` to put it on its reference's clock."""
        o = self.offsets.get(capture_id) if capture_id else None
        return round(o.offset_ns) if o is not None else 0


def estimate(root: str, vantage_of: dict[str, str]) -> Clocks:
    """The clocks of the captures `vantage_of` (capture_id -> vantage point) of the lake at `root`."""
    if len(set(vantage_of.values())) < 2:
        return Clocks()
    t = snapshot.dataset(f"{root}/commands", "commands").to_table(
        columns=list(COLUMNS),
        filter=pc.field("capture_id").isin(sorted(vantage_of)),
        use_threads=False,
    )
    return from_commands(t, vantage_of)


def _unique(t: pa.Table, keys: list[str]) -> pa.Table:
    """The rows of `t` whose `keys` no other row holds."""
    counts = t.group_by(keys).aggregate([([], "count_all")])
    single = counts.filter(pc.equal(counts["count_all"], 1)).drop_columns(["count_all"])
    return t.join(single, keys, join_type="inner")


def exchanges(commands: pa.Table, vantage_of: dict[str, str]) -> pa.Table:
    """One row per request and response on a connection: MATCH, vantage, conn_id, t_req, t_resp
    (ns). A connection is a conn_id of a vantage point: its request and response rows may name
    two captures of it (one place's capture written per direction: vantage.groups)."""
    c = commands.select(list(COLUMNS))
    c = c.filter(pc.and_(pc.is_valid(c["correlation_id"]), pc.is_valid(c["conn_id"]))).filter(
        pc.field("capture_id").isin(list(vantage_of))
    )
    c = c.append_column(
        "vantage", pa.array([vantage_of[x] for x in c["capture_id"].to_pylist()], pa.string())
    )
    key = ["vantage", "conn_id", "correlation_id"]
    req = _unique(c.filter(pc.equal(c["direction"], "c2s")), key)
    resp = _unique(c.filter(pc.equal(c["direction"], "s2c")), key)
    req = req.select([*key, *CONN, "command", "size", "ts_ns"]).rename_columns(
        [*key, *CONN, "command", "req_size", "t_req"]
    )
    resp = resp.select([*key, "size", "ts_ns"]).rename_columns([*key, "resp_size", "t_resp"])
    ex = req.join(resp, key, join_type="inner")
    ex = ex.filter(pc.and_(pc.is_valid(ex["t_req"]), pc.is_valid(ex["t_resp"])))
    names = sorted(set(vantage_of.values()))
    return ex.append_column("vantage_no", pc.index_in(ex["vantage"], value_set=pa.array(names, pa.string())))


def from_commands(commands: pa.Table, vantage_of: dict[str, str]) -> Clocks:
    """`estimate` on commands rows already read (capture_id, conn_id, the 4-tuple, direction,
    correlation_id, command, size, ts_ns)."""
    ex = exchanges(commands, vantage_of)
    if not ex.num_rows:
        return Clocks()
    m = ex.join(ex, list(MATCH), join_type="inner", left_suffix="_a", right_suffix="_b")
    m = m.filter(pc.less(m["vantage_no_a"], m["vantage_no_b"]))
    if not m.num_rows:
        return Clocks()
    va, vb = (m[f"vantage_{s}"].to_pylist() for s in "ab")
    # differences of int64 ns first: a time as float64 keeps only 256 ns
    ra, sa, rb, sb = (m[c].to_numpy() for c in ("t_req_a", "t_resp_a", "t_req_b", "t_resp_b"))
    theta = ((rb - ra) + (sb - sa)) / 2  # b's clock minus a's
    rtt_a, rtt_b = (sa - ra).astype(np.float64), (sb - rb).astype(np.float64)
    delta = np.abs(rtt_a - rtt_b) / 2
    edges: dict[tuple[str, str], list[int]] = {}
    for i, e in enumerate(zip(va, vb)):
        edges.setdefault(e, []).append(i)
    est = {e: _edge(theta[ix], delta[ix]) for e, ix in edges.items()}
    offsets = _offsets(est, {e: len(ix) for e, ix in edges.items()}, vantage_of)
    copies = _copies(m, theta, delta, rtt_a, rtt_b, est, offsets, vantage_of)
    return Clocks(offsets, copies)


def _edge(theta: np.ndarray, delta: np.ndarray) -> tuple[float, float]:
    """(estimate, bound) of one pair of vantage points from its exchanges: the least round-trip
    differences' median estimate, and the tightest bound it has from one of them."""
    cut = np.sort(delta)[max(1, len(delta) // KEEP_FRACTION) - 1]
    keep = delta <= cut  # ties kept: equal round trips (copies of one capture) are all kept
    est = float(np.median(theta[keep]))
    return est, float(np.min(np.abs(theta[keep] - est) + delta[keep]))


def _offsets(
    est: dict[tuple[str, str], tuple[float, float]],
    pairs: dict[tuple[str, str], int],
    vantage_of: dict[str, str],
) -> dict[str, Offset]:
    """Each capture's Offset against its group's reference (module docstring)."""
    adj: dict[str, dict[str, tuple[float, float, int]]] = {}
    for (a, b), (theta, bound) in est.items():
        n = pairs[(a, b)]
        adj.setdefault(a, {})[b] = (theta, bound, n)
        adj.setdefault(b, {})[a] = (-theta, bound, n)
    total = {v: sum(n for _t, _b, n in nb.values()) for v, nb in adj.items()}
    per_vantage: dict[str, tuple[float, float, str]] = {}
    for ref in sorted(adj, key=lambda v: (-len(adj[v]), -total[v], v)):
        if ref in per_vantage:
            continue
        per_vantage[ref] = (0.0, 0.0, ref)
        while True:  # the edge with the most exchanges from the tree to a vantage point outside it
            out = [
                (n, u, v, theta, bound)
                for u in per_vantage
                if per_vantage[u][2] == ref
                for v, (theta, bound, n) in adj[u].items()
                if v not in per_vantage
            ]
            if not out:
                break
            n, u, v, theta, bound = max(out, key=lambda x: (x[0], x[2] < x[1], x[1], x[2]))
            per_vantage[v] = (per_vantage[u][0] + theta, per_vantage[u][1] + bound, ref)
    return {
        cid: Offset(*per_vantage[v][:2], per_vantage[v][2], total[v])
        for cid, v in vantage_of.items()
        if v in per_vantage
    }


def _copies(m, theta, delta, rtt_a, rtt_b, est, offsets, vantage_of) -> set[str]:
    """The conn_ids whose rows a copy of the same connection nearer its client stands for."""
    va, vb = m["vantage_a"].to_pylist(), m["vantage_b"].to_pylist()
    ca, cb = m["conn_id_a"].to_pylist(), m["conn_id_b"].to_pylist()
    per_pair: dict[tuple[str, str], list[int]] = {}
    for i, k in enumerate(zip(ca, cb)):
        per_pair.setdefault(k, []).append(i)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    rtt: dict[str, list[float]] = {}
    vantage: dict[str, str] = {}
    for (a, b), ix in per_pair.items():
        edge, _bound = est[(va[ix[0]], vb[ix[0]])]
        if abs(float(np.median(theta[ix])) - edge) > ALIAS_TOLERANCE_NS + float(np.min(delta[ix])):
            continue  # not one connection: a 4-tuple used again
        parent[find(a)] = find(b)
        rtt.setdefault(a, []).extend(rtt_a[ix].tolist())
        rtt.setdefault(b, []).extend(rtt_b[ix].tolist())
        vantage[a], vantage[b] = va[ix[0]], vb[ix[0]]
    refs = {o.ref for o in offsets.values()}
    groups: dict[str, list[str]] = {}
    for c in parent:
        groups.setdefault(find(c), []).append(c)
    copies: set[str] = set()
    for members in groups.values():
        best = max(members, key=lambda c: (float(np.median(rtt[c])), vantage[c] in refs, _neg(c)))
        copies.update(c for c in members if c != best)
    return copies


def _neg(conn_id: str) -> tuple[int, ...]:
    """A key that sorts conn ids in reverse (max() then takes the lowest)."""
    return tuple(-ord(ch) for ch in conn_id)
