"""Several vantage points in one capture set: which capture files are one host's, and their clocks.

A capture set may hold captures of one connection taken at several places (the producer's host,
the broker's, a consumer's): each place is a vantage point. Its files are a chain in time (a
rotated capture: each file starts at or after the previous one's last record); two files whose
record time spans overlap were taken at two places (docs/design.md "Vantage points").

`groups` makes the chains from the files' spans, before the decode: the stream driver then
decodes a connection seen from two vantage points as two connections (one per place, each with
its own rows), where it would otherwise take the second copy of every segment for a
retransmission. No Spark, no Delta here: the decode tasks import this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def spans_of(stats: Iterable[Mapping]) -> dict[int, tuple[int, int]]:
    """file_index -> (first, last) record time (ns) of the capture files of the read stats rows
    (capture.parse_stats: one per split, `first_ts_ns` / `last_ts_ns`); files without a record
    are left out."""
    out: dict[int, tuple[int, int]] = {}
    for s in stats:
        fi, first, last = s.get("file_index"), s.get("first_ts_ns"), s.get("last_ts_ns")
        if fi is None or first is None or last is None:
            continue
        lo, hi = out.get(fi, (first, last))
        out[fi] = (min(lo, first), max(hi, last))
    return out


def directions_of(stats: Iterable[Mapping]) -> dict[int, dict[int, int]]:
    """file_index -> connection hash -> the directions (capture.decode.FROM_LO | FROM_HI) the file
    has packets of, from the read stats rows' `directions` (a split's first connections)."""
    out: dict[int, dict[int, int]] = {}
    for s in stats:
        fi, d = s.get("file_index"), s.get("directions")
        if fi is None or not d:
            continue
        mine = out.setdefault(fi, {})
        for k, v in d.items():
            mine[int(k)] = mine.get(int(k), 0) | v
    return out


def groups(
    spans: Mapping[int, tuple[int, int]],
    before: Mapping[str, int] | None = None,
    directions: Mapping[int, Mapping[int, int]] | None = None,
) -> dict[int, int | str]:
    """file_index -> its vantage point, named by the file index of the chain's first file, or by
    the name of the chain of `before` it continues.

    Files in order of their first record (then file index); each joins the chain whose last file
    ended at or before it starts, of those the one that ended latest (a rotated capture's next
    file starts where the last one stopped), else starts a chain of its own: files whose time
    spans overlap are never one vantage point. `before`: the chains of earlier runs (vantage
    point -> the time its last file ended), which files join by the same rule, so a rotation
    ingested over several runs is one vantage point as it is in one run.

    `directions` (directions_of): files whose times overlap and that hold the same connections,
    each only directions of them the other has none of (one place's capture written as two
    files, one per direction: tcpdump -Q in and -Q out, two interfaces of an asymmetric route),
    are one unit first, chained as a file is (each period of a rotation per direction, its two
    files, follows the one before): one vantage point, whose packets make one connection per
    4-tuple. Two places' captures of a connection each hold both of its directions."""
    units = _one_place(spans, directions) if directions else {fi: [fi] for fi in spans}
    span = {u: (min(spans[f][0] for f in fis), max(spans[f][1] for f in fis)) for u, fis in units.items()}
    # [name, end of its last file, rank among chains that ended at the same time: the earlier
    # run's, then the lowest first file index]
    chains: list[list] = [[name, end, 1] for name, end in sorted((before or {}).items())]
    out: dict[int, int | str] = {}
    for u in sorted(units, key=lambda u: (span[u][0], u)):
        start, end = span[u]
        fits = [c for c in chains if c[1] <= start]
        if fits:
            chain = max(fits, key=lambda c: (c[1], c[2]))
            chain[1] = end
        else:
            chain = [u, end, -u]
            chains.append(chain)
        for fi in units[u]:
            out[fi] = chain[0]
    return out


def _one_place(
    spans: Mapping[int, tuple[int, int]], directions: Mapping[int, Mapping[int, int]]
) -> dict[int, list[int]]:
    """The files of one place's directions (`groups`) as units, each named by its first file:
    in order of their first record, a file joins the first unit whose time span overlaps its own
    and whose connections it shares, in directions the unit holds none of."""
    units: list[list] = []  # [name, first, last, files, connection -> directions]
    for fi in sorted(spans, key=lambda f: (spans[f][0], f)):
        start, end = spans[fi]
        mine = directions.get(fi, {})
        for u in units:
            if start > u[2] or u[1] > end:
                continue  # apart in time
            shared = mine.keys() & u[4].keys()
            if shared and all(mine[k] & u[4][k] == 0 for k in shared):
                u[1], u[2] = min(u[1], start), max(u[2], end)
                u[3].append(fi)
                for k, v in mine.items():
                    u[4][k] = u[4].get(k, 0) | v
                break
        else:
            units.append([fi, start, end, [fi], dict(mine)])
    return {u[0]: u[3] for u in units}
