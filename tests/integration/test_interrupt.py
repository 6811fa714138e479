"""`brokerscope ingest` stopped by Ctrl-C or a scheduler's SIGTERM, as a user's shell or a
scheduler stops it: a process of its own, its pipes read to the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brokerscope import pipeline, report
from tests.conftest import ROOT, SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _launched_by_pyspark(pid: int) -> bool:
    """spark-submit, the spark-class it runs, or the JVM spark-class becomes."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return any(w in cmd for w in (b"spark-submit", b"spark-class", b"SparkSubmit"))


def _ingest(lake: Path, *paths: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "brokerscope.cli",
            "ingest",
            *paths,
            "--lake",
            str(lake),
            "--master",
            "local[2]",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _signal_once_decoding(p: subprocess.Popen, sig: int) -> str:
    """Send `sig` when the command says it is decoding: what it wrote to stderr up to then."""
    lines = []
    for line in p.stderr:
        lines.append(line)
        if line.rstrip().endswith("] decoding"):
            p.send_signal(sig)
            break
    return "".join(lines)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the JVM in /proc")
def test_ctrl_c_while_the_jvm_starts_leaves_no_jvm_behind(tmp_path):
    """Ctrl-C before PySpark has connected to its JVM: that JVM watches its stdin only once
    connected, so it outlived the command for good, holding the command's stdout and stderr (a
    reader of them waited forever), and the command died with a traceback. Now the JVM is
    stopped, and the command exits 130 with one line."""
    p = _ingest(tmp_path / "lake", str(SAMPLE_DATA / "public" / "iggy-rs.pcapng"))
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline and p.poll() is None:
        seen = {c for c in pipeline.child_pids(p.pid) if _launched_by_pyspark(c)}  # not `java -version`
        time.sleep(0.005)
    assert seen, "no spark-submit child seen"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)  # returns only when no process holds the pipes
    assert p.returncode == report.EXIT_INTERRUPTED, err
    assert "brokerscope: interrupted (SIGINT)" in err
    assert "Traceback" not in err
    assert not [c for c in seen if _alive(c)]


def test_sigterm_while_decoding_stops_cleanly_and_commits_nothing(tmp_path):
    """A scheduler's SIGTERM during the decode: Spark's jobs are cancelled and stopped, what the
    run staged is removed, no row is committed, exit 143 with one line; the next run ingests."""
    lake = tmp_path / "lake"
    p = _ingest(lake, str(SAMPLE_DATA))
    head = _signal_once_decoding(p, signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    err = head + err
    assert p.returncode == report.EXIT_TERMINATED, err
    assert "brokerscope: interrupted (SIGTERM)" in err
    assert "Traceback" not in err and "ERROR" not in err and "Exception" not in err
    assert "rows:" not in out
    for table in ("messages", "commands", "streams"):
        assert delta_rs_rows(str(lake / table)) == []
        assert not (lake / table / "_staging").exists()
    q = _ingest(lake, str(SAMPLE_DATA / "public" / "iggy-rs.pcapng"))
    out, err = q.communicate(timeout=300)
    assert q.returncode == 0, err
    assert "commands=8" in out


def test_ctrl_c_pressed_again_while_stopping_waits_for_the_clean_up(tmp_path):
    """Ctrl-C pressed again and again while the command stops (found by a user trial: the second
    one broke the clean-up with a traceback): the later ones are told to wait, the clean-up
    finishes, exit 130 with one line, nothing staged left."""
    lake = tmp_path / "lake"
    p = _ingest(lake, str(SAMPLE_DATA))
    head = _signal_once_decoding(p, signal.SIGINT)
    presses = 0
    while p.poll() is None and presses < 40:
        time.sleep(0.05)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            presses += 1
    out, err = p.communicate(timeout=120)
    err = head + err
    assert presses, "stopped before a second Ctrl-C"
    assert p.returncode == report.EXIT_INTERRUPTED, err
    assert err.count("brokerscope: interrupted (SIGINT)") == 1
    assert "Traceback" not in err and "ERROR" not in err and "Exception" not in err, err
    for table in ("messages", "commands", "streams"):
        assert not (lake / table / "_staging").exists()


def test_the_nightly_job_stopped_by_sigterm_while_decoding(tmp_path):
    """jobs/nightly_ingest.py as a scheduler runs it with plain Python: SIGTERM during the decode
    had killed it without cleanup (-15, staged files left for the next run to find)."""
    lake = tmp_path / "lake"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    argv = [sys.executable, str(ROOT / "jobs" / "nightly_ingest.py"), "--input", str(SAMPLE_DATA)]
    p = subprocess.Popen(
        [*argv, "--lake", str(lake)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in p.stdout:  # the job's progress goes to standard output
        if line.strip() == "decoding":
            p.send_signal(signal.SIGTERM)
            break
    out, err = p.communicate(timeout=120)
    assert p.returncode == report.EXIT_TERMINATED, err
    assert err.splitlines()[-1] == "nightly_ingest: interrupted (SIGTERM)"
    assert "Traceback" not in err and "ERROR" not in err
    for table in ("messages", "commands", "streams"):
        assert delta_rs_rows(str(lake / table)) == []
        assert not (lake / table / "_staging").exists()


def test_ctrl_c_while_the_class_archive_is_saved(tmp_path):
    """Ctrl-C while the first run's JVM writes its class archive: a KeyboardInterrupt traceback
    (exit -2), SIGTERM a silent -15, and a 130 MB unfinished archive left for ten minutes. Now:
    exit 130 with one line, the dump given up and its file removed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BROKERSCOPE_CACHE": str(tmp_path / "cache")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    p = subprocess.Popen(
        [sys.executable, "-m", "brokerscope.cli", "ingest", str(SAMPLE_DATA / "public" / "iggy-rs.pcapng")]
        + ["--lake", str(tmp_path / "lake"), "--master", "local[1]"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in p.stderr:
        if "saving the JVM's classes" in line:
            time.sleep(0.3)  # the JVM is dumping
            p.send_signal(signal.SIGINT)
            break
    out, err = p.communicate(timeout=120)
    assert p.returncode == report.EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "brokerscope: interrupted (SIGINT)"
    assert "Traceback" not in err
    assert not list((tmp_path / "cache").rglob("*.tmp")) and not list((tmp_path / "cache").rglob("*.jsa"))
