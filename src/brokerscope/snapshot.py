"""A Delta table's current snapshot as a pyarrow dataset over its data files on the local disk.

delta-rs's own dataset reads through its filesystem; a process that read through it and exited
right after aborted about 1 run in 80-150 on a loaded machine ('terminate called without an active
exception', even on the calling thread), the local read never (tests/unit/test_lake_schema.py).
The snapshot's files are read as plain Parquet with the table's schema (tables.py: a column an
older file lacks reads null) and its hive partitions; delta-rs's dataset stays for what that does
not cover: files that are no local paths (an object store), reader features (deletion vectors).
"""

from __future__ import annotations

import os
import urllib.parse

import pyarrow as pa
from deltalake import DeltaTable

from . import tables


def local_files(dt: DeltaTable, root: str) -> tuple[list[str], str] | None:
    """The table's data files as plain local paths, and the table's directory `root`, both with
    symlinks resolved alike (delta-rs gives percent-encoded URIs, `sp%20dir`, under `root` as
    it resolved it: readers given the paths and a base directory need them to agree); None
    where a file is not a local one."""
    base = os.path.realpath(root)
    given = os.path.abspath(root)
    out = []
    for u in dt.file_uris():
        if u.startswith("file://"):
            u = u[len("file://") :]
        elif "://" in u:
            return None
        f = urllib.parse.unquote(u)
        if not os.path.isabs(f):
            return None
        if not f.startswith(base + os.sep):
            f = base + f[len(given) :] if f.startswith(given + os.sep) else os.path.realpath(f)
        out.append(f)
    return out, base


def dataset(path: str, table: str):
    """The snapshot of the Delta table `table` (a name of tables.py) at `path`: a
    pyarrow.dataset.Dataset (imported here: it imports pandas, which decode tasks keep out,
    pipeline.keep_pandas_out)."""
    import pyarrow.dataset as ds

    dt = DeltaTable(path)
    local = local_files(dt, path)
    if dt.protocol().reader_features or local is None:
        return dt.to_pyarrow_dataset()
    files, base = local
    schema = tables.schema(table)
    parts = dt.metadata().partition_columns
    try:
        partitioning = (
            ds.partitioning(pa.schema([schema.field(c) for c in parts]), flavor="hive") if parts else None
        )
        return ds.dataset(
            files, schema=schema, format="parquet", partitioning=partitioning, partition_base_dir=base
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError):  # a layout this reading does not know
        return dt.to_pyarrow_dataset()
