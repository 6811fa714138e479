"""The SQL queries of README.md (its ```sql blocks), for tests and bench/sql_bench.py (no pytest)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_queries() -> list[str]:
    """Every statement of the README's ```sql blocks, in order: split at `;`, `--` comment lines
    dropped."""
    out = []
    for block in re.findall(r"```sql\n(.*?)```", README.read_text(), re.S):
        for stmt in block.split(";"):
            lines = [ln for ln in stmt.strip().splitlines() if not ln.strip().startswith("--")]
            if lines:
                out.append("\n".join(lines))
    return out


def readme_query(*needles: str) -> str:
    """The one README statement holding every one of `needles`."""
    (q,) = [q for q in readme_queries() if all(n in q for n in needles)]
    return q
