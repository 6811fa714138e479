"""Baselines: the whole Spark-free output (`decode_files`) of every capture and segment file in
sample_data/ and the shared public captures, stored per input and table as sorted JSON lines
under tests/baselines/. Any change to decoded rows shows up as a diff of these files."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from brokerscope import inputs
from brokerscope.streams import decode_files
from tests.conftest import CAPTURES, ROOT, SAMPLE_DATA

BASELINES = ROOT / "tests" / "baselines"
TABLES = ("commands", "messages", "latencies", "acks", "streams", "_capture_stats")
ROOTS = {"sample_data": SAMPLE_DATA, "captures": CAPTURES}


def sources() -> list[tuple[str, Path]]:
    """(label, path) of every input the tool would read under each root; labels are stable
    (root name + path inside it), so baselines do not depend on where the repository lives."""
    out = []
    for name, root in ROOTS.items():
        if not root.is_dir():
            continue
        for inp in inputs.discover([str(root)]).inputs:
            p = Path(inp.path)
            out.append((f"{name}/{p.relative_to(root.resolve()).as_posix()}", p))
    return sorted(out)


def _value(v):
    """JSON for one column value: bytes as text when they are printable UTF-8, else hex; times
    in ISO 8601; the JSON columns (`details`) as objects, so a diff shows the field that moved."""
    if isinstance(v, bytes | bytearray | memoryview):
        b = bytes(v)
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError:
            return {"hex": b.hex()}
        return {"utf8": s} if all(c.isprintable() or c in "\n\t" for c in s) else {"hex": b.hex()}
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_value(x) for x in v]
    return v


def _row(table: str, row: dict) -> dict:
    out = {k: _value(v) for k, v in row.items()}
    if isinstance(out.get("details"), str):
        try:
            out["details"] = json.loads(out["details"])
        except ValueError:
            pass
    return out


def render(path: Path, label: str) -> dict[str, str]:
    """Baseline text per table for one input: one JSON object per line (keys sorted), rows in
    time order, ties broken by the line itself."""
    res = decode_files([str(path)])
    files = {}
    for table in TABLES:
        lines = []
        for row in res.get(table, []):
            line = json.dumps(_row(table, row), sort_keys=True, ensure_ascii=False)
            lines.append(((row.get("ts_ns") or 0, row.get("conn_id") or ""), line))
        text = "".join(line.replace(str(path), label) + "\n" for _, line in sorted(lines))
        files[table.lstrip("_")] = text
    return files


def baseline_dir(label: str) -> Path:
    return BASELINES / label
