"""The Spark home the CLI's local JVM starts from: the installed PySpark's, without Spark ML's jar.

spark-mllib's jar declares a SparkSessionExtensionsProvider (org.apache.spark.sql.ml.
InternalFunctionRegistration, in META-INF/services): every SparkSession built with that jar on the
classpath runs it, and it makes its functions with Scala reflection. brokerscope uses no Spark ML,
yet that was 0.4-1.3 s of every local start (a one-file ingest on one core, median 3.76 -> 3.37 s;
the start-up of a run pinned to one CPU 3.3-3.6 -> 2.1-2.3 s; docs/benchmarks.md). Spark has no
setting that skips a provider, and its launcher puts every jar of $SPARK_HOME/jars on the
classpath, so the JVM is started from a view of the Spark home: a directory of symbolic links to
the installed home's entries, whose `jars` links every jar but those of ML_JARS. Spark's scripts,
conf and Python zips are the installed ones.

A view belongs to one Spark home and one jar set: its directory name is a digest of them (an
upgrade makes a new one), and it is published by a rename once complete; old views go once unused
for two days (a running JVM may still open jars through its view). Views live in the class
archive's cache directory (classcache.cache_root) under spark-home/; a user's own $SPARK_HOME is
left as it is, and any failure to make a view starts Spark from the installed home.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from pathlib import Path

from . import classcache

# jars left out of the view: the one whose session extension every SparkSession would run
ML_JARS = ("spark-mllib_",)
KEEP = 3  # views kept (other Spark installations or versions), last used first
# a JVM opens its classpath's jars as it needs them: a view beyond KEEP goes only once unused
# this long (a run still going could need it), and an unfinished one is a dead run's after STALE_S
UNUSED_S = 2 * 24 * 3600
STALE_S = 3600


def installed_home() -> Path | None:
    """The Spark home PySpark starts its JVM from when $SPARK_HOME is not set: the installed
    pyspark package (pip's PySpark carries its jars), or None."""
    try:
        import pyspark
    except ImportError:
        return None
    home = Path(pyspark.__file__).resolve().parent
    return home if (home / "jars").is_dir() and (home / "bin" / "spark-submit").is_file() else None


def _digest(home: Path) -> str:
    """What a view depends on: the home's path, its entries (names) and its jars (names, sizes,
    times)."""
    h = hashlib.sha256(f"{home}\n".encode())
    h.update("\0".join(sorted(p.name for p in home.iterdir())).encode())
    classcache.hash_jars(h, home / "jars")
    return h.hexdigest()[:24]


def _links(home: Path) -> dict[str, Path]:
    """The links a view of `home` holds, by their path in it: its entries, and its jars but
    ML_JARS."""
    out = {p.name: p for p in home.iterdir() if p.name != "jars"}
    out.update({f"jars/{j.name}": j for j in (home / "jars").iterdir() if not j.name.startswith(ML_JARS)})
    return out


def _whole(v: Path, links: dict[str, Path]) -> bool:
    """Whether view `v` holds exactly `links`, each pointing where it should."""
    try:
        held = {p.name for p in v.iterdir()} | {f"jars/{p.name}" for p in (v / "jars").iterdir()}
        return held == {*links, "jars"} and all(os.readlink(v / k) == str(t) for k, t in links.items())
    except OSError:
        return False


def view(home: Path, root: Path | None = None) -> Path | None:
    """The view of Spark home `home` without ML_JARS, made if missing or damaged (under `root`,
    default the cache's spark-home/); None when it cannot be made."""
    root = root if root is not None else classcache.cache_root() / "spark-home"
    try:
        done = root / _digest(home)
        links = _links(home)
        if done.is_dir():
            if _whole(done, links):
                os.utime(done)  # its time is its last use, for _prune
                return done
            shutil.rmtree(done)  # a link removed or changed by hand: made again
        root.mkdir(parents=True, exist_ok=True)
        _prune(root)
        tmp = root / f".{done.name}.{uuid.uuid4().hex[:12]}.tmp"
        tmp.mkdir()
        (tmp / "jars").mkdir()
        for name, target in links.items():
            (tmp / name).symlink_to(target)
        try:
            tmp.rename(done)
        except OSError:  # another run published it first: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
            if not _whole(done, links):
                return None
        return done
    except OSError:
        return None


def _prune(root: Path) -> None:
    """Keep the KEEP views last used, and any used in the last UNUSED_S; remove unfinished ones
    a dead run left."""
    now = time.time()
    views = []
    for p in root.iterdir():
        try:
            mtime = p.lstat().st_mtime
        except OSError:
            continue
        if p.name.endswith(".tmp"):
            if now - mtime > STALE_S:
                shutil.rmtree(p, ignore_errors=True)
        elif p.is_dir():
            views.append((mtime, p))
    for mtime, p in sorted(views, reverse=True)[KEEP - 1 :]:  # room for the one about to be made
        if now - mtime > UNUSED_S:
            shutil.rmtree(p, ignore_errors=True)


def use_view() -> Path | None:
    """Point $SPARK_HOME at the view of the installed Spark home, for the JVM this process is
    about to start; the view, or None (a $SPARK_HOME the user set, no installed home, no view)."""
    if os.environ.get("SPARK_HOME"):
        return None
    home = installed_home()
    v = view(home) if home is not None else None
    if v is not None:
        os.environ["SPARK_HOME"] = str(v)
    return v
