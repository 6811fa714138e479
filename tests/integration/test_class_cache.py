"""The CLI's local JVM: its class archive written once and mapped after, the Spark home it starts from
(the view without Spark ML's jar, or the installed one with spark.ml_jars). Real JVMs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from brokerscope import classcache
from tests.conftest import ROOT, SAMPLE_DATA

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# a second session, as the CLI makes it: which CDS archives did its JVM map, and does it work?
PROBE = textwrap.dedent(
    """
    import json, re, subprocess
    from brokerscope import classcache, pipeline
    from brokerscope.config import Settings

    spark = pipeline.make_spark(Settings.load(overrides={"spark": {"master": "local[1]"}}), class_cache=True)
    jcmd = classcache._java().parent / "jcmd"
    pid = str(spark.sparkContext._gateway.proc.pid)
    info = subprocess.run([str(jcmd), pid, "VM.info"], capture_output=True, text=True).stdout
    mapped = re.search(r"CDS archive\\(s\\) mapped at: .*?size (\\d+)", info)
    jvm = spark.sparkContext._jvm
    try:  # Spark ML's session extension: in the jar the Spark home view leaves out
        jvm.java.lang.Class.forName("org.apache.spark.sql.ml.InternalFunctionRegistration")
        ml = True
    except Exception:
        ml = False
    got = {"mapped": int(mapped.group(1)) if mapped else 0, "count": spark.range(5).count(), "ml": ml}
    got["classpath"] = jvm.java.lang.System.getProperty("java.class.path").split(":")
    print(json.dumps(got))
    pipeline.finish_class_cache(print)
    """
)


def test_first_cli_run_saves_the_archive_and_the_next_jvm_maps_it(tmp_path):
    java = classcache._java()
    if java is None or not (java.parent / "jcmd").exists():
        pytest.skip("no jcmd next to java (a JRE): cannot ask the JVM what it mapped")
    env = {**os.environ, "BROKERSCOPE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": f"{ROOT / 'src'}"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.pop("SPARK_HOME", None)  # the installed PySpark's home, seen through the view
    first = subprocess.run(
        [sys.executable, "-m", "brokerscope.cli", "ingest", str(SAMPLE_DATA / "kafka" / "lz4.pcap")]
        + ["--lake", str(tmp_path / "lake"), "--master", "local[1]", "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    assert "saving the JVM's classes for quicker starts (once)" in first.stderr
    assert "commands=66, messages=24" in first.stdout
    files = list((tmp_path / "cache" / "jvm").iterdir())
    assert len(files) == 1 and files[0].suffix == ".jsa", files  # published; nothing half-written
    size = int(re.fullmatch(r"spark-[0-9a-f]{24}-(\d+)\.jsa", files[0].name).group(1))
    assert size == files[0].stat().st_size > 10 << 20

    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    got = json.loads(probe.stdout.strip().splitlines()[-1])
    assert got["count"] == 5
    # the JVM started from the Spark home view: no Spark ML jar, every jar a link in the cache
    assert got["ml"] is False
    jars = [p for p in got["classpath"] if p.endswith(".jar")]
    assert jars and all(p.startswith(str(tmp_path / "cache" / "spark-home")) for p in jars)
    assert got["mapped"] >= size  # the JDK's own archive plus ours
    assert "saving" not in probe.stdout + probe.stderr
    assert [f.name for f in (tmp_path / "cache" / "jvm").iterdir()] == [files[0].name]
    assert not list(tmp_path.glob("hs_err_pid*.log"))

    # a [spark.conf] value the JVM refuses: one line and exit 2 (was a py4j traceback, exit 1),
    # and the archive, not what failed, stays (found by a user trial)
    conf = tmp_path / "bad.toml"
    conf.write_text('[spark.conf]\n"spark.driver.memory" = "4x"\n')
    bad = subprocess.run(
        [sys.executable, "-m", "brokerscope.cli", "ingest", str(SAMPLE_DATA / "kafka" / "lz4.pcap")]
        + ["--lake", str(tmp_path / "lake2"), "--master", "local[1]", "--conf", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "Invalid maximum heap size: -Xmx4x" in bad.stderr
    assert bad.stderr.rstrip().splitlines()[-1] == (
        "brokerscope: Spark's JVM exited before it started (its message is above): check the "
        "[spark.conf] and [spark] settings of the config"
    )
    assert "Traceback" not in bad.stderr
    assert [f.name for f in (tmp_path / "cache" / "jvm").iterdir()] == [files[0].name]


KEEP_ML = textwrap.dedent(
    """
    import json, os
    from brokerscope import pipeline
    from brokerscope.config import Settings

    over = {"spark": {"master": "local[1]", "ml_jars": True, "class_cache": False}}
    spark = pipeline.make_spark(Settings.load(overrides=over), class_cache=True)
    jvm = spark.sparkContext._jvm
    jvm.java.lang.Class.forName("org.apache.spark.sql.ml.InternalFunctionRegistration")  # raises if absent
    jars = [p for p in jvm.java.lang.System.getProperty("java.class.path").split(":") if p.endswith(".jar")]
    print(json.dumps({"home": os.environ.get("SPARK_HOME"), "jars": jars}))
    spark.stop()
    """
)


def test_ml_jars_true_starts_the_jvm_from_the_installed_spark_home(tmp_path):
    env = {**os.environ, "BROKERSCOPE_CACHE": str(tmp_path / "cache"), "PYTHONPATH": f"{ROOT / 'src'}"}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    env.pop("SPARK_HOME", None)
    run = subprocess.run(
        [sys.executable, "-c", KEEP_ML], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["home"] is None  # nothing pointed elsewhere
    assert got["jars"] and not any(p.startswith(str(tmp_path)) for p in got["jars"])
    assert not (tmp_path / "cache" / "spark-home").exists()
