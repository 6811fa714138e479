"""Query results as text or files, without losing data: Arrow table in, one format out.

csv, json, jsonl and parquet keep every value whole: binary as base64 (or hex), nested values
(lists, structs, maps: Kafka headers) as JSON, timestamps as ISO 8601 with every digit of their
unit (`Z` when the column is zoned, as Spark's TIMESTAMP is), floats as Python's shortest repr
that reads back to the same double, decimals exactly. The `table` format is for people: it
shortens long cells and floats, and says how many cells it shortened.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import math
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from .report import shown

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
BINARY = ("base64", "hex")
TEXT_FORMATS = FORMATS[:-1]
CELL_WIDTH = 60  # the table format's widest cell
FLOAT_DIGITS = 15  # the table format's significant digits of a float


class Raw(str):
    """Text already encoded as JSON (a decimal's exact digits), written as it is."""


def check_out(out: str | os.PathLike, what: str) -> None:
    """Raise ValueError, one line naming `out`, when `out` cannot be the file an --out/-o asks
    for (`what`: "the HTML file", ...): it is a directory, or its directory is missing or not
    writable. Checked before the work (and before Spark starts), not found at the last rename."""
    p = Path(out)
    if p.is_dir():
        raise ValueError(f"--out {out} is a directory: name {what} to write")
    target = _replaced(out)
    if target is None:  # a device or pipe, written as it is
        if not os.access(p, os.W_OK):
            raise ValueError(f"cannot write {out}: permission denied")
        return
    parent = Path(target).parent  # where the part file is made (a link's file's directory)
    if not parent.is_dir():
        raise ValueError(f"cannot write {out}: no directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ValueError(f"cannot write {out}: permission denied")


def _replaced(out: str | os.PathLike) -> str | None:
    """The file whole_file replaces to write `out`: `out`, or the file a link names (absolute);
    None for a device or pipe (/dev/stdout, a FIFO), which is written as it is."""
    try:
        if not stat.S_ISREG(os.stat(out).st_mode):
            return None
    except FileNotFoundError:
        pass  # a new file, or a link to one
    return os.path.realpath(out)


@contextlib.contextmanager
def whole_file(out: str | os.PathLike, mode: str = "wb", **kw) -> Iterator[IO]:
    """A file to write `out` through: a temporary file beside it (made as open() makes files),
    renamed over `out` when the block ends, removed when it fails; `out` is whole, as it was, or
    absent. A symbolic link to a file has its file replaced; a device or pipe (/dev/stdout, a
    FIFO) is written as it is, there being nothing to rename over it."""
    target = _replaced(out)
    if target is None:
        with open(out, mode, **kw) as f:
            yield f
        return
    tmp = f"{target}.part-{os.getpid()}"
    try:
        with open(tmp, mode, **kw) as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _timestamp(v: dt.datetime, t: pa.TimestampType) -> str:
    """ISO 8601 with the unit's digits (s: none, ms: 3, us: 6, ns: 9); `Z` for a zoned column."""
    if t.tz is not None:
        v = v.astimezone(dt.UTC).replace(tzinfo=None)
    spec = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[t.unit]
    if spec == "nanoseconds" and not hasattr(v, "nanosecond"):  # a datetime: no digit below us
        text = v.isoformat(timespec="microseconds") + "000"
    else:
        text = v.isoformat(timespec=spec)
    return text + ("Z" if t.tz is not None else "")


def _duration(v: dt.timedelta) -> str:
    """ISO 8601 duration in seconds, exact to the microsecond (Spark's day-time intervals)."""
    us = abs((v.days * 86400 + v.seconds) * 10**6 + v.microseconds)
    return f"{'-' if v < dt.timedelta(0) else ''}PT{us // 10**6}.{us % 10**6:06d}S"


def _float(v: float, t: pa.DataType) -> Any:
    """A float as JSON: repr digits (float32 as the shortest float32 digits); NaN and the
    infinities, which JSON lacks, as the strings "NaN", "Infinity", "-Infinity"."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if pa.types.is_float32(t) or pa.types.is_float16(t):
        return Raw(_shortest32(v))
    return v


def _shortest32(v: float) -> str:
    """The fewest significant digits that read back to the same float32 (Arrow hands it over
    widened to a double: 0.1f would print as 0.10000000149011612)."""
    for digits in range(1, 10):
        text = format(v, f".{digits}g")
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == v:
            return text
    return repr(v)


def plain(v: Any, t: pa.DataType, binary: str = "base64") -> Any:
    """One Arrow value (as `to_pylist` gives it) as a JSON-ready value, guided by its type."""
    if v is None:
        return None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return v.hex() if binary == "hex" else base64.b64encode(v).decode("ascii")
    if pa.types.is_timestamp(t):
        return _timestamp(v, t)
    if pa.types.is_floating(t):
        return _float(v, t)
    if pa.types.is_decimal(t):
        return Raw(format(v, "f"))
    if pa.types.is_map(t):
        pairs = [(plain(k, t.key_type, binary), plain(x, t.item_type, binary)) for k, x in v]
        if pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type):
            return dict(pairs)
        return [list(p) for p in pairs]  # keys JSON cannot name: [[key, value], ...]
    if pa.types.is_struct(t):
        return {f.name: plain(v[f.name], f.type, binary) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [plain(x, t.value_type, binary) for x in v]
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return _duration(v)
    return v


def to_json(v: Any) -> str:
    """Compact JSON of a `plain` value; Raw text goes in unquoted, strings keep non-ASCII."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{to_json(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(to_json(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def _text(v: Any) -> str:
    """A `plain` value as one text cell: nested values as JSON, null as the empty string."""
    if v is None:
        return ""
    if isinstance(v, str):  # Raw included
        return str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        return str(v)
    return to_json(v)


def rows(table: pa.Table, binary: str = "base64"):
    """Each row of `table` as a list of `plain` values, in column order."""
    types = [f.type for f in table.schema]
    for batch in table.to_batches():
        cols = [c.to_pylist() for c in batch.columns]
        for r in zip(*cols):
            yield [plain(v, t, binary) for v, t in zip(r, types)]


def _csv_cell(v: Any) -> str:
    """One CSV field: null empty and unquoted, an empty value (string, binary) `""`, quoted where
    it holds a comma, a quote or a line break (quotes doubled): null and empty apart, as
    PostgreSQL's COPY CSV writes them."""
    if v is None:
        return ""
    t = _text(v)
    if not t or any(c in t for c in _CSV_SPECIAL):
        return '"' + t.replace('"', '""') + '"'
    return t


_CSV_SPECIAL = (",", '"', "\n", "\r")


def write_csv(table: pa.Table, out: IO[str], binary: str = "base64") -> None:
    """A header line, then a line per row; nulls are empty cells, empty values `""`, booleans
    true/false. A row of one column holding null is `""` too: a blank line is no row to most
    readers."""
    out.write(",".join(_csv_cell(n) for n in table.column_names) + "\n")
    for r in rows(table, binary):
        out.write((",".join(_csv_cell(v) for v in r) or '""') + "\n")


def _object(names: list[str], r: list) -> str:
    return "{" + ",".join(f"{json.dumps(n, ensure_ascii=False)}:{to_json(v)}" for n, v in zip(names, r)) + "}"


def write_jsonl(table: pa.Table, out: IO[str], binary: str = "base64") -> None:
    """One JSON object per row and line."""
    for r in rows(table, binary):
        out.write(_object(table.column_names, r) + "\n")


def write_json(table: pa.Table, out: IO[str], binary: str = "base64") -> None:
    """One JSON document: an array of the rows' objects, a row per line."""
    out.write("[")
    for i, r in enumerate(rows(table, binary)):
        out.write(("\n" if i == 0 else ",\n") + _object(table.column_names, r))
    out.write("\n]\n" if table.num_rows else "]\n")


def _cell(v: Any) -> tuple[str, bool]:
    """A table cell and whether it was shortened: floats to FLOAT_DIGITS significant digits,
    text to CELL_WIDTH characters, control characters escaped (report.shown)."""
    if v is None:
        return "NULL", False
    short = False
    if isinstance(v, float):
        text = format(v, f".{FLOAT_DIGITS}g")
        short = float(text) != v
    else:
        text = shown(_text(v))
    if len(text) > CELL_WIDTH:
        text, short = text[: CELL_WIDTH - 1] + "…", True
    return text, short


def write_table(table: pa.Table, out: IO[str], binary: str = "base64") -> int:
    """Aligned columns for people, then the row count, and how many cells were shortened with
    the way to have them whole. Returns the number of cells shortened."""
    text, shortened = [], 0
    for r in rows(table, binary):
        line = []
        for v in r:
            c, short = _cell(v)
            line.append(c)
            shortened += short
        text.append(line)
    cols = [shown(c) for c in table.column_names]
    widths = [max([len(c)] + [len(t[i]) for t in text]) for i, c in enumerate(cols)]
    out.write(" | ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip() + "\n")
    out.write("+".join("-" * (w + 2) for w in widths)[1:-1] + "\n")
    for t in text:
        out.write(" | ".join(v.ljust(w) for v, w in zip(t, widths)).rstrip() + "\n")
    n = table.num_rows
    note = ""
    if shortened:
        note = (
            f"; {shortened} cell{'s' if shortened != 1 else ''} shortened "
            f"(to {CELL_WIDTH} characters or {FLOAT_DIGITS} digits): --format csv, json or jsonl shows them whole"
        )
    out.write(f"({n} row{'s' if n != 1 else ''}{note})\n")
    return shortened


def write_parquet(table: pa.Table, out: str | IO[bytes]) -> None:
    """The result as Parquet with its Arrow types (binary stays binary, timestamps keep their
    unit and zone, nested columns stay nested), to a path or a binary file."""
    import pyarrow.parquet as pq

    pq.write_table(table, out)


WRITERS = {"table": write_table, "csv": write_csv, "json": write_json, "jsonl": write_jsonl}


def write(table: pa.Table, fmt: str, out: IO[str], binary: str = "base64") -> None:
    """`table` in a text format (FORMATS but parquet) to `out`. A text column holding bytes that
    are not UTF-8, and for JSON two columns of one name, are an error naming them, before
    anything is written."""
    if fmt not in WRITERS:
        raise ValueError(f"format must be one of {', '.join(WRITERS)}, not {fmt!r}")
    bad = not_utf8(table)
    if bad:
        names = ", ".join(bad)
        raise ValueError(
            f"column{'s' if len(bad) > 1 else ''} {names}: text that is not UTF-8 (a binary value cast "
            "to STRING?): select the binary value itself (--binary writes it as base64 or hex), or "
            "write --format parquet"
        )
    twice = sorted({n for n in table.column_names if table.column_names.count(n) > 1})
    if twice and fmt in ("json", "jsonl"):  # a JSON reader keeps one value per name: the last
        raise ValueError(
            f"column name{'s' if len(twice) > 1 else ''} {', '.join(twice)} given twice: a JSON object "
            "keeps one value per name: name the columns apart (c.ts AS commands_ts), or write "
            "--format csv, table or parquet"
        )
    WRITERS[fmt](table, out, binary)


def not_utf8(table: pa.Table) -> list[str]:
    """The columns of `table` (nested ones too) whose text values are not all UTF-8, as Spark's
    CAST(binary AS STRING) leaves bytes that are not."""
    bad = []
    for name, col in zip(table.column_names, table.columns):
        try:
            col.validate(full=True)
        except pa.ArrowInvalid:
            bad.append(name)
    return bad


def from_rows(columns: list[str], data: list[tuple]) -> pa.Table:
    """An Arrow table from Python rows (the CLI's own small listings)."""
    return (
        pa.table({c: [r[i] for r in data] for i, c in enumerate(columns)})
        if data
        else pa.table({c: pa.array([], pa.null()) for c in columns})
    )
