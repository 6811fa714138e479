"""The nightly job on a real Spark standalone cluster writes the same tables as a local run.

A master and two 1-core workers are started on loopback with pyspark's own `spark-class`;
`jobs/nightly_ingest.py` is submitted to them with `spark-submit`, while the same capture set is
ingested locally (`local[2]`). The executors run the venv's interpreter without its editable
brokerscope, so they decode with the package the driver ships (pipeline._ship_package), as on a
real cluster. Every decoded table must be identical, and the cluster run must really have run on
both workers (event log + the master's JSON + the workers' work dirs).

The README's own spark-submit command, read from README.md, runs on the sample data from a shell
where the venv is not active, with a local master and on the standalone master (one executor on one
worker): exit 0, the rows `brokerscope ingest` writes, no INFO line and no note on the hostname.
Under spark-submit, the Spark settings a session gets: spark-submit's --conf over make_spark's
defaults, and the TOML's [spark.conf] over both.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlparse

import pytest

from brokerscope import inputs, pipeline, tables
from brokerscope.config import Settings
from tests.conftest import ROOT, SAMPLE_DATA, public_captures
from tests.support.lakecheck import delta_rs_rows, normalized
from tests.support.standalone import (
    LOOPBACK,
    StandaloneCluster,
    Submission,
    java_missing,
    kill_tree,
    read_event_log,
    spawn,
)
from tests.support.synth import write_capture
from tests.unit.kafka.kit import records

APP_NAME = "brokerscope-nightly"  # jobs/nightly_ingest.py names its application so
SPLIT_SIZE = 64 * 1024  # the ~300 KB synthetic capture becomes several splits
# Short-lived JVMs on a small shared machine: C1 JIT only and the serial GC cut their start-up CPU
# (the tables do not depend on it; it only keeps this test near a minute of CPU).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Master + two workers (1 core each) on 127.0.0.1, stopped whatever happens. A worker offers
    2 GiB, the executor memory of conf/spark-defaults.conf (the README's command asks for that;
    the cluster test asks for 512m), and an application that asks for no core count gets one core
    (spark.deploy.defaultCores): one executor, on one worker."""
    why = java_missing()
    if why:
        pytest.skip(why)
    c = StandaloneCluster.start(
        tmp_path_factory.mktemp("standalone"),
        workers=2,
        cores=1,
        memory="2g",
        timeout=150,
        daemon_java_opts="-Dspark.deploy.defaultCores=1",
    )
    try:
        yield c
    finally:
        c.stop()


def cluster_app_ids(cluster: StandaloneCluster) -> set[str]:
    """The ids of every application the master lists, running or completed."""
    state = cluster.state() or {}
    return {a["id"] for k in ("activeapps", "completedapps") for a in state.get(k, [])}


def _capture_set(d: Path) -> dict:
    """A synthetic capture (a few thousand packets) plus copies of the public captures."""
    d.mkdir()
    info = write_capture(str(d / "synthetic.pcap"), n_conns=60, exchanges=20)
    caps = public_captures()
    assert caps, "the public captures under tests/data/captures are missing"
    for p in caps:
        shutil.copy(p, d / f"{p.parent.name}__{p.name}")
    info["public"] = len(caps)
    return info


def _python_without_brokerscope(d: Path) -> str:
    """The venv's interpreter without its site hooks (.pth files): every dependency in
    site-packages stays importable, the editable brokerscope does not, as on a cluster node where
    brokerscope is not installed. Executors running it can only use the package the driver ships."""
    site = sysconfig.get_paths()["purelib"]
    exe = d / "python-no-brokerscope"
    exe.write_text(
        f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" -S "$@"\n'
    )
    exe.chmod(0o755)
    probe = subprocess.run(
        [
            str(exe),
            "-c",
            "import importlib.util, pyarrow, pyspark; print(importlib.util.find_spec('brokerscope'))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=d,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == "None", probe
    return str(exe)


def _submit_conf(events: Path) -> dict[str, str]:
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.executor.extraJavaOptions": QUICK_JVM,
        "spark.cores.max": "2",
        # start only when both executors are registered, so the first stage can use both
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def test_shipped_package_imports_without_install(tmp_path):
    """The zip make_spark ships to executors imports on a Python that lacks brokerscope, and
    every protocol decoder loads from it (no Spark needed)."""

    class FakeContext:
        def addPyFile(self, path: str) -> None:
            self.path = path

    sc = FakeContext()
    pipeline._ship_package(sc)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "import brokerscope, brokerscope.pipeline, brokerscope.streams;"
        "from brokerscope.protocols import base;"
        "print(brokerscope.__file__); print(json.dumps(sorted(base.protocols())));"
        "print(json.dumps(base.load_errors));"
        # the compiled record walk, copied out of the zip: a batch of two records reads whole
        "from brokerscope.protocols.kafka import records as R;"
        "print(R._records.__file__);"
        "print(R.read_record_set(bytes.fromhex(sys.argv[2])).batches[0].cols.value.to_pylist())"
    )
    runs = [
        subprocess.run(
            [
                _python_without_brokerscope(tmp_path),
                "-c",
                code,
                sc.path,
                records([(b"k", b"v1", []), (None, b"v2", [])]).hex(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr
    where, names, errors, native, values = runs[0].stdout.splitlines()
    assert where.startswith(sc.path)
    assert "brokerscope-native-" in native and values == "[b'v1', b'v2']"
    assert {"kafka", "pulsar", "iggy", "tubemq"} <= set(json.loads(names))
    assert json.loads(errors) == {}
    # every process of one build shares one copy (workers end without atexit: none is left per
    # process), in a directory only this user can write
    assert runs[1].stdout.splitlines()[3] == native
    st = os.stat(os.path.dirname(native))
    assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700
    shutil.rmtree(Path(sc.path).parent)


@pytest.mark.spark
@pytest.mark.slow
def test_cluster_run_matches_local_run(cluster, tmp_path, request):
    t0 = time.monotonic()
    input_dir = tmp_path / "input"
    info = _capture_set(input_dir)
    conf_file = tmp_path / "brokerscope.toml"
    conf_file.write_text(f"[capture]\nsplit_size = {SPLIT_SIZE}\n\n[spark]\nshuffle_partitions = 4\n")
    lake_cluster, lake_local = tmp_path / "lake_cluster", tmp_path / "lake_local"
    events = tmp_path / "events"
    events.mkdir()

    # the splits the job will plan: the synthetic file must be cut into several of them
    disc = inputs.discover([str(input_dir)])
    assert not disc.errors, disc.errors
    psplits, _ = inputs.plan(disc.inputs, SPLIT_SIZE)
    synth_splits = [s for s in psplits if s.path.endswith("synthetic.pcap")]
    assert len(synth_splits) >= 4, synth_splits
    # the read tasks: splits packed to about the split size (2 executor cores in all)
    read_tasks = pipeline.pack_splits(psplits, inputs.effective_split_size(disc.inputs, SPLIT_SIZE, 2))
    assert len(read_tasks) >= 4, read_tasks

    earlier = cluster_app_ids(cluster)  # the module's other tests may submit to it too
    t_submit = time.monotonic()
    job = cluster.submit(
        [
            str(ROOT / "jobs" / "nightly_ingest.py"),
            "--input",
            str(input_dir),
            "--lake",
            str(lake_cluster),
            "--conf",
            str(conf_file),
        ],
        conf=_submit_conf(events),
        cwd=ROOT,
        executor_python=_python_without_brokerscope(tmp_path),
        extra_args=[
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{ROOT / 'conf' / 'log4j2.properties'}",
        ],
    )
    try:
        # meanwhile: the same capture set, same settings, on the local session
        spark = request.getfixturevalue("spark")
        local_settings = Settings.load(conf_file, {"lake": {"path": str(lake_local)}})
        t_local = time.monotonic()
        local = pipeline.ingest([str(input_dir)], local_settings, spark=spark)
        t_local = time.monotonic() - t_local
        res = job.wait(timeout=420)
        t_job = time.monotonic() - t_submit
    finally:
        job.kill()
    assert res.returncode == 0, (
        f"spark-submit failed\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}\n{cluster.logs()}"
    )
    assert local.errors == []
    assert local.packets > info["packets"]  # the synthetic capture and the public ones

    # -- the same tables ---------------------------------------------------------------------
    got = {}
    for t in tables.DECODED_TABLES:
        a = delta_rs_rows(str(lake_cluster / t))
        b = delta_rs_rows(str(lake_local / t))
        assert len(a) == len(b), (t, len(a), len(b))
        assert normalized(a) == normalized(b), t
        got[t] = a
    # not a vacuous comparison: every synthetic connection, the public ones and decoded frames
    synth_ports = {c["client_port"] for c in info["connections"]}
    assert len([r for r in got["streams"] if r["client_port"] in synth_ports]) == 60
    assert len(got["streams"]) > 60
    assert got["commands"] and got["messages"] and got["latencies"]
    keep = ("capture_id", "path", "kind", "size", "packets", "status")
    inp_c = sorted(tuple(r[k] for k in keep) for r in delta_rs_rows(str(lake_cluster / "inputs")))
    inp_l = sorted(tuple(r[k] for k in keep) for r in delta_rs_rows(str(lake_local / "inputs")))
    assert inp_c == inp_l and len(inp_c) == info["public"] + 1

    # -- it really ran on the cluster, on both workers ----------------------------------------
    state = cluster.state()
    apps = [a for a in state["completedapps"] if a["name"] == APP_NAME and a["id"] not in earlier]
    assert len(apps) == 1, state["completedapps"]
    app_id = apps[0]["id"]
    assert apps[0]["state"] == "FINISHED"
    assert len(cluster.alive_workers(state)) == 2

    ev = read_event_log(events, app_id)
    worker_ports = {w.webui_port for w in cluster.workers}
    # executor id -> the worker that launched it (its log URLs point at that worker's web UI)
    executor_worker = {
        e["Executor ID"]: urlparse(e["Executor Info"]["Log Urls"]["stdout"]).port
        for e in ev
        if e["Event"] == "SparkListenerExecutorAdded"
    }
    assert set(executor_worker.values()) == worker_ports, executor_worker
    assert "driver" not in executor_worker
    tasks_by_stage: dict[int, set[str]] = defaultdict(set)
    for e in ev:
        if e["Event"] == "SparkListenerTaskEnd" and e["Task End Reason"]["Reason"] == "Success":
            tasks_by_stage[e["Stage ID"]].add(e["Task Info"]["Executor ID"])
    # the split-reading stage has one task per pack of splits; both executors read splits
    read_stages = [
        e["Stage Info"]["Stage ID"]
        for e in ev
        if e["Event"] == "SparkListenerStageCompleted"
        and e["Stage Info"]["Number of Tasks"] == len(read_tasks)
    ]
    assert read_stages, f"no stage with {len(read_tasks)} tasks"
    assert {executor_worker[x] for x in tasks_by_stage[read_stages[0]]} == worker_ports
    # each worker ran an executor of this app, which received the shipped brokerscope package
    for w in cluster.workers:
        shipped = list((w.work_dir / app_id).glob("*/brokerscope.zip"))
        assert shipped, f"no executor of {app_id} under {w.work_dir}"

    print(
        f"\ncluster vs local: {sum(len(v) for v in got.values())} rows in {len(got)} tables identical; "
        f"{len(psplits)} splits; executors {sorted(executor_worker)}; cluster start "
        f"{cluster.started_in:.1f} s, spark-submit {t_job:.1f} s, local ingest {t_local:.1f} s "
        f"(alongside), test body {time.monotonic() - t0:.1f} s"
    )


# run by spark-submit: the settings of the session make_spark gives, as JSON on one line
PRECEDENCE_PROBE = """
import json, sys
from brokerscope.config import Settings
from brokerscope.pipeline import make_spark
spark = make_spark(Settings.load(sys.argv[1]), app_name="brokerscope-precedence")
print("CONF " + json.dumps({k: spark.conf.get(k) for k in sys.argv[2:]}))
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_conf_wins_over_make_spark_defaults(tmp_path):
    """docs/cluster.md, "Sizing and settings": a --conf given to spark-submit replaces the value
    make_spark would give the key; [spark.conf] in the brokerscope TOML replaces both; keys nobody
    gives keep make_spark's value."""
    why = java_missing()
    if why:
        pytest.skip(why)
    probe = tmp_path / "probe.py"
    probe.write_text(PRECEDENCE_PROBE)
    toml = tmp_path / "b.toml"
    toml.write_text('[spark.conf]\n"spark.sql.files.maxPartitionBytes" = "12345"\n')
    arrow, files, shuffle, tz = (
        "spark.sql.execution.arrow.maxBytesPerBatch",  # make_spark: capture.batch_bytes
        "spark.sql.files.maxPartitionBytes",
        "spark.sql.shuffle.partitions",  # make_spark leaves it alone
        "spark.sql.session.timeZone",  # make_spark: UTC
    )
    res = Submission.start(
        "local[1]",
        [str(probe), str(toml), arrow, files, shuffle, tz],
        tmp_path / "logs",
        conf={arrow: "1048576", files: "999", shuffle: "7"},
        cwd=ROOT,
        extra_args=[
            "--driver-java-options",
            f"-Dlog4j2.configurationFile={ROOT / 'conf' / 'log4j2.properties'}",
        ],
    ).wait(timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("CONF ")]
    assert len(line) == 1, res.stdout[-3000:]
    got = json.loads(line[0][5:])
    assert Settings.load().batch_bytes != 1048576  # the --conf value is not make_spark's anyway
    assert got == {arrow: "1048576", files: "12345", shuffle: "7", tz: "UTC"}


def readme_submit_lines() -> list[str]:
    """The shell lines of the README's spark-submit example (continuation lines joined)."""
    text = (ROOT / "README.md").read_text()
    blocks = [
        b
        for b in re.findall(r"```sh\n(.*?)```", text, re.S)
        if "spark-submit" in b and "jobs/nightly_ingest.py" in b
    ]
    assert len(blocks) == 1, blocks
    return [ln for ln in blocks[0].replace("\\\n", " ").splitlines() if ln.strip()]


def readme_submit_script(venv: Path, master: str, input_dir: Path, lake: Path) -> str:
    """The README's example as a bash script, changed only where it names the machine: the master,
    --input, --lake, and `.venv` (the venv running these tests)."""
    out, submits = [], 0
    for line in readme_submit_lines():
        words = [
            f"{venv}/{w[len('.venv/') :]}" if w.startswith(".venv/") else w
            for w in shlex.split(line, comments=True)
        ]
        if words and Path(words[0]).name == "spark-submit":
            submits += 1
            for opt, value in (("--master", master), ("--input", str(input_dir)), ("--lake", str(lake))):
                assert words.count(opt) == 1, (opt, line)
                words[words.index(opt) + 1] = value
        if words:
            out.append(shlex.join(words))
    assert submits == 1, out
    return "\n".join(["set -e", *out])


def _rows_line(stdout: str) -> dict[str, int]:
    """`rows: commands=1,213, messages=385, ...` of a run's summary -> {table: rows}."""
    line = [ln for ln in stdout.splitlines() if ln.startswith("rows: ")]
    assert len(line) == 1, stdout[-3000:]
    return {t: int(n.replace(",", "")) for t, n in re.findall(r"(\w+)=([\d,]+)", line[0])}


@pytest.fixture(scope="module")
def readme_inputs(tmp_path_factory) -> Path:
    """The sample data without its READMEs, manifests and scripts: the README command's --input."""
    d = tmp_path_factory.mktemp("readme") / "input"
    shutil.copytree(SAMPLE_DATA, d, ignore=shutil.ignore_patterns("*.md", "*.py", "*.json", "*.sh"))
    return d


@pytest.fixture(scope="module")
def readme_reference(readme_inputs, tmp_path_factory, request):
    """What `brokerscope ingest` writes from the same inputs with the same config, once for the
    module: (its lake, its summary). Asked for while the first spark-submit runs."""
    lake = tmp_path_factory.mktemp("readme_ref") / "lake"
    spark = request.getfixturevalue("spark")
    settings = Settings.load(ROOT / "conf" / "brokerscope.toml", {"lake": {"path": str(lake)}})
    return lake, pipeline.ingest([str(readme_inputs)], settings, spark=spark)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "standalone"])
def test_readme_spark_submit_command(where, readme_inputs, tmp_path, request):
    """README "Running on a cluster": its spark-submit command, copied from README.md, works in a
    shell where only `make demo`'s venv is known (PATH without it, no SPARK_HOME or PYSPARK_*), exits
    0 on clean inputs, writes what `brokerscope ingest` writes, and prints no INFO line; with a local
    master (local[2]) and with the module's standalone master on 127.0.0.1, where the job (asking
    for no core count) runs one executor on one worker."""
    why = java_missing()
    if why:
        pytest.skip(why)
    venv = Path(sys.prefix)
    if not (venv / "bin" / "activate").is_file():
        pytest.skip("the tests do not run in a virtualenv (the README command activates one)")
    t0 = time.monotonic()
    lake_submit = tmp_path / "lake_submit"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SPARK_", "PYSPARK_")) and k not in ("VIRTUAL_ENV", "JAVA_TOOL_OPTIONS")
    }
    env["PATH"] = os.pathsep.join(
        d
        for d in env.get("PATH", "").split(os.pathsep)
        if d and Path(d).resolve() != (venv / "bin").resolve()
    )
    master, earlier = "local[2]", set()
    if where == "standalone":
        cluster = request.getfixturevalue("cluster")
        master, earlier = cluster.url, cluster_app_ids(cluster)
        # the machine's setting, not the command's: the driver listens where the executors,
        # on loopback, reach it (as spark-env.sh would set it on a real node)
        env["SPARK_LOCAL_IP"] = LOOPBACK
    log = tmp_path / "submit.log"
    script = readme_submit_script(venv, master, readme_inputs, lake_submit)
    proc = spawn(["bash", "-c", script], env, log, cwd=ROOT)
    try:
        # meanwhile (the first time) what `brokerscope ingest` does with the same inputs and config
        lake_local, local = request.getfixturevalue("readme_reference")
        while (rc := proc.poll()) is None:
            if time.monotonic() - t0 > 420:
                pytest.fail("the README command did not finish within 420 s\n" + log.read_text()[-4000:])
            if where == "standalone":
                cluster.remember_descendants()  # executors and their Python daemons, for stop()
            time.sleep(0.5)
    finally:
        kill_tree([proc])
    out = log.read_text(errors="replace")
    assert rc == 0, out[-6000:] + (cluster.logs() if where == "standalone" else "")
    assert local.exit_code() == 0 and local.errors == [], local.lines()
    assert _rows_line(out) == local.rows and all(local.rows.values()), (out[-3000:], local.rows)
    for t in tables.DECODED_TABLES:
        assert normalized(delta_rs_rows(str(lake_submit / t))) == normalized(
            delta_rs_rows(str(lake_local / t))
        ), t
    info = [ln for ln in out.splitlines() if re.search(r"\bINFO\b", ln)]
    assert info == [], f"{len(info)} INFO line(s):\n" + "\n".join(info[:50])
    assert "Using Spark's default log4j profile" not in out  # conf/log4j2.properties was read
    # nor Spark's note on a hostname that resolves to loopback (the CLI's local JVM never prints it)
    assert "resolves to a loopback address" not in out and "Set SPARK_LOCAL_IP" not in out
    if where == "standalone":
        # the job ran on the cluster: one new finished application, its executor on one worker,
        # which received the package the driver ships
        apps = [a for a in cluster.state()["completedapps"] if a["id"] not in earlier]
        assert [(a["name"], a["state"]) for a in apps] == [(APP_NAME, "FINISHED")], apps
        ran = [w for w in cluster.workers if list((w.work_dir / apps[0]["id"]).glob("*/brokerscope.zip"))]
        assert len(ran) == 1, [w.work_dir for w in cluster.workers]
    print(f"\nREADME spark-submit, {master}: {time.monotonic() - t0:.1f} s")
