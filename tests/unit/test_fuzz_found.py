"""Replay every input the fuzzer found (tests/fuzz/found/<target>-<what>.bin) through its target.

An input whose bug is not fixed yet is listed in KNOWN with the failure it shows, as a strict
xfail: the suite stays green, and the fix turns it into an XPASS failure until its line here is
removed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.targets import TARGETS

FOUND = Path(__file__).resolve().parents[1] / "fuzz" / "found"

# file name -> the failure it shows today (one line); remove the line with the fix
KNOWN: dict[str, str] = {}


def _cases() -> list:
    out = []
    for p in sorted(FOUND.glob("*.bin")):
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[p.name])] if p.name in KNOWN else []
        out.append(pytest.param(p, id=p.stem, marks=marks))
    return out


def test_every_found_input_names_its_target() -> None:
    for p in FOUND.glob("*.bin"):
        assert p.name.split("-", 1)[0] in TARGETS, p.name
    assert set(KNOWN) <= {p.name for p in FOUND.glob("*.bin")}, "KNOWN names a file that is not there"


@pytest.mark.parametrize("path", _cases())
def test_found_input_replays_clean(path: Path) -> None:
    TARGETS[path.name.split("-", 1)[0]](path.read_bytes())


@pytest.mark.parametrize("name", ["kafka", "iggy"])
def test_a_response_captured_before_its_request_has_no_latency(name: str) -> None:
    """The first bytes of a response captured before its request: paired (the bytes answer it),
    but the latency is null with an anomaly, in `latencies` and any `acks` row it feeds."""
    from tests.fuzz import targets

    data = (FOUND / f"{name}-response-before-request-negative-latency.bin").read_bytes()
    rows, _ = targets.decode(name, data)
    lat = [r for tb, r in rows if tb == "latencies" and r.get("latency_us") is not None]
    assert any(r["latency_us"] < 0 for r in lat), "the input no longer has a response before its request"
    batch = targets.tables.conform("latencies", [r for tb, r in rows if tb == "latencies"])
    written = batch.column("latency_us").to_pylist()
    assert all(w is None or w >= 0 for w in written)
    notes = [a for an in batch.column("anomalies").to_pylist() for a in an or ()]
    assert any(a.startswith("latency_us: -") and "timed before the request" in a for a in notes), notes
