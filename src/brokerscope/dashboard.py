"""`brokerscope report`: one self-contained HTML page of plots over the lake, for people.

The aggregates are computed without a JVM: delta-rs's SQL engine (DataFusion, through
`deltalake.QueryBuilder`) reads each table's current snapshot, skips files by partition (`date`)
and statistics, and returns only small tables, a row per time bucket and series. Plotly draws
them; plotly.js is written into the page once, so the file opens with no network at all.

Time: the captures in scope are intervals (first to last row of each); overlapping ones merge,
and the bucket width is chosen from the time they cover (at most TARGET_BUCKETS buckets, on the
BUCKETS ladder), so a lake of captures years apart still gets buckets fit for each. A silence of
more than GAP_BUCKETS buckets between captures separates two stretches of the time axes, which
are category axes of bucket starts (Timeline): the axis jumps over the silence, marked by a grey
band that names its length.

Percentiles are exact (DataFusion's `percentile_cont`, linear interpolation between the closest
ranks, as numpy's default) up to EXACT_PERCENTILE_ROWS latency rows in scope, then t-digest
estimates (`approx_percentile_cont`, bounded memory); the page says which.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from . import __version__, export
from .capture.filter import format_time, parse_time
from .lake import Lake

MS = 1_000_000
BUCKETS = tuple(
    n * unit
    for unit, steps in (
        (MS, (1, 2, 5, 10, 20, 50, 100, 200, 500)),
        (1000 * MS, (1, 2, 5, 10, 15, 30)),
        (60_000 * MS, (1, 2, 5, 10, 15, 30)),
        (3_600_000 * MS, (1, 2, 3, 6, 12, 24, 48, 168)),
    )
    for n in steps
)
TARGET_BUCKETS = 120  # buckets over the time the captures cover
GAP_BUCKETS = 20  # a silence longer than this many buckets separates two stretches of the axis
MAX_STRETCHES = 12  # stretches on a time axis (more: the shortest silences stay on it)
MAX_AXIS = 600  # buckets on a time axis (more: a wider bucket)
TOP_SERIES = 8  # lines in a time chart (commands, topics); the rest are named in its note
TOP_BARS = 15  # bars in a top-N chart
TROUBLED_ROWS = 25  # rows of the troubled-connections table
SUMMARY_ROWS = 20  # commands in the latency table
EXACT_PERCENTILE_ROWS = 5_000_000  # latency rows in scope up to which percentiles are exact

_CAPTURE_ID = re.compile(r"^[0-9a-f]{8,64}$")


def _lit(text: str) -> str:
    """A SQL string literal (single quotes doubled): user text never becomes SQL."""
    return "'" + str(text).replace("'", "''") + "'"


def _in(column: str, values) -> str:
    return f"{column} IN ({', '.join(_lit(v) for v in values)})"


# the derived tables, whose time is their `ts` column alone (a journey's first sighting, a lag
# row's minute): a scope's window reads it (found by a user trial: `report --since` on a lake
# ingested with --journeys or --lag asked them for ts_ns and failed)
US_TABLES = frozenset({"journeys", "lag"})


@dataclass(frozen=True)
class Scope:
    """What the report covers: captures, a time window [since, until) and topics (each optional).
    Values become SQL literals; nothing the user types is SQL."""

    capture_ids: tuple[str, ...] = ()
    since_ns: int | None = None
    until_ns: int | None = None
    topics: tuple[str, ...] = ()

    @classmethod
    def parse(cls, capture_ids=(), since=None, until=None, topics=()) -> Scope:
        """From the command's flags; a bad value raises ValueError naming its flag."""
        ids = tuple(dict.fromkeys(c.strip().lower() for c in capture_ids or ()))
        for c in ids:
            if not _CAPTURE_ID.match(c):
                raise ValueError(f"--capture-id wants a capture id (hex, as in inputs.capture_id), not {c!r}")
        lo = parse_time(since, "--since") if since is not None else None
        hi = parse_time(until, "--until") if until is not None else None
        if lo is not None and hi is not None and hi <= lo:
            raise ValueError(f"--until ({until}) is not after --since ({since})")
        names = tuple(dict.fromkeys(t for t in topics or () if t))
        return cls(ids, lo, hi, names)

    def where(self, table: str) -> str:
        """The predicate selecting this scope's rows of a decoded table ("TRUE" for everything)."""
        parts = []
        if self.capture_ids:
            parts.append(_in("capture_id", self.capture_ids))
        if table in US_TABLES:  # no ts_ns: their `ts` (microseconds) against the bounds rounded up
            start = end = "CAST(ts AS BIGINT)"
            lo, hi = (None if t is None else -(-t // 1000) for t in (self.since_ns, self.until_ns))
        else:
            start = "ts_ns"
            end = "ts_ns + CAST(coalesce(duration_us, 0) * 1000 AS BIGINT)" if table == "streams" else "ts_ns"
            lo, hi = self.since_ns, self.until_ns
        if lo is not None:
            parts.append(f"{end} >= {lo}")
            if table != "streams":  # a connection that started days before the window still overlaps it
                parts.append(f"date >= DATE {_lit(_utc(self.since_ns).date().isoformat())}")
        if hi is not None:
            parts.append(f"{start} < {hi}")
            parts.append(f"date <= DATE {_lit(_utc(self.until_ns).date().isoformat())}")
        if self.topics:
            if table == "streams":  # the connections that carried one of the topics
                inner = Scope(self.capture_ids, self.since_ns, self.until_ns, self.topics).where("commands")
                parts.append(f"conn_id IN (SELECT DISTINCT conn_id FROM commands WHERE {inner})")
            else:
                parts.append(_in("topic", self.topics))
        return " AND ".join(parts) or "TRUE"

    def start(self, column: str = "ts_ns") -> str:
        """SQL: `column`, or the window's start for a row before it (a connection that began
        before --since is placed at the window's start on the time axes)."""
        return column if self.since_ns is None else f"greatest({column}, {self.since_ns})"

    def text(self) -> str:
        out = []
        if self.capture_ids:
            out.append("capture " + ", ".join(self.capture_ids))
        if self.since_ns is not None or self.until_ns is not None:
            lo = format_time(self.since_ns) if self.since_ns is not None else "the start"
            hi = format_time(self.until_ns) if self.until_ns is not None else "the end"
            out.append(f"from {lo} until {hi}")
        if self.topics:
            out.append("topic " + ", ".join(self.topics))
        return "; ".join(out) or "the whole lake"


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _utc(ns: int) -> _dt.datetime:
    """Integer arithmetic: a bucket that starts at .500 s is labelled .500, not .499."""
    return _EPOCH + _dt.timedelta(microseconds=ns // 1000)


def utc_text(ns: int) -> str:
    """A time for plotly's date axes (UTC, milliseconds: what plotly.js resolves)."""
    return _utc(ns).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def bucket_width(covered_ns: int) -> int:
    """The first width of the BUCKETS ladder that cuts `covered_ns` into at most TARGET_BUCKETS."""
    for w in BUCKETS:
        if covered_ns <= w * TARGET_BUCKETS:
            return w
    return BUCKETS[-1]


def width_text(ns: int) -> str:
    for unit, name in ((86_400_000 * MS, "d"), (3_600_000 * MS, "h"), (60_000 * MS, "min"), (1000 * MS, "s")):
        if ns >= unit and ns % unit == 0:
            return f"{ns // unit} {name}"
    return f"{ns / MS:g} ms"


class Source:
    """The lake's tables for DataFusion SQL (no JVM): each registered from its current snapshot."""

    def __init__(self, lake: Lake):
        from deltalake import QueryBuilder

        self.lake = lake
        self._qb = QueryBuilder()
        readable = []
        for t in lake.table_names():
            try:
                self._qb.register(t, lake.readable(t))
                readable.append(t)
            except Exception:  # noqa: BLE001 - named in lake.unreadable; its charts say so
                pass
        self.damaged = {t: why for t, why in lake.unreadable.items() if t not in readable}
        self.tables = [t for t in readable if t != "inputs"]
        self.missing = [
            t
            for t in ("commands", "messages", "latencies", "acks", "streams")
            if t not in self.tables and t not in self.damaged
        ]

    def has(self, table: str) -> bool:
        return table in self.tables

    def query(self, sql: str) -> pa.Table:
        """The result of one statement; QueryError (one line) when the engine refuses it."""
        try:
            return pa.table(self._qb.execute(sql).read_all())
        except Exception as e:  # noqa: BLE001 - deltalake raises its own and DataFusion's errors
            text = str(e).strip()
            m = _NO_FIELD.search(text)
            if m:
                table = next((t for t in self.tables if re.search(rf"\bFROM {t}\b", sql)), "a")
                raise QueryError(
                    f"the `{table}` table of this lake has no column `{m.group(1).split('.')[-1]}` "
                    "(written by an older brokerscope: the next `brokerscope ingest` into it adds it)"
                ) from None
            raise QueryError(text.splitlines()[0] if text else type(e).__name__) from None


class QueryError(ValueError):
    """A query the lake could not answer, in one line."""


_NO_FIELD = re.compile(r"No field named \"?([\w.]*\w)\"?")


@dataclass
class Timeline:
    """The time axes: the bucket width and the stretches of time the captures cover, as a category
    axis of bucket starts with a separator between stretches (the axis jumps over the silence
    between two captures instead of spreading a few seconds of traffic over years)."""

    width_ns: int
    stretches: list[tuple[int, int]]  # (first bucket start, last bucket start), in order

    def bucket(self, column: str = "ts_ns") -> str:
        """SQL: the start of the bucket holding `column` (an integer of nanoseconds)."""
        w = self.width_ns
        return f"(CAST({column} / {w} AS BIGINT) * {w})"

    def buckets(self) -> list[int]:
        """Every bucket start on the axis, in order."""
        w = self.width_ns
        return [b for lo, hi in self.stretches for b in range(lo, hi + w, w)]

    def label(self, b: int) -> str:
        """A bucket's category: its start in UTC, to the precision of the width."""
        return utc_text(b)[
            : 10
            if self.width_ns % (86_400_000 * MS) == 0
            else 16
            if self.width_ns % (60_000 * MS) == 0
            else 19
            if self.width_ns % (1000 * MS) == 0
            else 23
        ]

    def categories(self) -> list[str]:
        """The axis: a category per bucket, and between two stretches a separator naming the
        silence it stands for ("(+3.2 d)")."""
        out: list[str] = []
        for i, (lo, hi) in enumerate(self.stretches):
            if i:  # zero-width spaces keep two equal silences two categories
                out.append(f"(+{duration_text(lo - self.stretches[i - 1][1])})" + "\u200b" * i)
            out.extend(self.label(b) for b in range(lo, hi + self.width_ns, self.width_ns))
        return out

    def separators(self) -> list[int]:
        """Positions of the separators on the axis."""
        out, pos = [], 0
        for i, (lo, hi) in enumerate(self.stretches):
            if i:
                out.append(pos)
                pos += 1
            pos += (hi - lo) // self.width_ns + 1
        return out

    def align(self, values: dict[int, float], fill: float | None = 0) -> list[float | None]:
        """Values by bucket start as a list along the axis: `fill` for a bucket without a value,
        None at the separators (lines break there)."""
        out: list[float | None] = []
        for i, (lo, hi) in enumerate(self.stretches):
            if i:
                out.append(None)
            out.extend(values.get(b, fill) for b in range(lo, hi + self.width_ns, self.width_ns))
        return out

    def ticks(self, n: int = 10) -> tuple[list[str], list[str]]:
        """About n tick positions (categories) and their text, at least len/n categories apart:
        the time, with the date under it at the first tick of a stretch and where the date
        changes (day buckets: the date alone)."""
        cats = self.categories()
        step = max(1, len(cats) // n)
        vals: list[str] = []
        text: list[str] = []
        last_pos, last_date, last_stretch, pos = -step, None, -1, 0
        for i, (lo, hi) in enumerate(self.stretches):
            if i:
                pos += 1
            count = (hi - lo) // self.width_ns + 1
            for k in range(0, count, step):
                if pos + k - last_pos < step:
                    continue
                label = self.label(lo + k * self.width_ns)
                date, clock = label[:10], label[11:]
                vals.append(cats[pos + k])
                dated = not clock or i != last_stretch or date != last_date
                text.append(date if not clock else clock + ("<br>" + date if dated else ""))
                last_pos, last_date, last_stretch = pos + k, date, i
            pos += count
        return vals, text


def duration_text(ns: int) -> str:
    """A duration for people: 850 ms, 12.5 s, 4.2 min, 3.1 h, 1,095 d."""
    for unit, name in (
        (86_400_000 * MS, "d"),
        (3_600_000 * MS, "h"),
        (60_000 * MS, "min"),
        (1000 * MS, "s"),
        (MS, "ms"),
    ):
        if ns >= unit or unit == MS:
            v = ns / unit
            return f"{v:.3g} {name}" if v < 100 else f"{v:,.0f} {name}"
    raise AssertionError("unreachable")


def make_timeline(intervals: list[tuple[int, int]]) -> Timeline | None:
    """Buckets and stretches for rows covering these (first, last) intervals (ns): the width fits
    about TARGET_BUCKETS buckets in the time covered; a silence of more than GAP_BUCKETS buckets
    separates two stretches, at most MAX_STRETCHES of them (the shortest silences are kept on the
    axis), and the axis holds at most MAX_AXIS buckets (else the next wider bucket)."""
    if not intervals:
        return None
    merged: list[list[int]] = []
    for lo, hi in sorted(intervals):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    covered = sum(max(hi - lo, MS) for lo, hi in merged)
    for w in BUCKETS[BUCKETS.index(bucket_width(covered)) :]:
        spans = [[lo // w * w, hi // w * w] for lo, hi in merged]
        gaps = sorted(range(1, len(spans)), key=lambda i: spans[i][0] - spans[i - 1][1])
        silent = [i for i in gaps if spans[i][0] - spans[i - 1][1] > GAP_BUCKETS * w]
        cut = set(silent[-(MAX_STRETCHES - 1) :]) if MAX_STRETCHES > 1 else set()
        stretches: list[list[int]] = []
        for i, (lo, hi) in enumerate(spans):
            if stretches and i not in cut:
                stretches[-1][1] = max(stretches[-1][1], hi)
            else:
                stretches.append([lo, hi])
        n = sum((hi - lo) // w + 1 for lo, hi in stretches) + len(stretches) - 1
        if n <= MAX_AXIS or w == BUCKETS[-1]:
            return Timeline(w, [(lo, hi) for lo, hi in stretches])
    raise AssertionError("unreachable")


# -- aggregates: one SQL query each, over a scope and a timeline ----------------------------------


def input_statuses(src: Source, scope: Scope) -> str:
    """The inputs (of the scope's captures) by status, for the header: "22 ok, 1 partial"."""
    if "inputs" not in src.lake.table_names():
        return "no inputs table"
    where = _in("capture_id", scope.capture_ids) if scope.capture_ids else "TRUE"
    t = src.query(
        f"""SELECT status, count(DISTINCT coalesce(capture_id, path)) AS n FROM inputs
        WHERE status IS NOT NULL AND status <> 'replaced' AND {where} GROUP BY 1 ORDER BY 2 DESC, 1"""
    )
    found = ", ".join(f"{n:,} {s}" for s, n in zip(t.column("status").to_pylist(), t.column("n").to_pylist()))
    return (found + " (statuses in the inputs table)") if found else "none recorded"


def covered_intervals(src: Source, scope: Scope) -> list[tuple[int, int]]:
    """(first, last) ns of each capture's rows in scope, over the tables the time charts read."""
    parts = []
    for t in ("commands", "latencies", "streams"):
        if src.has(t):
            ts = scope.start() if t == "streams" else "ts_ns"
            # a segment file's problem rows (no connection) are on no capture's clock
            own = " AND conn_id IS NOT NULL" if t == "commands" else ""
            parts.append(
                f"SELECT capture_id, {ts} AS ts_ns FROM {t} WHERE ts_ns IS NOT NULL{own} AND {scope.where(t)}"
            )
    if src.has("messages"):
        parts.append(
            "SELECT capture_id, ts_ns FROM messages WHERE ts_ns IS NOT NULL "
            f"AND direction IN ('produce', 'deliver') AND {scope.where('messages')}"
        )
    if not parts:
        return []
    sql = f"SELECT capture_id, min(ts_ns) AS lo, max(ts_ns) AS hi FROM ({' UNION ALL '.join(parts)}) GROUP BY capture_id"
    t = src.query(sql)
    return list(zip(t.column("lo").to_pylist(), t.column("hi").to_pylist()))


def stored_span(src: Source, scope: Scope) -> tuple[int, int | None, int | None]:
    """Messages in scope read from broker segment files (direction `stored`), and the first and
    last of their record times (ns): rows the time charts leave out, their times not a capture's."""
    if not src.has("messages"):
        return 0, None, None
    t = src.query(
        "SELECT count(*) AS n, min(ts_ns) AS lo, max(ts_ns) AS hi FROM messages "
        f"WHERE direction = 'stored' AND {scope.where('messages')}"
    )
    return t.column("n")[0].as_py(), t.column("lo")[0].as_py(), t.column("hi")[0].as_py()


def row_counts(src: Source, scope: Scope) -> dict[str, int]:
    """Rows in scope per decoded table the lake holds."""
    return {
        t: src.query(f"SELECT count(*) AS n FROM {t} WHERE {scope.where(t)}").column("n")[0].as_py()
        for t in src.tables
    }


def request_latency(src: Source, scope: Scope, tl: Timeline, exact: bool) -> pa.Table:
    """Per command (protocol + request_command) and bucket: requests, p50 and p99 latency (µs)."""
    pct = "percentile_cont" if exact else "approx_percentile_cont"
    b = tl.bucket()
    return src.query(
        f"""SELECT concat(protocol, ' ', request_command) AS series, {b} AS bucket_ns,
               count(*) AS requests,
               {pct}(latency_us, 0.5) AS p50_us, {pct}(latency_us, 0.99) AS p99_us
        FROM latencies
        WHERE request_command IS NOT NULL AND {scope.where("latencies")}
        GROUP BY 1, 2 ORDER BY 2"""
    )


def latency_summary(src: Source, scope: Scope, exact: bool, limit: int = SUMMARY_ROWS) -> pa.Table:
    """Per command over the whole scope: requests, p50, p99 and max latency (µs), responses with
    a non-zero error code; the busiest commands first."""
    pct = "percentile_cont" if exact else "approx_percentile_cont"
    return src.query(
        f"""SELECT protocol, request_command, count(*) AS requests,
               {pct}(latency_us, 0.5) AS p50_us, {pct}(latency_us, 0.99) AS p99_us,
               max(latency_us) AS max_us,
               sum(CASE WHEN error_code IS NOT NULL AND error_code <> 0 THEN 1 ELSE 0 END) AS errors
        FROM latencies
        WHERE request_command IS NOT NULL AND {scope.where("latencies")}
        GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT {int(limit)}"""
    )


def throughput(src: Source, scope: Scope, tl: Timeline) -> pa.Table:
    """Per direction (produce, deliver), topic and bucket: messages and key + value bytes."""
    return src.query(
        f"""SELECT direction, coalesce(topic, topic_id, '(no topic)') AS topic, {tl.bucket()} AS bucket_ns,
               count(*) AS messages,
               sum(coalesce(value_size, length(value), 0) + coalesce(length(key), 0)) AS bytes
        FROM messages
        WHERE direction IN ('produce', 'deliver') AND {scope.where("messages")}
        GROUP BY 1, 2, 3 ORDER BY 3"""
    )


def error_codes(src: Source, scope: Scope, tl: Timeline) -> pa.Table:
    """Per protocol, command, error code and bucket: frames carrying a non-zero error_code."""
    return src.query(
        f"""SELECT protocol, command, error_code, {tl.bucket()} AS bucket_ns, count(*) AS frames
        FROM commands
        WHERE error_code IS NOT NULL AND error_code <> 0 AND {scope.where("commands")}
        GROUP BY 1, 2, 3, 4 ORDER BY 4"""
    )


def decode_statuses(src: Source, scope: Scope, tl: Timeline) -> pa.Table:
    """Per protocol, decode_status other than ok, and bucket: frames."""
    return src.query(
        f"""SELECT concat(protocol, ': ', decode_status) AS series, {tl.bucket()} AS bucket_ns, count(*) AS frames
        FROM commands
        WHERE decode_status IS NOT NULL AND decode_status <> 'ok' AND conn_id IS NOT NULL
          AND {scope.where("commands")}
        GROUP BY 1, 2 ORDER BY 2"""
    )


def connections_over_time(src: Source, scope: Scope, tl: Timeline) -> pa.Table:
    """Per bucket of the connections' first packet (or the window's start): connections, and
    those with gaps, retransmissions, a reset."""
    return src.query(
        f"""SELECT {tl.bucket(scope.start())} AS bucket_ns, count(*) AS opened,
               sum(CASE WHEN gap_count > 0 THEN 1 ELSE 0 END) AS with_gaps,
               sum(CASE WHEN retransmitted_bytes > 0 THEN 1 ELSE 0 END) AS with_retransmissions,
               sum(CASE WHEN rst_seen THEN 1 ELSE 0 END) AS reset
        FROM streams WHERE {scope.where("streams")}
        GROUP BY 1 ORDER BY 1"""
    )


def connection_states(src: Source, scope: Scope) -> pa.Table:
    return src.query(
        f"""SELECT coalesce(conn_state, '?') AS conn_state, protocol, count(*) AS connections
        FROM streams WHERE {scope.where("streams")} GROUP BY 1, 2 ORDER BY 3 DESC"""
    )


def troubled_connections(src: Source, scope: Scope, limit: int = TROUBLED_ROWS) -> pa.Table:
    """Connections with gaps, retransmissions or a reset, the most damaged first."""
    return src.query(
        f"""SELECT conn_id, protocol, client_ip, client_port, server_ip, server_port, ts_ns,
               duration_us, conn_state, history, gap_count, gap_bytes, retransmitted_bytes, rst_seen,
               frames_failed
        FROM streams
        WHERE (gap_count > 0 OR retransmitted_bytes > 0 OR rst_seen) AND {scope.where("streams")}
        ORDER BY gap_bytes + retransmitted_bytes DESC, gap_count DESC, rst_seen DESC, ts_ns
        LIMIT {int(limit)}"""
    )


def top_clients(src: Source, scope: Scope, limit: int = TOP_BARS) -> pa.Table:
    """Client addresses by payload bytes (both directions) with their connections."""
    return src.query(
        f"""SELECT client_ip, count(*) AS connections, sum(coalesce(c2s_bytes, 0)) AS sent,
               sum(coalesce(s2c_bytes, 0)) AS received
        FROM streams WHERE client_ip IS NOT NULL AND {scope.where("streams")}
        GROUP BY 1 ORDER BY sent + received DESC, client_ip LIMIT {int(limit)}"""
    )


def client_names(src: Source, scope: Scope) -> dict[str, str]:
    """The client id most requests of each client address carried (Kafka's client.id, ...)."""
    t = src.query(
        f"""SELECT client_ip, client_id, count(*) AS n FROM commands
        WHERE client_id IS NOT NULL AND client_id <> '' AND client_ip IS NOT NULL AND {scope.where("commands")}
        GROUP BY 1, 2 ORDER BY 3 DESC, 2"""
    )
    out: dict[str, str] = {}
    for ip, cid in zip(t.column("client_ip").to_pylist(), t.column("client_id").to_pylist()):
        out.setdefault(ip, cid)
    return out


def top_topics(src: Source, scope: Scope, limit: int = TOP_BARS) -> pa.Table:
    """Topics by messages, per direction (produce, deliver, stored)."""
    return src.query(
        f"""WITH m AS (
              SELECT coalesce(topic, topic_id) AS topic, direction,
                     coalesce(value_size, length(value), 0) + coalesce(length(key), 0) AS b
              FROM messages WHERE coalesce(topic, topic_id) IS NOT NULL AND {scope.where("messages")}),
            top AS (SELECT topic FROM m GROUP BY topic ORDER BY count(*) DESC, topic LIMIT {int(limit)})
        SELECT topic, direction, count(*) AS messages, sum(b) AS bytes
        FROM m WHERE topic IN (SELECT topic FROM top) GROUP BY 1, 2"""
    )


@dataclass
class Result:
    out: Path
    charts: int  # figures drawn
    empty: list[str]  # sections without a figure, and why
    seconds: float
    bytes: int


def build(
    lake_path: str | os.PathLike,
    out: str | os.PathLike,
    scope: Scope = Scope(),
    progress: Callable[[str], None] = lambda m: None,
) -> Result:
    """Compute the aggregates of `scope` over the lake and write the page to `out`. Raises
    ValueError (one line naming the lake or the file) for a lake that is not one, a capture id it
    does not hold, or an output that cannot be written."""
    t0 = time.monotonic()
    lake = Lake(lake_path)
    lake.check_readable()
    out = Path(out)
    export.check_out(out, "the HTML file")
    src = Source(lake)
    if scope.capture_ids and "inputs" in lake.table_names():
        rows = src.query(
            f"SELECT capture_id, status, replaced_by FROM inputs WHERE {_in('capture_id', scope.capture_ids)}"
        ).to_pylist()
        unknown = [c for c in scope.capture_ids if c not in {r["capture_id"] for r in rows}]
        if unknown:
            raise ValueError(
                f"no capture {', '.join(unknown)} in the lake at {lake.root} (see its inputs table)"
            )
        for c in scope.capture_ids:  # its rows gone with it: no empty page for a typo'd choice
            mine = [r for r in rows if r["capture_id"] == c]
            if all(r["status"] == "replaced" for r in mine):
                raise ValueError(
                    f"capture {c} was replaced by {mine[0]['replaced_by']}, the content its path holds now "
                    "(it grew): report that capture"
                )
    if scope.topics:  # a topic no row names is a typo, not an empty report
        names = set()
        for table in ("commands", "messages"):
            if table in lake.table_names():
                sql = f"SELECT DISTINCT topic FROM {table} WHERE {_in('topic', scope.topics)}"
                names.update(src.query(sql).column(0).to_pylist())
        unknown = [t for t in scope.topics if t not in names]
        if unknown:
            raise ValueError(
                f"no topic {', '.join(unknown)} in the lake at {lake.root} (no commands or messages row names it)"
            )

    def step(msg: str) -> None:
        progress(f"{msg} ({time.monotonic() - t0:.1f} s)")

    from . import plots  # plotly's import takes a moment: not for the other commands

    warnings = [
        f"The lake at {lake.root} has no `{t}` table: the charts that read it say so." for t in src.missing
    ]
    warnings += [f"{why}: the charts that read it say so." for why in src.damaged.values()]
    counts = row_counts(src, scope)
    step("counted rows in scope")
    intervals = covered_intervals(src, scope)
    tl = make_timeline(intervals)
    stored, stored_lo, stored_hi = stored_span(src, scope) if tl is None else (0, None, None)
    exact = counts.get("latencies", 0) <= EXACT_PERCENTILE_ROWS
    charts: list[plots.Chart] = []

    def missing(key: str, table: str) -> plots.Chart:
        if table in src.damaged:
            return plots.Chart(key, empty=f"The lake's `{table}` table cannot be read (see above).")
        if not src.has(table):
            return plots.Chart(key, empty=f"The lake has no `{table}` table.")
        if table == "messages" and stored:
            return plots.Chart(
                key,
                empty=f"No captured messages in scope to place on a time axis: the {stored:,} in `messages` "
                "are records of broker segment files (their times are the records' own).",
            )
        return plots.Chart(key, empty=f"No rows in scope to place on a time axis (`{table}` has none).")

    def section(keys: tuple[str, ...], table: str, timed: bool, make: Callable[[], list]) -> None:
        """The charts `keys` from `table`, or a note in their place: no such table, no rows to
        place in time, or a query the lake cannot answer (a column an older lake lacks)."""
        if not src.has(table) or (timed and tl is None):
            charts.extend(missing(k, table) for k in keys)
        else:
            try:
                charts.extend(make())
            except QueryError as e:
                charts.extend(plots.Chart(k, empty=f"Could not compute this chart: {e}") for k in keys)
        step(", ".join(keys))

    def latency() -> list:
        rate, lat = plots.chart_requests(request_latency(src, scope, tl, exact), tl, exact)
        lat.extra_html = plots.latency_table(latency_summary(src, scope, exact), exact)
        return [rate, lat]

    def connections() -> list:
        conn = plots.chart_connections(connections_over_time(src, scope, tl), tl)
        conn.extra_html = plots.troubled_table(troubled_connections(src, scope), str(lake.root))
        return [conn]

    def clients() -> list:
        names = client_names(src, scope) if src.has("commands") else {}
        return [plots.chart_clients(top_clients(src, scope), names)]

    section(("requests", "latency"), "latencies", True, latency)
    section(
        ("throughput",), "messages", True, lambda: [plots.chart_throughput(throughput(src, scope, tl), tl)]
    )
    section(("errors",), "commands", True, lambda: [plots.chart_errors(error_codes(src, scope, tl), tl)])
    section(("decode",), "commands", True, lambda: [plots.chart_decode(decode_statuses(src, scope, tl), tl)])
    section(("connections",), "streams", True, connections)
    section(("states",), "streams", False, lambda: [plots.chart_states(connection_states(src, scope))])
    section(("clients",), "streams", False, clients)
    section(("topics",), "messages", False, lambda: [plots.chart_topics(top_topics(src, scope))])

    if not any(counts.values()):
        warnings.insert(
            0, f"No rows in scope ({scope.text()}) in the lake at {lake.root}: every chart is empty."
        )
    span = ""
    if tl:
        span = f"{utc_text(min(lo for lo, _ in intervals))} to {utc_text(max(hi for _, hi in intervals))} UTC"
        if len(tl.stretches) > 1:
            span += f" ({len(tl.stretches)} stretches: the time axes jump over the silences between them)"
    elif stored:
        span = (
            f"no capture in scope; {stored:,} messages from broker segment files, record times "
            f"{utc_text(stored_lo)} to {utc_text(stored_hi)} UTC"
            if stored_lo is not None
            else f"no capture in scope; {stored:,} messages from broker segment files, without record times"
        )
    facts = [
        ("lake", str(lake.root)),
        ("scope", scope.text()),
        ("time", span or "no rows"),
        ("bucket", width_text(tl.width_ns) if tl else "-"),
        ("rows in scope", ", ".join(f"{t} {n:,}" for t, n in counts.items()) or "none"),
        ("inputs", input_statuses(src, scope)),
        (
            "percentiles",
            "exact" if exact else f"t-digest estimates (over {EXACT_PERCENTILE_ROWS:,} latency rows)",
        ),
        ("generated", f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M:%S} UTC by brokerscope {__version__}"),
    ]
    page = plots.render(lake, scope, charts, facts, warnings)
    _write(out, page)
    empty = [f"{c.key}: {c.empty}" for c in charts if c.figure is None]
    return Result(
        out, sum(1 for c in charts if c.figure is not None), empty, time.monotonic() - t0, len(page.encode())
    )


def _write(out: Path, page: str) -> None:
    """Write the page whole or not at all."""
    try:
        with export.whole_file(out, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as e:
        raise ValueError(f"cannot write the report to {out}: {e.strerror or e}") from None
