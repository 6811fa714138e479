"""A run's own directory in the lake, `<lake>/_runs/<run_id>/`: what its tasks and its driver
share besides the tables.

- `ids/`: the identity chunk digests each read task computed (capture.files.chunk_digests), one
  JSON file per split, with the packet records the split read (decode tasks number frames with
  them: capture.files.FrameNumbers). Spark starts the decode stage only after every task of the read stage
  before its shuffle finished, so a decode task finds every digest of the capture set there and
  names its rows with the final capture_id; the driver combines the same digests for `inputs`.
  Like the embedded writer, this needs the lake on a filesystem the driver and executors share.
- `secrets/`: the key log text of the pcapng Decryption Secrets Blocks each read task found
  (mode 0600, one file per split that has any), read by every decode task: a block may come
  after the packets it decrypts, and Spark starts the decode stage after the read stage, as
  for `ids/`. Secrets: never a row, never logged, removed when the run ends (`remove_secrets`).
- `lock`: held (flock) by the driver for the whole run. A run directory whose lock can be taken
  belongs to a run that is no longer running.
- `manifest.json`: written before the first table commit (embedded writer): the staged files of
  every table, the capture ids the run replaces and its `inputs` rows. Delta has no multi-table
  transaction; with the manifest a run killed between two table commits is rolled forward by the
  next command that opens the lake (lake.Lake.recover), and every table commit carries the run's
  Delta transaction id (`txn` app id `brokerscope/<run_id>`), so it is known which tables hold it.

Plain Python, no Spark.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from .capture.decode import SplitOrder
from .capture.files import FrameNumbers, combine_id

RUNS = "_runs"


MANIFEST = "manifest.json"


def app_id(run_id: str) -> str:
    """The Delta transaction (txn) app id of a run's commits."""
    return f"brokerscope/{run_id}"


class RunDir:
    def __init__(self, lake_root: str | os.PathLike, run_id: str):
        self.run_id = run_id
        self.path = Path(lake_root) / RUNS / run_id
        self._lock_fd: int | None = None

    # -- liveness ---------------------------------------------------------------------------
    def lock(self) -> bool:
        """Take the run's lock (held until release() or the process ends). False when another
        process holds it: that run is still going."""
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    # -- the commit manifest ------------------------------------------------------------------
    def write_manifest(self, manifest: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{MANIFEST}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps(manifest))
        os.replace(tmp, self.path / MANIFEST)

    def manifest(self) -> dict | None:
        f = self.path / MANIFEST
        return json.loads(f.read_text()) if f.is_file() else None

    # -- identity ---------------------------------------------------------------------------
    def write_digests(
        self,
        file_index: int,
        start: int,
        digests: dict[int, bytes],
        records: int | None = None,
        span: tuple[int | None, int | None] = (None, None),
        first_at: int | None = None,
        error: str | None = None,
        order: dict | None = None,
        directions: dict | None = None,
    ) -> None:
        """Record one split's chunk digests and, for a capture split, the packet records it read,
        their first and last record time (`span`, ns), where they begin (`first_at`: the frame
        numbering's key), their packets' `order` (capture.SplitOrder's) and
        its first connections' `directions` (vantage.groups) (atomically: a retried task rewrites the same bytes). `error`:
        the file could not be read as planned (gone, cut short while the run read it): it has no
        identity, and its rows are none (`unread`)."""
        d = self.path / "ids"
        d.mkdir(parents=True, exist_ok=True)
        body = json.dumps(
            {
                "chunks": {str(k): v.hex() for k, v in sorted(digests.items())},
                "records": records,
                "first_ts_ns": span[0],
                "last_ts_ns": span[1],
                "first_at": first_at,
                "order": order,
                "directions": directions or {},
                **({"error": error} if error else {}),
            }
        )
        tmp = d / f".{file_index}-{start}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(body)
        os.replace(tmp, d / f"{file_index}-{start}.json")

    def digests(self, file_indexes) -> dict[int, dict[int, bytes]]:
        """file_index -> its chunk digests (chunk number -> digest) the read tasks wrote."""
        digests: dict[int, dict[int, bytes]] = {fi: {} for fi in file_indexes}
        for fi, _start, body in self._splits(digests):
            digests[fi].update({int(k): bytes.fromhex(v) for k, v in body["chunks"].items()})
        return digests

    def capture_ids(
        self,
        sizes: dict[int, int],
        digests: dict | None = None,
        contexts: dict[int, str] | None = None,
        unread: dict[int, str] | None = None,
    ) -> dict[int, str]:
        """file_index -> capture_id for the files of `sizes` (file_index -> planned size), from
        `digests` (self.digests of them, read here when not given) and the `contexts` of the
        segments among them (inputs.id_context; none for a capture).

        A file a read task could not read as planned (`unread`: self.unread of them, read here
        when not given) has none. Raises ValueError naming
        the file index when a chunk was never hashed (a read task that did not run: never the case
        after Spark's read stage completed)."""
        digests = self.digests(sizes) if digests is None else digests
        out = {}
        unread = self.unread(sizes) if unread is None else unread
        for fi, size in sizes.items():
            if fi in unread:
                continue
            try:
                out[fi] = combine_id(size, digests[fi], (contexts or {}).get(fi, ""))
            except ValueError as e:
                raise ValueError(f"run {self.run_id}, file #{fi}: {e}") from None
        return out

    def frame_numbers(self, file_indexes) -> FrameNumbers:
        """The frame numbering of the capture files given (see capture.files.FrameNumbers), from
        the record counts their read tasks wrote beside the digests."""
        counts: dict[int, dict[int, int]] = {fi: {} for fi in file_indexes}
        for fi, start, body in self._splits(counts):
            at = FrameNumbers.key(start, body.get("records"), body.get("first_at"))
            if at is not None:
                counts[fi][at] = body["records"]
        return FrameNumbers({fi: c for fi, c in counts.items() if c})

    def split_order(self, file_indexes) -> SplitOrder:
        """The packet order across the splits of the capture files given (capture.SplitOrder),
        from the order stats and time spans their read tasks wrote beside the digests."""
        return SplitOrder.of_stats(self._split_stats(file_indexes))

    def vantages(self, file_indexes) -> dict[int, int]:
        """The vantage point of each capture file given (vantage.groups), from the record time
        spans and connection directions their read tasks wrote beside the digests."""
        from . import vantage

        splits = self._split_stats(file_indexes)
        return vantage.groups(vantage.spans_of(splits), directions=vantage.directions_of(splits))

    def directions(self, file_indexes) -> dict[int, dict[int, int]]:
        """The connection directions of the capture files given (vantage.directions_of), as
        their read tasks wrote them beside the digests."""
        from . import vantage

        return vantage.directions_of(self._split_stats(file_indexes))

    def _split_stats(self, file_indexes) -> list[dict]:
        """Each split's marker body with its file_index: the read stats the vantage and order
        helpers take."""
        return [{"file_index": fi, **body} for fi, _start, body in self._splits(set(file_indexes))]

    def unread(self, file_indexes) -> dict[int, str]:
        """file_index -> why a read task could not read the file as planned (write_digests'
        `error`): such a file has no capture_id, and its packets are no one's rows."""
        return {
            fi: body["error"] for fi, _start, body in self._splits(set(file_indexes)) if body.get("error")
        }

    def _splits(self, wanted) -> Iterator[tuple[int, int, dict]]:
        """(file_index, split start, body) of the splits written for the file indexes wanted."""
        d = self.path / "ids"
        for f in d.glob("*.json") if d.is_dir() else ():
            fi, start = (int(x) for x in f.name[: -len(".json")].split("-", 1))
            if fi in wanted:
                yield fi, start, json.loads(f.read_text())

    # -- TLS keys of the captures ---------------------------------------------------------------
    def write_tls_key_logs(self, file_index: int, start: int, texts: list[bytes]) -> None:
        """One split's Decryption Secrets Blocks (key log text), readable by the owner only."""
        d = self.path / "secrets"
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = d / f".{file_index}-{start}.{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\n".join(texts))
        os.replace(tmp, d / f"{file_index}-{start}.keylog")

    def tls_keys(self, base=None):
        """`base` (a tls.KeyLog, the settings' key logs, or None) with the keys of every split's
        Decryption Secrets Blocks added."""
        from . import tls

        d = self.path / "secrets"
        return tls.with_texts(
            base, [f.read_bytes() for f in sorted(d.glob("*.keylog"))] if d.is_dir() else []
        )

    def remove_secrets(self) -> None:
        shutil.rmtree(self.path / "secrets", ignore_errors=True)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self.release()
        try:
            self.path.parent.rmdir()
        except OSError:
            pass


def stopped_runs(lake_root: str | os.PathLike) -> list[RunDir]:
    """Run directories of runs that are not running any more (their lock is free), locked now
    by this process so that two recoverers never finish the same run."""
    base = Path(lake_root) / RUNS
    out = []
    for d in sorted(base.iterdir()) if base.is_dir() else ():
        if d.is_dir():
            run = RunDir(lake_root, d.name)
            if run.lock():
                out.append(run)
    return out
