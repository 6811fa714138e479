"""One harness for every protocol's conversation tests: bytes in, rows out, every row checked
against its table's schema.

    d = Drive("kafka").feed("c2s", request).feed("s2c", response, chunk=7).close()
    out = d.tables()  # {"commands": [...], "messages": [...], "latencies": [...], "acks": [...]}

The clock starts at `T0`; each piece fed moves it by `dt` ns unless a time is given. `tables()`
builds every table through `tables.conform` (unknown keys fail there) and fails when conform had
to null a value the decoder produced (a value that does not fit its column is a decoder bug here,
unless the test expects it: `tables(allow_anomalies=True)`). Rows come back with every column
present; side rows (topic names learned) are in `topic_names`.
"""

from __future__ import annotations

from brokerscope import tables
from brokerscope.protocols import base
from brokerscope.protocols.base import ConnInfo, Context, Conversation, Row

T0 = 1_700_000_000_000_000_000
TABLES = ("commands", "messages", "latencies", "acks")


def conn_for(protocol: str, midstream: bool = False) -> ConnInfo:
    """A connection to the protocol's first default port (its registry entry)."""
    port = base.get(protocol).default_ports[0]
    return ConnInfo("c1", "10.0.0.1", 40000, "10.0.0.2", port, midstream=midstream)


class Drive:
    """Feeds bytes to one conversation and collects its rows."""

    def __init__(
        self,
        protocol: str | Conversation,
        ctx: Context | None = None,
        conn: ConnInfo | None = None,
        t0: int = T0,
        dt: int = 1000,
    ):
        if isinstance(protocol, Conversation):
            self.conv = protocol
        else:
            self.conv = base.get(protocol).conversation(conn or conn_for(protocol), ctx or Context())
        self.rows: list[Row] = []
        self.t = t0
        self.dt = dt
        self.topic_names: dict[str, str] = {}

    def feed(self, direction: str, data: bytes, chunk: int | None = None, ts: int | None = None) -> Drive:
        """Feed `data` in `chunk`-byte pieces: each at `ts` if given, else the clock moves `dt`
        before each piece."""
        step = chunk or max(1, len(data))
        for i in range(0, len(data), step):
            if ts is None:
                self.t += self.dt
            self.rows.extend(self.conv.feed(direction, data[i : i + step], self.t if ts is None else ts))
        return self

    def c2s(self, data: bytes, chunk: int | None = None) -> Drive:
        return self.feed(base.C2S, data, chunk)

    def s2c(self, data: bytes, chunk: int | None = None) -> Drive:
        return self.feed(base.S2C, data, chunk)

    def gap(self, direction: str, nbytes: int, ts: int | None = None) -> Drive:
        if ts is None:
            self.t += self.dt
        self.rows.extend(self.conv.gap(direction, nbytes, self.t if ts is None else ts))
        return self

    def close(self) -> Drive:
        self.rows.extend(self.conv.close())
        return self

    def tables(self, fill: bool = True, allow_anomalies: bool = False) -> dict[str, list[dict]]:
        """Rows by table, each table built through its schema (see the module docstring);
        `fill`: every column present (None where the decoder left it out), `*_ns` keys kept."""
        out: dict[str, list[dict]] = {t: [] for t in TABLES}
        for t, r in self.rows:
            if t == base.TOPIC_NAMES:
                self.topic_names[r["topic_id"]] = r["topic"]
                continue
            out[t].extend(r.rows() if isinstance(r, tables.Block) else [r])
        for t, rs in out.items():
            batch = tables.conform(t, rs)
            if not allow_anomalies:
                added = [
                    (r, a)
                    for r, a in zip(rs, batch.column("anomalies").to_pylist())
                    if a and a != r.get("anomalies")
                ]
                assert not added, f"{t}: values that do not fit their columns: {added[:3]}"
            if fill:
                sch = tables.schema(t)
                names = sch.names + [f"{f.name}_ns" for f in sch if str(f.type).startswith("timestamp")]
                out[t] = [{**dict.fromkeys(names), **r} for r in rs]
        return out
