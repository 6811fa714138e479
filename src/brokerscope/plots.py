"""The report's figures and page (`brokerscope report`, dashboard.py computes what they show):
plotly figures from the aggregate tables, one HTML page with plotly.js inlined once, and in the
place of a chart with nothing to draw a note saying why."""

from __future__ import annotations

import html
import re
import shlex
from dataclasses import dataclass

import pyarrow as pa

from .dashboard import TOP_BARS, TOP_SERIES, Scope, Timeline, utc_text, width_text
from .lake import Lake

# -- figures --------------------------------------------------------------------------------------

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
)  # fmt: skip
DIRECTION_COLORS = {"produce": "#1f77b4", "deliver": "#ff7f0e", "stored": "#7f7f7f"}
ZEEK_STATES = {
    "S0": "SYN seen, no reply",
    "S1": "established, not closed",
    "SF": "both sides closed with FIN",
    "REJ": "SYN answered by RST",
    "S2": "established, client closed, no FIN back",
    "S3": "established, server closed, no FIN back",
    "RSTO": "established, client reset",
    "RSTR": "established, server reset",
    "RSTOS0": "client SYN then RST, no SYN+ACK",
    "RSTRH": "server SYN+ACK then RST, no client SYN",
    "SH": "client SYN then FIN, no answer",
    "SHR": "server SYN+ACK then FIN, no answer",
    "OTH": "no SYN seen (mid-stream), not closed both ways",
}


TITLES = {
    "requests": "Request rate by command",
    "latency": "Latency p50 / p99 by command",
    "throughput": "Produce and deliver throughput by topic",
    "errors": "Error codes over time",
    "decode": "Frames that did not decode",
    "connections": "Connections: opened, with gaps, retransmissions, resets",
    "states": "Connection states (Zeek conn_state)",
    "clients": f"Top {TOP_BARS} clients by bytes",
    "topics": f"Top {TOP_BARS} topics by messages",
}


@dataclass
class Chart:
    """One section of the page (its title in TITLES): what it shows, and a figure or why there is
    none."""

    key: str
    about: str = ""
    figure: object | None = None  # a plotly Figure
    empty: str | None = None  # why there is no figure
    note: str | None = None  # what the figure leaves out (series beyond the top N, ...)
    extra_html: str = ""


def _layout(
    fig, tl: Timeline | None, y_title: str, height: int = 380, log_y: bool = False, ticks: int = 10
) -> None:
    """Common looks; for a time chart, the category axis of `tl` with about `ticks` labels, the
    separators between stretches as grey bands, and the bucket width in the axis title."""
    fig.update_layout(
        template="plotly_white",
        height=height,
        margin=dict(l=70, r=20, t=30, b=50),
        legend=dict(orientation="v", x=1.01, y=1, font=dict(size=11)),
        hovermode="x unified" if tl else "closest",
        font=dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", size=12),
    )
    if tl:
        cats = tl.categories()
        vals, text = tl.ticks(ticks)
        jumps = len(tl.stretches) - 1
        fig.update_xaxes(
            type="category",
            categoryorder="array",
            categoryarray=cats,
            tickvals=vals,
            ticktext=text,
            tickangle=0,
            title_text=f"time (UTC), {width_text(tl.width_ns)} buckets"
            + (f"; the axis jumps over {jumps} silence(s) between captures (grey)" if jumps else ""),
        )
        # the separators as grey bands on every subplot, set at once (add_vrect each costs 0.1 s)
        suffixes = [k[5:] for k in fig.layout.to_plotly_json() if k.startswith("xaxis")]
        band = dict(type="rect", fillcolor="#d9dce3", opacity=0.8, line_width=0, layer="below")
        fig.update_layout(
            shapes=[
                {
                    **band,
                    "xref": f"x{n}",
                    "yref": f"y{n} domain",
                    "x0": pos - 0.5,
                    "x1": pos + 0.5,
                    "y0": 0,
                    "y1": 1,
                }
                for pos in tl.separators()
                for n in suffixes
            ]
        )
        fig.update_yaxes(title_text=y_title, type="log" if log_y else "linear", rangemode="tozero")
    else:
        fig.update_yaxes(title_text=y_title or None)


def _whole_counts(fig, peak: float) -> None:
    """A count axis whose largest value is small gets a tick per unit, not 0.5, 1.5, ..."""
    if peak <= 8:
        fig.update_yaxes(dtick=1, tickformat="d")


def _dots(y: list, color: str) -> dict:
    """Markers on the buckets that have a value (a bucket alone between two silences is no line)."""
    return dict(color=color, size=[4 if v else 0 for v in y])


def _top(totals: dict[str, float], n: int = TOP_SERIES) -> tuple[list[str], list[str]]:
    """(the n largest keys, largest first; the rest)."""
    ranked = sorted(totals, key=lambda k: (-totals[k], k))
    return ranked[:n], ranked[n:]


def _by_series(t: pa.Table, series: str, value: str) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for s, b, v in zip(
        t.column(series).to_pylist(), t.column("bucket_ns").to_pylist(), t.column(value).to_pylist()
    ):
        d = out.setdefault(s, {})
        d[b] = d.get(b, 0) + (v or 0)
    return out


def _others(rest: list[str], what: str) -> str | None:
    if not rest:
        return None
    shown = ", ".join(rest[:6]) + (f" and {len(rest) - 6} more" if len(rest) > 6 else "")
    return f"{len(rest)} more {what} not drawn: {shown}"


def chart_requests(t: pa.Table, tl: Timeline, exact: bool) -> list[Chart]:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rate = Chart(
        "requests",
        f"Requests per second (request/response pairs in `latencies`), per {width_text(tl.width_ns)} bucket.",
    )
    lat = Chart(
        "latency",
        "Time from the request's last byte to the response's first byte, per bucket: p99 above, "
        f"p50 below ({'exact' if exact else 't-digest estimates'}; log scale).",
    )
    if t.num_rows == 0:
        rate.empty = lat.empty = (
            "No request/response pairs in scope (the `latencies` table has no rows here)."
        )
        return [rate, lat]
    counts = _by_series(t, "series", "requests")
    top, rest = _top({s: sum(v.values()) for s, v in counts.items()})
    secs, x = tl.width_ns / 1e9, tl.categories()
    rate.figure = go.Figure()
    lat.figure = make_subplots(
        rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=("p99", "p50")
    )
    rows = {s: {} for s in top}
    for s, b, p50, p99 in zip(
        *(t.column(c).to_pylist() for c in ("series", "bucket_ns", "p50_us", "p99_us"))
    ):
        if s in rows:
            rows[s][b] = (p50, p99)
    for i, s in enumerate(top):
        color = PALETTE[i % len(PALETTE)]
        rate.figure.add_trace(
            go.Scatter(
                x=x,
                y=(y := tl.align({b: n / secs for b, n in counts[s].items()})),
                name=s,
                mode="lines+markers",
                marker=_dots(y, color),
                line=dict(color=color, width=1.8),
                hovertemplate="%{y:.4~g} req/s",
            )
        )
        for row, k in ((1, 1), (2, 0)):
            ys = tl.align({b: v[k] / 1000 for b, v in rows[s].items() if v[k] is not None}, None)
            lat.figure.add_trace(
                go.Scatter(
                    x=x,
                    y=ys,
                    name=s,
                    legendgroup=s,
                    showlegend=row == 1,
                    mode="lines+markers",
                    marker=dict(size=4),
                    line=dict(color=color, width=1.5),
                    connectgaps=False,
                    hovertemplate="%{y:.4~g} ms",
                ),
                row=row,
                col=1,
            )
    _layout(rate.figure, tl, "requests / s")
    _layout(lat.figure, tl, "latency (ms)", height=560, log_y=True)
    lat.figure.update_xaxes(title_text=None, row=1, col=1)
    rate.note = lat.note = _others(rest, "commands")
    return [rate, lat]


def chart_throughput(t: pa.Table, tl: Timeline) -> Chart:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    c = Chart(
        "throughput",
        "Messages per second and bytes per second (key + value, before the payload policy) of "
        "produced and delivered messages (`messages`), per topic.",
    )
    if t.num_rows == 0:
        c.empty = "No produced or delivered messages in scope (the `messages` table has none here)."
        return c
    totals: dict[str, float] = {}
    cells: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}
    for d, topic, b, n, nb in zip(
        *(t.column(k).to_pylist() for k in ("direction", "topic", "bucket_ns", "messages", "bytes"))
    ):
        totals[topic] = totals.get(topic, 0) + n
        cells.setdefault((d, topic), {})[b] = (n, nb or 0)
    top, rest = _top(totals)
    if rest:  # the other topics summed: throughput adds up
        for (d, topic), per in list(cells.items()):
            if topic in rest:
                o = cells.setdefault((d, "other topics"), {})
                for b, (n, nb) in per.items():
                    on, ob = o.get(b, (0, 0))
                    o[b] = (on + n, ob + nb)
        top = [*top, "other topics"]
    secs, x = tl.width_ns / 1e9, tl.categories()
    fig = make_subplots(
        rows=2,
        cols=2,
        shared_xaxes=True,
        vertical_spacing=0.1,
        horizontal_spacing=0.08,
        subplot_titles=(
            "produce: messages / s",
            "deliver: messages / s",
            "produce: bytes / s",
            "deliver: bytes / s",
        ),
    )
    for i, topic in enumerate(top):
        color = PALETTE[i % len(PALETTE)]
        for col, d in ((1, "produce"), (2, "deliver")):
            per = cells.get((d, topic))
            if not per:
                continue
            for row, k in ((1, 0), (2, 1)):
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=(y := tl.align({b: v[k] / secs for b, v in per.items()})),
                        name=topic,
                        legendgroup=topic,
                        showlegend=not any(tr.name == topic for tr in fig.data),
                        mode="lines+markers",
                        marker=_dots(y, color),
                        line=dict(color=color, width=1.6),
                        hovertemplate="%{y:.4~s}" + (" msg/s" if k == 0 else "B/s"),
                    ),
                    row=row,
                    col=col,
                )
    _layout(fig, tl, "", height=600, ticks=5)
    fig.update_xaxes(title_text=f"time (UTC), {width_text(tl.width_ns)} buckets", row=2)
    fig.update_yaxes(title_text="messages / s", row=1, col=1)
    fig.update_yaxes(title_text="bytes / s", row=2, col=1)
    fig.update_yaxes(tickformat="~s")
    fig.update_xaxes(title_text=None, row=1)
    c.figure = fig
    c.note = _others(rest, "topics (summed as `other topics`)") if rest else None
    return c


def _error_name(protocol: str, code: int) -> str:
    if protocol == "kafka":
        try:
            from kafka.errors import for_code

            name = getattr(for_code(code), "message", "")
            return f" {name}" if name and name != "UNKNOWN" or code == -1 else ""
        except Exception:  # noqa: BLE001 - a name is a courtesy
            return ""
    return ""


def _stacked(t: pa.Table, tl: Timeline, series: str, y_title: str, top_n: int = TOP_SERIES):
    import plotly.graph_objects as go

    counts = _by_series(t, series, "frames")
    top, rest = _top({s: sum(v.values()) for s, v in counts.items()}, top_n)
    x = tl.categories()
    fig = go.Figure()
    for i, s in enumerate(top):
        fig.add_trace(
            go.Bar(
                x=x,
                y=tl.align(counts[s]),
                name=s,
                marker_color=PALETTE[i % len(PALETTE)],
                hovertemplate="%{y} frames",
            )
        )
    if rest:
        fig.add_trace(
            go.Bar(
                x=x,
                y=tl.align(
                    {b: sum(counts[s].get(b, 0) for s in rest) for b in {b for s in rest for b in counts[s]}}
                ),
                name=f"{len(rest)} others",
                marker_color="#c7c7c7",
                hovertemplate="%{y} frames",
            )
        )
    _layout(fig, tl, y_title)
    fig.update_layout(barmode="stack", bargap=0.05)
    peak: dict[int, float] = {}
    for per in counts.values():
        for b, n in per.items():
            peak[b] = peak.get(b, 0) + n
    _whole_counts(fig, max(peak.values(), default=0))
    return fig, rest


def chart_errors(t: pa.Table, tl: Timeline) -> Chart:
    c = Chart(
        "errors",
        f"Frames (`commands`) carrying a non-zero error code, by protocol, command and code, per "
        f"{width_text(tl.width_ns)} bucket.",
    )
    if t.num_rows == 0:
        c.empty = "No error codes in scope: every frame had error code 0 or none."
        return c
    labels = [
        f"{p} {cmd}: {code}{_error_name(p, code)}"
        for p, cmd, code in zip(*(t.column(k).to_pylist() for k in ("protocol", "command", "error_code")))
    ]
    t = t.append_column("series", pa.array(labels, pa.string()))
    c.figure, rest = _stacked(t, tl, "series", "frames")
    c.note = _others(rest, "error codes (stacked in grey)")
    return c


def chart_decode(t: pa.Table, tl: Timeline) -> Chart:
    c = Chart(
        "decode",
        f"`commands` rows whose decode_status is not ok, by protocol and status, per {width_text(tl.width_ns)} "
        "bucket (docs/protocols/ lists each protocol's statuses).",
    )
    if t.num_rows == 0:
        c.empty = "Every frame in scope decoded (decode_status ok)."
        return c
    c.figure, rest = _stacked(t, tl, "series", "frames")
    c.note = _others(rest, "statuses (stacked in grey)")
    return c


def chart_connections(t: pa.Table, tl: Timeline) -> Chart:
    import plotly.graph_objects as go

    c = Chart(
        "connections",
        "TCP connections (`streams`) by the bucket of their first packet: all of them, and those "
        "with bytes never captured (gaps), retransmitted bytes, or a RST.",
    )
    if t.num_rows == 0:
        c.empty = "No connections in scope (the `streams` table has no rows here)."
        return c
    per = {
        b: r
        for b, *r in zip(
            *(
                t.column(k).to_pylist()
                for k in ("bucket_ns", "opened", "with_gaps", "with_retransmissions", "reset")
            )
        )
    }
    x = tl.categories()
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=x,
            y=tl.align({b: v[0] for b, v in per.items()}),
            name="opened",
            marker_color="#c7c7c7",
            hovertemplate="%{y} opened",
        )
    )
    # the troubled ones as marks over the bar of their bucket (a connection may be all three)
    for i, (name, color, symbol) in enumerate(
        (
            ("with gaps", "#d62728", "x"),
            ("with retransmissions", "#ff7f0e", "diamond"),
            ("reset (RST)", "#9467bd", "triangle-up"),
        ),
        start=1,
    ):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=tl.align({b: v[i] for b, v in per.items() if v[i]}, None),
                name=name,
                mode="markers",
                marker=dict(color=color, symbol=symbol, size=10, line=dict(width=1, color="white")),
                hovertemplate="%{y} " + name,
            )
        )
    _layout(fig, tl, "connections")
    fig.update_layout(bargap=0.1)
    _whole_counts(fig, max((v[0] for v in per.values()), default=0))
    c.figure = fig
    return c


def _hbars(labels: list[str], series: list[tuple[str, list, str]], x_title: str, hover: str, left: int):
    """Stacked horizontal bars, one row per label (the first at the bottom), a trace per
    (name, values, colour) of `series`."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name, values, color in series:
        fig.add_trace(
            go.Bar(y=labels, x=values, name=name, orientation="h", marker_color=color, hovertemplate=hover)
        )
    _layout(fig, None, "")
    fig.update_layout(barmode="stack", height=max(260, 70 + 26 * len(labels)), margin=dict(l=left))
    fig.update_xaxes(title_text=x_title)
    return fig


def _pivot(t: pa.Table, row: str, col: str, value: str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """{row: {col: value}} of a long table, and the rows in order of their totals, smallest first
    (the bottom bar of a horizontal chart)."""
    per: dict[str, dict[str, int]] = {}
    for r, c, n in zip(*(t.column(k).to_pylist() for k in (row, col, value))):
        per.setdefault(r if r is not None else "?", {})[c if c is not None else "?"] = n
    return per, sorted(per, key=lambda k: (sum(per[k].values()), k))


def chart_states(t: pa.Table) -> Chart:
    c = Chart(
        "states",
        "How each connection went, as Zeek's conn.log says it (`streams.conn_state`), per protocol.",
    )
    if t.num_rows == 0:
        c.empty = "No connections in scope."
        return c
    states, order = _pivot(t, "conn_state", "protocol", "connections")
    protocols = sorted({p for d in states.values() for p in d})
    labels = [f"{s} ({ZEEK_STATES[s]})" if s in ZEEK_STATES else s for s in order]
    series = [
        (p, [states[s].get(p, 0) for s in order], PALETTE[i % len(PALETTE)]) for i, p in enumerate(protocols)
    ]
    c.figure = _hbars(labels, series, "connections", "%{x} connections", left=330)
    return c


def chart_clients(t: pa.Table, names: dict[str, str]) -> Chart:
    c = Chart(
        "clients",
        "Client addresses by TCP payload bytes sent and received (`streams`), with their number of "
        "connections and the client id most of their requests carried.",
    )
    if t.num_rows == 0:
        c.empty = "No connections with a client address in scope."
        return c
    ips = t.column("client_ip").to_pylist()[::-1]
    conns = t.column("connections").to_pylist()[::-1]
    labels = [
        f"{ip} ({names[ip]}) · {n} conn" if ip in names else f"{ip} · {n} conn" for ip, n in zip(ips, conns)
    ]
    series = [
        ("sent (client to server)", t.column("sent").to_pylist()[::-1], "#1f77b4"),
        ("received", t.column("received").to_pylist()[::-1], "#ff7f0e"),
    ]
    c.figure = _hbars(labels, series, "payload bytes", "%{x:.4~s}B", left=300)
    c.figure.update_xaxes(tickformat="~s")
    return c


def chart_topics(t: pa.Table) -> Chart:
    c = Chart(
        "topics",
        "Messages per topic (`messages`): produced, delivered, and stored (read from segment files).",
    )
    if t.num_rows == 0:
        c.empty = "No messages with a topic in scope."
        return c
    per, order = _pivot(t, "topic", "direction", "messages")
    directions = [d for d in ("produce", "deliver", "stored") if any(d in v for v in per.values())]
    series = [(d, [per[k].get(d, 0) for k in order], DIRECTION_COLORS[d]) for d in directions]
    c.figure = _hbars(order, series, "messages", "%{x} messages", left=240)
    return c


def _html_table(head: tuple[str, ...], rows: list[tuple], numeric: int, code: tuple[int, ...] = ()) -> str:
    """An HTML table; columns from `numeric` on are right-aligned, those in `code` monospaced."""

    def cell(i: int, v) -> str:
        text = html.escape("" if v is None else str(v))
        text = f"<code>{text}</code>" if i in code else text
        return f'<td class="n">{text}</td>' if i >= numeric else f"<td>{text}</td>"

    return (
        '<table class="bs-table"><thead><tr>'
        + "".join(f'<th class="n">{h}</th>' if i >= numeric else f"<th>{h}</th>" for i, h in enumerate(head))
        + "</tr></thead><tbody>"
        + "".join("<tr>" + "".join(cell(i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
        + "</tbody></table>"
    )


def troubled_table(t: pa.Table, lake: str) -> str:
    """The troubled connections as an HTML table, with the command that extracts the first."""
    if t.num_rows == 0:
        return '<p class="bs-ok">No connection in scope had a gap, a retransmission or a reset.</p>'
    head = (
        "conn_id", "protocol", "client", "server", "state", "history", "first packet (UTC)",
        "duration (s)", "gaps", "gap bytes", "retransmitted bytes", "RST", "frames failed",
    )  # fmt: skip
    rows = [
        (
            r["conn_id"], r["protocol"], f"{r['client_ip']}:{r['client_port']}",
            f"{r['server_ip']}:{r['server_port']}", r["conn_state"], r["history"],
            utc_text(r["ts_ns"]) if r["ts_ns"] is not None else None,
            None if r["duration_us"] is None else f"{r['duration_us'] / 1e6:,.3f}",
            f"{r['gap_count']:,}", f"{r['gap_bytes']:,}", f"{r['retransmitted_bytes']:,}",
            "yes" if r["rst_seen"] else "", r["frames_failed"],
        )
        for r in t.to_pylist()
    ]  # fmt: skip
    first = shlex.quote(t.column("conn_id")[0].as_py() or "")
    return (
        "<h3>Connections with gaps, retransmissions or resets, the most bytes lost or repeated first</h3>"
        + _html_table(head, rows, numeric=7, code=(0, 5))
        + "<p class='bs-hint'>A connection's packets, for Wireshark: <code>"
        + html.escape(f"brokerscope extract --lake {shlex.quote(lake)} --conn-id {first} -o conn.pcapng")
        + "</code></p>"
    )


def latency_table(t: pa.Table, exact: bool) -> str:
    """Every command's requests and latency percentiles over the whole scope (the busiest first)."""
    if t.num_rows == 0:
        return ""
    kind = "" if exact else " (estimates)"
    head = ("protocol", "command", "requests", f"p50 ms{kind}", f"p99 ms{kind}", "max ms", "errors")
    rows = [
        (r["protocol"], r["request_command"], f"{r['requests']:,}", _ms(r["p50_us"]), _ms(r["p99_us"]),
         _ms(r["max_us"]), f"{r['errors']:,}")
        for r in t.to_pylist()
    ]  # fmt: skip
    return f"<h3>Latency by command over the whole scope, the {t.num_rows} busiest</h3>" + _html_table(
        head, rows, numeric=2
    )


def _ms(us: float | None) -> str:
    return "" if us is None else f"{us / 1000:.3g}" if us < 100_000 else f"{us / 1000:,.0f}"


# -- the page -------------------------------------------------------------------------------------


CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 0; background: #f4f5f7; color: #1d2330; }
header { background: #1d2330; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 6px; font-size: 22px; font-weight: 600; }
header dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; margin: 8px 0 0; font-size: 13px; }
header dt { color: #9aa4b8; } header dd { margin: 0; }
header nav { margin-top: 10px; font-size: 12.5px; } header nav a { color: #9cc3ff; text-decoration: none; }
main { padding: 16px 28px 40px; display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
section { background: #fff; border-radius: 6px; box-shadow: 0 1px 3px rgba(0,0,0,.12); padding: 14px 16px; min-width: 0; }
section.wide { grid-column: 1 / -1; }
section h2 { margin: 0 0 4px; font-size: 16px; font-weight: 600; }
section p.about { margin: 0 0 8px; font-size: 12.5px; color: #5a6275; }
section h3 { margin: 14px 0 6px; font-size: 14px; font-weight: 600; }
p.note, p.bs-hint { font-size: 12px; color: #5a6275; margin: 6px 0 0; }
.bs-empty { border: 1px dashed #b8bfcc; border-radius: 4px; padding: 28px 16px; color: #5a6275; text-align: center; font-size: 14px; }
.warn { background: #fff4e0; border-left: 4px solid #f0a020; padding: 8px 12px; margin: 10px 28px 0; font-size: 13px; }
table.bs-table { border-collapse: collapse; font-size: 12px; width: 100%; }
.bs-table th, .bs-table td { border-bottom: 1px solid #e3e6eb; padding: 4px 6px; text-align: left; white-space: nowrap; }
.bs-table th { background: #f0f2f5; position: sticky; top: 0; }
.bs-table .n { text-align: right; }
code { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 11.5px; }
p.bs-ok { color: #2a7a2a; }
"""

WIDE = {"requests", "latency", "throughput", "errors", "decode", "connections"}


# plotly.js reads tags (<a href>, <b>, <br>...) in the text it draws: a client id or topic from a
# capture showed as a link or bold text. Escaped as entities (which plotly decodes) it is shown as
# it was captured.
_PLOTLY_TEXT = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def _literal(v):
    """A trace value with every string (or string in a list) escaped for plotly's text."""
    if isinstance(v, str):
        return v.translate(_PLOTLY_TEXT)
    if isinstance(v, list | tuple) and any(isinstance(x, str) for x in v):
        return [x.translate(_PLOTLY_TEXT) if isinstance(x, str) else x for x in v]
    return v


def _captured_text_literal(fig) -> None:
    """The trace names, categories and texts of `fig` (values from the captures) shown as they
    are: escaped for plotly, which would read markup in them."""
    for tr in fig.data:
        for attr in ("name", "legendgroup", "x", "y", "text", "hovertext", "labels"):
            v = getattr(tr, attr, None)
            if isinstance(v, str) or (isinstance(v, list | tuple) and any(isinstance(x, str) for x in v)):
                tr[attr] = _literal(v)


def _section(c: Chart, div_id: str) -> str:
    cls = "wide" if c.key in WIDE else ""
    parts = [
        f'<section class="{cls}" id="{c.key}"><h2>{html.escape(TITLES[c.key])}</h2>',
    ]
    if c.about:
        parts.append(f'<p class="about">{_md(c.about)}</p>')
    if c.figure is not None:
        _captured_text_literal(c.figure)
        parts.append(
            c.figure.to_html(
                full_html=False,
                include_plotlyjs=False,
                div_id=div_id,
                config={"displaylogo": False, "responsive": True},
            ).replace(
                'class="plotly-graph-div"', f'class="plotly-graph-div bs-chart" data-chart="{c.key}"', 1
            )
        )
    else:
        parts.append(f'<div class="bs-empty" data-chart="{c.key}">{_md(c.empty or "")}</div>')
    if c.note:
        parts.append(f'<p class="note">{_md(c.note)}</p>')
    parts.append(c.extra_html + "</section>")
    return "\n".join(parts)


def _md(text: str) -> str:
    """Escaped text with `code` spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render(
    lake: Lake,
    scope: Scope,
    charts: list[Chart],
    facts: list[tuple[str, str]],
    warnings: list[str],
) -> str:
    from plotly.offline import get_plotlyjs

    body = "\n".join(_section(c, f"bs-{c.key}") for c in charts)
    dl = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in facts)
    warn = "".join(f'<div class="warn">{_md(w)}</div>' for w in warnings)
    title = f"brokerscope report: {lake.root.name} ({scope.text()})"
    nav = " · ".join(f'<a href="#{c.key}">{html.escape(TITLES[c.key])}</a>' for c in charts)
    drawn = sum(1 for c in charts if c.figure is not None)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="brokerscope-charts" content="{drawn}">
<title>{html.escape(title)}</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<header><h1>brokerscope report</h1><dl>{dl}</dl><nav>{nav}</nav></header>
{warn}
<main>
{body}
</main>
</body></html>
"""
