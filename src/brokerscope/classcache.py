"""The local Spark JVM's class archive (the JDK's application class-data sharing, AppCDS).

Starting Spark's JVM loads and verifies about 10,000 classes; on one CPU that is 2-3 s of every
local run (the session and the first job). The first local run of the CLI asks the JVM to write
the classes it loaded to an archive when it exits (-XX:ArchiveClassesAtExit), and waits for that;
later runs map the archive (-XX:SharedArchiveFile) instead of loading the classes again.

An archive belongs to one JVM build, one Spark jar set (and its directory: the JVM checks the
classpath's paths against the archive's) and one set of driver JVM options: its file name is a
digest of them, so an upgrade of either makes a new one. A truncated archive crashes the JVM
(SIGBUS), so an archive is only ever published by a rename after its JVM exited cleanly, and a
session that fails to start with an archive drops it and starts without
(pipeline.make_spark). The archives live in $BROKERSCOPE_CACHE, else $XDG_CACHE_HOME/brokerscope,
else ~/.cache/brokerscope, under jvm/; an unwritable cache directory, one whose path holds a space
or a quote (the JVM option would be cut there), and a non-empty directory on the JVM's classpath
(a conf directory: the JDK archives none then) turn the archive off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "BROKERSCOPE_CACHE"
# the JVM's CDS messages (classes it cannot archive, a mismatched archive) are not the user's concern
QUIET = ["-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
KEEP = 3  # archives kept (other JVM builds, Spark versions or options), newest first
DUMP_TIMEOUT_S = 300.0
# the JVM writes its archive as it exits: an unfinished one older than this is a dead run's
STALE_S = 2 * DUMP_TIMEOUT_S


@dataclass(frozen=True)
class Plan:
    """What one session's JVM does with the archive: map `archive`, or write `pending` (then
    published as `archive` with its size in the name)."""

    archive: Path
    pending: Path | None

    @property
    def options(self) -> list[str]:
        if self.pending is not None:
            return [f"-XX:ArchiveClassesAtExit={self.pending}", *QUIET]
        return [f"-XX:SharedArchiveFile={self.archive}", *QUIET]


def cache_root() -> Path:
    """brokerscope's cache directory: $BROKERSCOPE_CACHE, else $XDG_CACHE_HOME/brokerscope, else
    ~/.cache/brokerscope (the class archives, the SQL shell's history)."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(xdg, "brokerscope")
    return Path(root)


def cache_dir() -> Path:
    return cache_root() / "jvm"


def _java() -> Path | None:
    """The java that spark-submit runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and os.path.exists(found) else None


def _spark_jars() -> Path | None:
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent / "jars"


def key(java_options: list[str]) -> str | None:
    """A digest of what an archive depends on, or None when the JVM or Spark's jars are unknown
    (or one of them cannot be read: Spark itself may still start)."""
    java, jars = _java(), _spark_jars()
    if java is None or jars is None or not jars.is_dir():
        return None
    h = hashlib.sha256()
    try:
        for f in [java, *sorted(java.parent.parent.rglob("libjvm.so"))]:
            st = f.stat()
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        h.update(f"{jars}\n".encode())  # the JVM checks its classpath's paths against the archive's
        hash_jars(h, jars)
    except OSError:  # a dangling link among the jars, say
        return None
    h.update("\0".join(java_options).encode())
    return h.hexdigest()[:24]


def hash_jars(h, jars: Path) -> None:
    """Add the jar set of directory `jars` (names, sizes, times) to hash `h`; OSError where one
    cannot be read."""
    for f in sorted(jars.iterdir()):
        st = f.stat()
        h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())


def _directory_on_classpath(java_options: list[str]) -> str | None:
    """A non-empty directory Spark's launcher puts on the JVM's classpath, or None. The JDK
    archives no classpath with one ("Cannot have non-empty directory in paths"), and maps no
    archive with one: Spark's conf directory ($SPARK_CONF_DIR, else the Spark home's conf/, which
    a Spark distribution fills with templates), $HADOOP_CONF_DIR, $YARN_CONF_DIR,
    $SPARK_DIST_CLASSPATH and any directory the options name (spark.driver.extraClassPath)."""
    jars = _spark_jars()
    conf = os.environ.get("SPARK_CONF_DIR") or (str(jars.parent / "conf") if jars else "")
    places = [conf, os.environ.get("HADOOP_CONF_DIR", ""), os.environ.get("YARN_CONF_DIR", "")]
    for text in [os.environ.get("SPARK_DIST_CLASSPATH", ""), *java_options]:
        places.extend(t for part in text.split() for t in part.replace(",", ":").split(":"))
    for place in places:
        try:
            if place and os.path.isdir(place) and any(os.scandir(place)):
                return place
        except OSError:
            continue
    return None


def plan(java_options: list[str]) -> Plan | None:
    """The archive for a JVM started with `java_options`: map it if published, else write it."""
    k = key(java_options)
    if k is None or _directory_on_classpath(java_options) is not None:
        return None
    d = cache_dir()
    if any(c.isspace() or c in "'\"" for c in str(d)):  # the JVM option would be cut there
        return None
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(d, os.W_OK):
            return None
    except OSError:
        return None
    _drop_stale(d)  # an interrupted run's unfinished archive, found by the runs after it too
    for archive in d.glob(f"spark-{k}-*.jsa"):
        # published as spark-<key>-<size>.jsa: a file of another size was cut (it would crash the JVM)
        try:
            whole = archive.stat().st_size == int(archive.stem.rsplit("-", 1)[1])
        except (OSError, ValueError):
            whole = False
        if whole:
            return Plan(archive, None)
        archive.unlink(missing_ok=True)
    _prune(d)
    return Plan(d / f"spark-{k}-0.jsa", d / f"spark-{k}.{uuid.uuid4().hex[:12]}.tmp")


def finish(spark, p: Plan, progress=lambda m: None) -> None:
    """End the session; when its JVM writes an archive, wait for it to exit and publish the
    archive if it exited cleanly (the first run pays the writing, once)."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    spark.stop()
    if p.pending is None or proc is None:
        return
    progress(f"saving the JVM's classes for quicker starts (once), in {p.archive.parent}")
    t0 = time.time()
    try:
        if proc.stdin:  # the gateway JVM exits when its standard input closes
            proc.stdin.close()
        rc = proc.wait(timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        rc = None
    except BaseException:  # Ctrl-C, SIGTERM: the session is stopped; the dump is given up
        proc.kill()
        try:
            proc.wait(timeout=10)
        finally:
            p.pending.unlink(missing_ok=True)
        raise
    size = p.pending.stat().st_size if p.pending.is_file() else 0
    if rc == 0 and size > 0:
        os.replace(p.pending, p.archive.with_name(p.archive.name.replace("-0.jsa", f"-{size}.jsa")))
        progress(f"saved in {time.time() - t0:.1f} s")
    else:
        p.pending.unlink(missing_ok=True)


def discard(p: Plan) -> None:
    """Drop an archive a JVM could not start with."""
    p.archive.unlink(missing_ok=True)


def _prune(d: Path) -> None:
    """Room for one more archive among the newest KEEP."""
    try:
        archives = sorted(d.glob("spark-*.jsa"), key=lambda f: f.stat().st_mtime, reverse=True)
        for f in archives[KEEP - 1 :]:
            f.unlink(missing_ok=True)
    except OSError:
        pass


def _drop_stale(d: Path) -> None:
    """No unfinished archive of a run that died long ago (one stopped by a signal leaves its
    JVM writing it, unpublished: found by a user trial, 120 MB kept for good once the next run
    published its own)."""
    now = time.time()
    for f in d.glob("spark-*.tmp"):
        try:
            if now - f.stat().st_mtime > STALE_S:
                f.unlink(missing_ok=True)
        except OSError:
            pass
