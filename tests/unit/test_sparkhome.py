"""The Spark home view (sparkhome.py): links to every entry and jar of a home but Spark ML's jar."""

from __future__ import annotations

import os
import time

import pytest

from brokerscope import classcache, sparkhome


def _home(
    root, jars=("spark-core_2.13-4.2.0.jar", "spark-mllib_2.13-4.2.0.jar", "spark-mllib-local_2.13-4.2.0.jar")
):
    """A Spark home as pip's PySpark lays it out: bin/, jars/, python/lib, conf files."""
    home = root / "pyspark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (home / "python" / "lib").mkdir(parents=True)
    (home / "python" / "lib" / "pyspark.zip").write_bytes(b"PK")
    (home / "jars").mkdir()
    for j in jars:
        (home / "jars" / j).write_bytes(j.encode())
    return home


def test_the_view_links_every_entry_and_every_jar_but_spark_mllib(tmp_path):
    home = _home(tmp_path)
    v = sparkhome.view(home, tmp_path / "views")
    assert v is not None and v.parent == tmp_path / "views"
    assert sorted(p.name for p in v.iterdir()) == ["bin", "jars", "python"]
    assert (v / "bin").is_symlink() and (v / "bin" / "spark-submit").read_text() == "#!/bin/sh\n"
    assert (v / "python" / "lib" / "pyspark.zip").read_bytes() == b"PK"
    assert not (v / "jars").is_symlink()  # a directory of its own, holding links
    jars = sorted(p.name for p in (v / "jars").iterdir())
    assert jars == ["spark-core_2.13-4.2.0.jar", "spark-mllib-local_2.13-4.2.0.jar"]
    assert all((v / "jars" / j).resolve() == home / "jars" / j for j in jars)
    # made once: the same home gives the same directory, nothing half-made is left
    assert sparkhome.view(home, tmp_path / "views") == v
    assert [p.name for p in (tmp_path / "views").iterdir()] == [v.name]


def test_another_jar_set_makes_another_view(tmp_path):
    home = _home(tmp_path)
    first = sparkhome.view(home, tmp_path / "views")
    (home / "jars" / "spark-sql_2.13-4.2.0.jar").write_bytes(b"new")  # an upgrade
    second = sparkhome.view(home, tmp_path / "views")
    assert second != first
    assert (second / "jars" / "spark-sql_2.13-4.2.0.jar").read_bytes() == b"new"
    assert not (first / "jars" / "spark-sql_2.13-4.2.0.jar").exists()


def test_views_long_unused_and_dead_runs_directories_are_pruned(tmp_path):
    views = tmp_path / "views"
    views.mkdir()
    now = time.time()
    ages = [100, 200, 300, 3 * 24 * 3600, 4 * 24 * 3600]  # seconds since each view's last use
    for i, age in enumerate(ages):
        d = views / f"{i:024d}"
        (d / "jars").mkdir(parents=True)
        os.utime(d, (now - age, now - age))
    dead = views / ".x.abc.tmp"
    dead.mkdir()
    os.utime(dead, (now - 2 * sparkhome.STALE_S, now - 2 * sparkhome.STALE_S))
    live = views / ".y.def.tmp"  # another run may be making it right now
    live.mkdir()
    v = sparkhome.view(_home(tmp_path), views)
    left = sorted(p.name for p in views.iterdir())
    # beyond the KEEP last used, only those unused for days go: a running JVM may need the third
    assert left == sorted([".y.def.tmp", v.name, f"{0:024d}", f"{1:024d}", f"{2:024d}"])


def test_using_a_view_marks_it_used(tmp_path):
    home = _home(tmp_path)
    v = sparkhome.view(home, tmp_path / "views")
    long_ago = time.time() - 10 * 24 * 3600
    os.utime(v, (long_ago, long_ago))
    assert sparkhome.view(home, tmp_path / "views") == v
    assert v.stat().st_mtime > long_ago + 9 * 24 * 3600


def test_no_view_where_none_can_be_made(tmp_path):
    home = _home(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert sparkhome.view(home, blocker / "views") is None


def test_a_spark_home_the_user_set_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "their-spark"))
    assert sparkhome.use_view() is None
    assert os.environ["SPARK_HOME"] == str(tmp_path / "their-spark")


def test_the_installed_home_gets_a_view_in_the_cache(tmp_path, monkeypatch):
    if sparkhome.installed_home() is None:
        pytest.skip("no installed PySpark with its jars")
    monkeypatch.setenv(classcache.CACHE_ENV, str(tmp_path / "c"))
    monkeypatch.delenv("SPARK_HOME", raising=False)
    v = sparkhome.use_view()
    assert v is not None and v.parent == tmp_path / "c" / "spark-home"
    assert os.environ["SPARK_HOME"] == str(v)
    installed = sorted(p.name for p in (sparkhome.installed_home() / "jars").iterdir())
    assert sorted(p.name for p in (v / "jars").iterdir()) == [
        j for j in installed if not j.startswith("spark-mllib_")
    ]
    # the class archive is keyed by the view's jars: another archive than the installed home's
    with_view = classcache.key(["-XX:TieredStopAtLevel=1"])
    monkeypatch.delenv("SPARK_HOME")
    assert classcache.key(["-XX:TieredStopAtLevel=1"]) != with_view


def test_a_damaged_view_is_made_again(tmp_path):
    home = _home(tmp_path)
    v = sparkhome.view(home, tmp_path / "views")
    (v / "jars" / "spark-core_2.13-4.2.0.jar").unlink()  # a link removed by hand
    assert sparkhome.view(home, tmp_path / "views") == v
    assert (v / "jars" / "spark-core_2.13-4.2.0.jar").read_bytes() == b"spark-core_2.13-4.2.0.jar"
    (v / "bin").unlink()
    (v / "bin").symlink_to(tmp_path / "nowhere")  # a link pointing elsewhere
    assert sparkhome.view(home, tmp_path / "views") == v
    assert (v / "bin" / "spark-submit").is_file()
    (v / "jars" / "spark-mllib_2.13-4.2.0.jar").symlink_to(home / "jars" / "spark-mllib_2.13-4.2.0.jar")
    assert sparkhome.view(home, tmp_path / "views") == v  # an extra link: made again without it
    assert not (v / "jars" / "spark-mllib_2.13-4.2.0.jar").exists()


def test_an_entry_added_to_the_home_makes_a_new_view_that_links_it(tmp_path):
    home = _home(tmp_path)
    first = sparkhome.view(home, tmp_path / "views")
    (home / "conf").mkdir()
    (home / "conf" / "spark-defaults.conf").write_text("spark.some.setting 42\n")
    second = sparkhome.view(home, tmp_path / "views")
    assert second != first
    assert (second / "conf" / "spark-defaults.conf").read_text() == "spark.some.setting 42\n"
