"""The class archive's files (classcache.py): which archive a JVM maps, what it writes, what goes."""

from __future__ import annotations

import os
import time

import pytest

from brokerscope import classcache

OPTS = ["-XX:TieredStopAtLevel=1", ""]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(classcache.CACHE_ENV, str(tmp_path / "c"))
    if classcache.key(OPTS) is None:
        pytest.skip("no java or no Spark jars")
    return tmp_path / "c" / "jvm"


def test_first_run_writes_then_later_runs_map_the_published_archive(cache):
    p = classcache.plan(OPTS)
    assert p.pending is not None and p.pending.parent == cache
    assert p.options[0] == f"-XX:ArchiveClassesAtExit={p.pending}"
    # what finish does after the JVM exited cleanly: publish under the name carrying its size
    p.pending.write_bytes(b"x" * 1000)
    published = cache / p.archive.name.replace("-0.jsa", "-1000.jsa")
    os.replace(p.pending, published)
    again = classcache.plan(OPTS)
    assert again.pending is None and again.archive == published
    assert again.options[0] == f"-XX:SharedArchiveFile={published}"
    # other options (another log config, another JIT): another archive
    assert classcache.plan(["-XX:TieredStopAtLevel=4", ""]).pending is not None


def test_a_cut_archive_is_dropped_not_mapped(cache):
    """A truncated archive crashes the JVM (SIGBUS): its size must be the one it was published with."""
    p = classcache.plan(OPTS)
    cut = cache / p.archive.name.replace("-0.jsa", "-5000.jsa")
    cut.write_bytes(b"x" * 4096)
    again = classcache.plan(OPTS)
    assert again.pending is not None and not cut.exists()


def test_old_archives_and_dead_runs_files_are_pruned(cache):
    cache.mkdir(parents=True)
    now = time.time()
    for i in range(5):
        f = cache / f"spark-{i:024d}-10.jsa"
        f.write_bytes(b"y" * 10)
        os.utime(f, (now - 100 * i, now - 100 * i))
    dead = cache / "spark-0.abc.tmp"
    dead.write_bytes(b"z")
    os.utime(dead, (now - 2 * classcache.STALE_S, now - 2 * classcache.STALE_S))
    live = cache / "spark-1.def.tmp"  # another run may be writing it right now
    live.write_bytes(b"z")
    classcache.plan(OPTS)
    left = sorted(f.name for f in cache.glob("spark-*.jsa"))
    assert left == [f"spark-{i:024d}-10.jsa" for i in range(classcache.KEEP - 1)]
    assert not dead.exists() and live.exists()


def test_no_usable_cache_directory_turns_the_archive_off(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(classcache.CACHE_ENV, str(blocker))
    assert classcache.plan(OPTS) is None


def test_the_same_jars_in_another_directory_key_another_archive(tmp_path, monkeypatch):
    """The JVM checks the classpath's paths against an archive's: the same jar files elsewhere (a
    Spark home view, another virtualenv) must not map it, or the archive goes unused."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    if classcache.key(OPTS) is None:
        pytest.skip("no java or no Spark jars")
    installed = classcache._spark_jars()
    for where in ("a", "b"):
        (tmp_path / where / "jars").mkdir(parents=True)
        for jar in installed.iterdir():
            (tmp_path / where / "jars" / jar.name).symlink_to(jar)
    keys = set()
    for where in ("a", "b"):
        monkeypatch.setenv("SPARK_HOME", str(tmp_path / where))
        keys.add(classcache.key(OPTS))
    assert len(keys) == 2


def test_no_archive_where_the_jvm_could_neither_write_nor_map_one(tmp_path, monkeypatch):
    """A cache path with a space would cut the JVM option; a non-empty directory on the classpath
    (Spark's conf directory with a spark-defaults.conf, a distribution's templates) makes the JDK
    refuse to write an archive ("Cannot have non-empty directory in paths"), every run again."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    for name in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH"):
        monkeypatch.delenv(name, raising=False)
    if classcache.key(OPTS) is None:
        pytest.skip("no java or no Spark jars")
    monkeypatch.setenv(classcache.CACHE_ENV, str(tmp_path / "my cache"))
    assert classcache.plan(OPTS) is None
    monkeypatch.setenv(classcache.CACHE_ENV, str(tmp_path / "c"))
    conf = tmp_path / "conf"
    conf.mkdir()
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert classcache.plan(OPTS) is not None  # an empty directory is no obstacle
    (conf / "spark-defaults.conf.template").write_text("# spark.master local\n")
    assert classcache.plan(OPTS) is None
    monkeypatch.delenv("SPARK_CONF_DIR")
    extra = tmp_path / "classes"
    (extra / "x").mkdir(parents=True)
    assert classcache.plan(["-XX:TieredStopAtLevel=1", "", "", f"/no/such.jar:{extra}"]) is None


def test_a_jar_that_cannot_be_read_means_no_archive_not_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    if classcache.key(OPTS) is None:
        pytest.skip("no java or no Spark jars")
    (tmp_path / "home" / "jars").mkdir(parents=True)
    (tmp_path / "home" / "jars" / "a.jar").symlink_to(tmp_path / "gone.jar")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "home"))
    assert classcache.key(OPTS) is None


def test_a_dead_run_s_unfinished_archive_goes_once_another_is_published(cache):
    """A run stopped by a signal leaves its JVM writing an archive it never publishes; the next
    run writes and publishes its own, and every run after maps that one (found by a user trial:
    the 120 MB unfinished file was never removed, nothing pruned once an archive was found)."""
    p = classcache.plan(OPTS)
    p.pending.write_bytes(b"x" * 1000)
    os.replace(p.pending, cache / p.archive.name.replace("-0.jsa", "-1000.jsa"))
    dead = cache / "spark-0.abc.tmp"
    dead.write_bytes(b"z")
    old = time.time() - 2 * classcache.STALE_S
    os.utime(dead, (old, old))
    assert classcache.plan(OPTS).pending is None  # the published archive is mapped
    assert not dead.exists()
