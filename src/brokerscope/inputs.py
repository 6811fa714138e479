"""Input discovery and planning: paths, directories and globs -> typed inputs -> splits.

Plain Python, no Spark: the pipeline and the Spark-free `streams.decode_files` share it.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import capture

CAPTURE_KINDS = ("pcap", "pcapng", "pcap.gz", "pcapng.gz")
# companion files read by a segment reader next to its log; never inputs of their own
_COMPANIONS = (".index", ".timeindex", ".txnindex", ".snapshot", ".checkpoint", ".leader-epoch-checkpoint")
# a name that says "capture" or "segment": tcpdump's and dumpcap's (-C/-W rotation appends digits:
# x.pcap1, x.pcap00), compressed ones (gzip is read; the others are errors that say so), and a
# broker segment's 20-digit base offset. A file of such a name found in a directory and of no
# known format by its first bytes is a damaged or unreadable input (an error); a file of any other
# name is a sidecar (README, checksums, tool output): skipped.
_INPUT_NAME = re.compile(
    r"\.(pcap|pcapng|cap|ntar)\d*(\.(gz|zst|xz|bz2|lz4|zip|7z))?$|^\d{20}\.log$", re.IGNORECASE
)
EMPTY = "empty file"
NOT_INPUT = "not a capture (pcap, pcapng, gzip) or a broker segment file"
NOT_REGULAR = "not a regular file (a FIFO, socket or device): not read"
PASSED_OVER = "passed over"  # a file a reader leaves alone on purpose (segment readers' passed_over)
# other compressions a capture comes in (magic bytes, the tool and how to undo it): only gzip is
# read as it is; the rest is said so (was: 'not a capture', found by a user trial)
COMPRESSIONS = (
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"),
    (b"\xfd7zXZ\x00", "xz", "xz -d"),
    (b"BZh", "bzip2", "bzip2 -d"),
    (b"\x04\x22\x4d\x18", "lz4", "lz4 -d"),
)


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
    # (path, one-line reason): named paths that are missing or no input, and files inside given
    # directories that cannot be read or whose name says input while their bytes say nothing known
    errors: list[tuple[str, str]] = field(default_factory=list)
    # files inside given directories that are no input by their first bytes nor by their name
    # (sidecars: README, notes.txt, *.sha256, tool output): (path, one-line reason)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # files and directories (ending with /) that an exclude glob matched: not read, not recorded
    excluded: list[str] = field(default_factory=list)
    # (input dropped, input kept): the same bytes under two paths, decoded once, recorded under both
    duplicates: list[tuple[Input, Input]] = field(default_factory=list)


def segment_readers() -> dict:
    """Segment kind ("<protocol>_segment") -> reader module (matches/plan/read, identity), for the
    protocols that declare one in their registry entry."""
    from .protocols import base

    return {f"{name}_segment": p.segment_reader() for name, p in base.protocols().items() if p.segments}


def id_context(kind: str, path: str) -> str:
    """The context of an input's capture_id (capture.files.combine_id): a segment reader's
    `identity` of the file, none for a capture."""
    reader = segment_readers().get(kind)
    return getattr(reader, "identity", lambda _p: "")(path) if reader is not None else ""


def _classify(path: str) -> tuple[str | None, str | None]:
    """(kind, error) for one file."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # opening a FIFO waits for a writer, for ever
            return None, NOT_REGULAR
        kind = capture.identify(path)
    except OSError as e:
        return None, f"cannot read: {e.strerror or e}"
    if kind in CAPTURE_KINDS:
        return kind, None
    if kind == "empty":
        return None, EMPTY
    for skind, mod in segment_readers().items():
        try:
            if mod.matches(path):
                return skind, None
            gone = getattr(mod, "passed_over", lambda _p: None)(path)  # a segment being deleted
            if gone:
                return None, f"{PASSED_OVER}: {gone}"
            why = getattr(mod, "near_miss", lambda _p: None)(path)  # a segment in the wrong place
        except Exception as e:  # a reader's check must not stop discovery
            return None, f"{skind} check failed: {e}"
        if why:
            return None, why
    return None, _compressed(path) or NOT_INPUT


def _compressed(path: str) -> str | None:
    """Why a file compressed with another tool than gzip is not read as it is, or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None
    for magic, tool, undo in COMPRESSIONS:
        if head.startswith(magic):
            return f"{NOT_INPUT}: compressed with {tool} (only gzip is read as it is: {undo} it first)"
    return None


def excluded(name: str, rel: str, exclude: Sequence[str]) -> bool:
    """Whether a file or directory is left out by an exclude glob: one that matches its name, or
    its path below the directory given (`rel`, with `/`), as fnmatch matches."""
    return any(fnmatch.fnmatch(name, g) or fnmatch.fnmatch(rel, g) for g in exclude)


def discover(paths: list[str], exclude: Sequence[str] = ()) -> Discovery:
    """Expand files, directories (recursively) and globs into inputs.

    A named file that is missing, empty or of no known kind is an error naming it. Inside a named
    directory, hidden files and directories (a name starting with `.`) and companion files of
    segments are passed over; a file of no known kind by its first bytes is `skipped` (a sidecar)
    unless its name says capture or segment (`_INPUT_NAME`: then it is a damaged input, an error,
    as is a file that cannot be read). A file or directory matching an `exclude` glob (by its name,
    or its path below the directory given) is no input anywhere, and is listed in `excluded`.
    Identical content under two paths is one input: files of equal size are hashed here to find
    out (the only case where discovery reads a whole file); every other input's capture_id is left
    to the run's tasks.
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
                candidates.extend((f, False) for f in _walk(m, exclude, d))
            elif os.path.exists(m):
                if excluded(os.path.basename(m), m, exclude):
                    d.excluded.append(m)
                else:
                    candidates.append((m, True))
            else:
                d.errors.append((m, "no such file or directory"))
    found: list[Input] = []
    for path, named in candidates:
        try:
            real = str(Path(path).resolve())
        except (OSError, RuntimeError) as e:  # a symlink loop: RuntimeError before Python 3.13
            d.errors.append((path, f"cannot read: {e}"))
            continue
        if real in seen:
            continue
        seen.add(real)
        if not named and path.endswith(_COMPANIONS):
            continue
        kind, err = _classify(path)
        if kind is None:
            err = err or "unknown"
            name = os.path.basename(path)
            sidecar = err.startswith(PASSED_OVER) or (
                not named
                and (err in (EMPTY, NOT_REGULAR) or err.startswith(NOT_INPUT))
                and not _INPUT_NAME.search(name)
            )
            (d.skipped if sidecar else d.errors).append((path, err))
            continue
        st = os.stat(path)
        found.append(Input(real, kind, st.st_size, st.st_mtime_ns, ""))
    d.inputs = _one_per_content(found, d)
    # one capture set: a stable order (by path) gives every file its index
    d.inputs.sort(key=lambda i: i.path)
    d.inputs = [replace(i, file_index=n) for n, i in enumerate(d.inputs)]
    return d


def _walk(top: str, exclude: Sequence[str], d: Discovery) -> list[str]:
    """The files under directory `top`, sorted, but hidden ones (and those in hidden directories)
    and those an exclude glob matches (listed in `d.excluded`; a matching directory is not
    entered)."""
    out: list[str] = []
    for root, dirs, files in os.walk(top):
        rel = os.path.relpath(root, top).replace(os.sep, "/")
        below = "" if rel == "." else rel + "/"
        kept = sorted(n for n in dirs if not n.startswith("."))
        d.excluded.extend(os.path.join(root, n) + os.sep for n in kept if excluded(n, below + n, exclude))
        dirs[:] = [n for n in kept if not excluded(n, below + n, exclude)]
        for f in sorted(files):
            if f.startswith("."):
                continue
            path = os.path.join(root, f)
            if excluded(f, below + f, exclude):
                d.excluded.append(path)
            else:
                out.append(path)
    return out


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
            cid = capture.capture_id(i.path, i.size, id_context(i.kind, i.path))
            if cid in kept:
                d.duplicates.append((replace(i, capture_id=cid), kept[cid]))
            else:
                kept[cid] = replace(i, capture_id=cid)
        out.extend(kept.values())
    return out


MIN_SPLIT = 8 << 20


def effective_split_size(inputs: list[Input], split_size: int, parallelism: int = 1) -> int:
    """`split_size`, made smaller when that keeps cores busy: a capture set smaller than
    parallelism x split_size is cut so every core gets a split, a larger one into whole rounds
    of splits, one per core each (401 MB on 2 cores: 4 splits of 100 MB, not 3 of 128 MiB, of
    which the last would leave a core idle for a third of the stage), but never below 8 MiB
    (unless `split_size` itself is smaller, as tests set it)."""
    total = sum(i.size for i in inputs if i.kind in CAPTURE_KINDS and not i.kind.endswith(".gz"))
    if parallelism <= 1 or total == 0 or split_size <= MIN_SPLIT:
        return split_size
    rounds = -(-total // (split_size * parallelism))
    return max(MIN_SPLIT, min(split_size, -(-total // (rounds * parallelism))))


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
