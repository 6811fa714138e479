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

    `directions` (directions_of): chains whose files overlap in time and hold the same
    connections, each only directions of them the other has none of (one place's capture written
    as two files, one per direction: tcpdump -Q in and -Q out, two interfaces of an asymmetric
    route), are one vantage point, named by the first: their packets make one connection per
    4-tuple. Two places' captures of a connection each hold both of its directions."""
    # [name, end of its last file, rank among chains that ended at the same time: the earlier
    # run's, then the lowest first file index]
    chains: list[list] = [[name, end, 1] for name, end in sorted((before or {}).items())]
    out: dict[int, int | str] = {}
    for fi in sorted(spans, key=lambda f: (spans[f][0], f)):
        start, end = spans[fi]
        fits = [c for c in chains if c[1] <= start]
        if fits:
            chain = max(fits, key=lambda c: (c[1], c[2]))
            chain[1] = end
        else:
            chain = [fi, end, -fi]
            chains.append(chain)
        out[fi] = chain[0]
    return _one_place(out, spans, directions) if directions else out


def _one_place(
    out: dict[int, int | str],
    spans: Mapping[int, tuple[int, int]],
    directions: Mapping[int, Mapping[int, int]],
) -> dict[int, int | str]:
    """`out` (file -> chain), the chains of one place's directions joined (`groups`)."""
    files: dict[int | str, list[int]] = {}
    for fi, name in out.items():
        files.setdefault(name, []).append(fi)
    chains = []  # [name, first, last, connection -> directions] in order of the first record
    for name, fis in files.items():
        dirs: dict[int, int] = {}
        for fi in fis:
            for k, v in directions.get(fi, {}).items():
                dirs[k] = dirs.get(k, 0) | v
        chains.append([name, min(spans[f][0] for f in fis), max(spans[f][1] for f in fis), dirs])
    chains.sort(key=lambda c: (c[1], str(c[0])))
    joined: dict[int | str, int | str] = {}
    for i, a in enumerate(chains):
        if a[0] in joined:
            continue
        for b in chains[i + 1 :]:
            if b[0] in joined or b[1] > a[2] or a[1] > b[2]:
                continue  # joined already, or apart in time
            shared = a[3].keys() & b[3].keys()
            if shared and all(a[3][k] & b[3][k] == 0 for k in shared):
                joined[b[0]] = a[0]
                a[1], a[2] = min(a[1], b[1]), max(a[2], b[2])
                for k, v in b[3].items():
                    a[3][k] = a[3].get(k, 0) | v
    return {fi: joined.get(name, name) for fi, name in out.items()}
