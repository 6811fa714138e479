"""Input discovery and planning: paths, directories and globs -> typed inputs -> splits.

Plain Python, no Spark: the pipeline and the Spark-free `streams.decode_files` share it.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import capture

CAPTURE_KINDS = ("pcap", "pcapng", "pcap.gz", "pcapng.gz")
# companion files read by a segment reader next to its log; never inputs of their own
_COMPANIONS = (".index", ".timeindex", ".txnindex", ".snapshot", ".checkpoint", ".leader-epoch-checkpoint")


@dataclass(frozen=True)
class Input:
    path: str
    kind: str  # one of CAPTURE_KINDS, or a segment kind ("kafka_segment", "iggy_segment")
    size: int
    mtime_ns: int
    capture_id: str  # content hash; "" until the run's tasks hashed the file (see capture.files)
    file_index: int = 0


@dataclass(frozen=True)
class SegmentSplit:
    path: str
    capture_id: str
    kind: str
    start: int
    end: int
    file_index: int = 0
    size: int = 0  # the whole file's planned size (its identity is hashed over it)


@dataclass
class Discovery:
    inputs: list[Input] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (path, one-line reason)
    # files inside given directories that are not inputs: (path, one-line reason)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # (input dropped, input kept): the same bytes under two paths, decoded once, recorded under both
    duplicates: list[tuple[Input, Input]] = field(default_factory=list)


def segment_readers() -> dict:
    """Segment kind ("<protocol>_segment") -> reader module (matches/plan/read), for the protocols
    that declare one in their registry entry."""
    from .protocols import base

    return {f"{name}_segment": p.segment_reader() for name, p in base.protocols().items() if p.segments}


def _classify(path: str) -> tuple[str | None, str | None]:
    """(kind, error) for one file."""
    try:
        kind = capture.identify(path)
    except OSError as e:
        return None, f"cannot read: {e.strerror or e}"
    if kind in CAPTURE_KINDS:
        return kind, None
    if kind == "empty":
        return None, "empty file"
    for skind, mod in segment_readers().items():
        try:
            if mod.matches(path):
                return skind, None
        except Exception as e:  # a reader's check must not stop discovery
            return None, f"{skind} check failed: {e}"
    return None, "not a capture (pcap, pcapng, gzip) or a broker segment file"


def discover(paths: list[str]) -> Discovery:
    """Expand files, directories (recursively) and globs into inputs.

    A named file that is missing, empty or of no known kind is an error naming it; such files
    inside a named directory are listed in `skipped` with the reason (companion files of segments
    and dot files are not inputs and are passed over). Identical content under two paths is one
    input: files of equal size are hashed here to find out (the only case where discovery reads a
    whole file); every other input's capture_id is left to the run's tasks.
    """
    d = Discovery()
    seen: set[str] = set()
    candidates: list[tuple[str, bool]] = []  # (path, named explicitly)
    for p in paths:
        matches = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not matches:
            d.errors.append((p, "no file matches this pattern"))
            continue
        for m in matches:
            if os.path.isdir(m):
                for root, dirs, files in os.walk(m):
                    dirs.sort()
                    for f in sorted(files):
                        candidates.append((os.path.join(root, f), False))
            elif os.path.exists(m):
                candidates.append((m, True))
            else:
                d.errors.append((m, "no such file or directory"))
    found: list[Input] = []
    for path, named in candidates:
        real = str(Path(path).resolve())
        if real in seen:
            continue
        seen.add(real)
        if not named and (path.endswith(_COMPANIONS) or os.path.basename(path).startswith(".")):
            continue
        kind, err = _classify(path)
        if kind is None:
            (d.errors if named else d.skipped).append((path, err or "unknown"))
            continue
        st = os.stat(path)
        found.append(Input(real, kind, st.st_size, st.st_mtime_ns, ""))
    d.inputs = _one_per_content(found, d)
    # one capture set: a stable order (by path) gives every file its index
    d.inputs.sort(key=lambda i: i.path)
    d.inputs = [replace(i, file_index=n) for n, i in enumerate(d.inputs)]
    return d


def _one_per_content(found: list[Input], d: Discovery) -> list[Input]:
    """Drop inputs whose bytes equal an earlier one's (decoding both would double every row);
    only files of equal size can be equal, so only those are hashed."""
    by_size: dict[int, list[Input]] = {}
    for i in found:
        by_size.setdefault(i.size, []).append(i)
    out: list[Input] = []
    for group in by_size.values():
        if len(group) == 1:
            out.extend(group)
            continue
        kept: dict[str, Input] = {}
        for i in sorted(group, key=lambda i: i.path):
            cid = capture.capture_id(i.path, i.size)
            if cid in kept:
                d.duplicates.append((replace(i, capture_id=cid), kept[cid]))
            else:
                kept[cid] = replace(i, capture_id=cid)
        out.extend(kept.values())
    return out


MIN_SPLIT = 8 << 20


def effective_split_size(inputs: list[Input], split_size: int, parallelism: int = 1) -> int:
    """`split_size`, made smaller when that keeps cores busy: a capture set smaller than
    parallelism x split_size is cut so every core gets a split, but never below 8 MiB (unless
    `split_size` itself is smaller, as tests set it)."""
    total = sum(i.size for i in inputs if i.kind in CAPTURE_KINDS and not i.kind.endswith(".gz"))
    if parallelism <= 1 or total == 0 or split_size <= MIN_SPLIT:
        return split_size
    return max(MIN_SPLIT, min(split_size, -(-total // parallelism)))


def plan(
    inputs: list[Input], split_size: int, parallelism: int = 1
) -> tuple[list[capture.Split], list[SegmentSplit]]:
    """Cut inputs into the units one task reads (see effective_split_size)."""
    split_size = effective_split_size(inputs, split_size, parallelism)
    packet_splits: list[capture.Split] = []
    segment_splits: list[SegmentSplit] = []
    readers = segment_readers()
    for i in inputs:
        if i.kind in CAPTURE_KINDS:
            packet_splits.extend(capture.plan_splits(i.path, i.file_index, i.capture_id, i.kind, split_size))
        else:
            for start, end in readers[i.kind].plan(i.path, split_size):
                segment_splits.append(
                    SegmentSplit(i.path, i.capture_id, i.kind, start, end, i.file_index, i.size)
                )
    return packet_splits, segment_splits
