"""A run's own directory in the lake, `<lake>/_runs/<run_id>/`: what its tasks and its driver
share besides the tables.

- `ids/`: the identity chunk digests each read task computed (capture.files.chunk_digests), one
  JSON file per split. Spark starts the decode stage only after every task of the read stage
  before its shuffle finished, so a decode task finds every digest of the capture set there and
  names its rows with the final capture_id; the driver combines the same digests for `inputs`.
  Like the embedded writer, this needs the lake on a filesystem the driver and executors share.

Plain Python, no Spark.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

from .capture.files import combine_id

RUNS = "_runs"


class RunDir:
    def __init__(self, lake_root: str | os.PathLike, run_id: str):
        self.run_id = run_id
        self.path = Path(lake_root) / RUNS / run_id

    # -- identity ---------------------------------------------------------------------------
    def write_digests(self, file_index: int, start: int, digests: dict[int, bytes]) -> None:
        """Record one split's chunk digests (atomically: a retried task rewrites the same bytes)."""
        d = self.path / "ids"
        d.mkdir(parents=True, exist_ok=True)
        body = json.dumps({str(k): v.hex() for k, v in sorted(digests.items())})
        tmp = d / f".{file_index}-{start}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(body)
        os.replace(tmp, d / f"{file_index}-{start}.json")

    def capture_ids(self, sizes: dict[int, int]) -> dict[int, str]:
        """file_index -> capture_id for the files of `sizes` (file_index -> planned size).

        Raises ValueError naming the file index when a chunk was never hashed (a read task that
        did not run: never the case after Spark's read stage completed)."""
        digests: dict[int, dict[int, bytes]] = {fi: {} for fi in sizes}
        d = self.path / "ids"
        for f in d.glob("*.json") if d.is_dir() else ():
            fi = int(f.name.split("-", 1)[0])
            if fi in digests:
                digests[fi].update({int(k): bytes.fromhex(v) for k, v in json.loads(f.read_text()).items()})
        out = {}
        for fi, size in sizes.items():
            try:
                out[fi] = combine_id(size, digests[fi])
            except ValueError as e:
                raise ValueError(f"run {self.run_id}, file #{fi}: {e}") from None
        return out

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass
