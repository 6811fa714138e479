"""A lake on a disk that is full: delta-rs's runtime prints a Rust panic report on stderr before
Python gets the error ("thread 'tokio-rt-worker' panicked at .../object_store/.../buffered.rs:
Already shut down", a backtrace note); the command's one line must be all a scheduler's log gets
(report.panics_held_back). A real tmpfs, filled to its last kilobytes (root: mount)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from brokerscope import pipeline
from brokerscope.config import Settings

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]

KAFKA = Path(__file__).parents[2] / "sample_data" / "kafka"


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(disk: Path, leave_kb: int) -> None:
    free_kb = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize // 1024
    with open(disk / "filler", "wb") as f:
        f.write(bytes((free_kb - leave_kb) * 1024))


def test_compaction_on_a_full_disk_says_so_in_one_line(spark, small_disk):
    lake = small_disk / "lake"
    over = {"lake": {"path": str(lake), "optimize_after_run": False}, "spark": {"shuffle_partitions": 4}}
    for name in ("none", "gzip", "lz4", "snappy", "zstd", "txn"):  # small files in every table
        summary = pipeline.ingest([str(KAFKA / f"{name}.pcap")], Settings.load(overrides=over), spark=spark)
        assert summary.errors == []
    _fill(small_disk, 40)
    r = subprocess.run(
        [sys.executable, "-m", "brokerscope.cli", "optimize", "--lake", str(lake)], capture_output=True
    )
    lines = r.stderr.decode().splitlines()
    assert r.returncode == 1, lines
    assert len(lines) == 1 and lines[0].startswith("brokerscope: no space left on device"), lines
    (lake / "..").resolve().joinpath("filler").unlink()
    r = subprocess.run(
        [sys.executable, "-m", "brokerscope.cli", "optimize", "--lake", str(lake)], capture_output=True
    )
    assert r.returncode == 0, r.stderr.decode()  # with room again, the compaction goes through
