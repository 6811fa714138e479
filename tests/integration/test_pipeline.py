"""End to end on a real local Spark session: captures in, Delta tables out, read back by
delta-rs and DuckDB."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from brokerscope import inputs, pipeline, tables
from brokerscope.config import Settings
from brokerscope.lake import Lake
from brokerscope.streams import decode_files
from tests.conftest import ROOT, SAMPLE_DATA, public_captures
from tests.support import replay
from tests.support.frames import RECORDED
from tests.support.lakecheck import delta_rs_rows, duckdb_connect, duckdb_count, normalized
from tests.support.synth import write_capture

pytestmark = pytest.mark.spark


def _settings(lake, **capture) -> Settings:
    over = {"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}}
    if capture:
        over["capture"] = capture
    return Settings.load(overrides=over)


def _all_rows(lake) -> dict[str, list[dict]]:
    return {t: delta_rs_rows(str(lake / t)) for t in tables.DECODED_TABLES}


def test_public_captures_and_sample_data_end_to_end(spark, tmp_path):
    """Every protocol, segment files included: Spark writes exactly what the Spark-free decode
    gives, whatever task decoded which connection."""
    caps = [str(p) for p in public_captures()]
    assert caps, "the public captures under tests/data/captures are missing"
    settings = _settings(tmp_path / "lake")
    summary = pipeline.ingest([*caps, str(SAMPLE_DATA)], settings, spark=spark)
    assert summary.errors == []
    assert summary.packets > 0 and summary.rows["streams"] > 0
    got = _all_rows(tmp_path / "lake")
    # Spark wrote exactly what the Spark-free decode of the same capture set gives
    local = decode_files([*caps, str(SAMPLE_DATA)], settings)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(local[t]), t
    protocols = {r["protocol"] for r in got["messages"]}
    assert {"kafka", "pulsar", "iggy", "tubemq"} <= protocols
    assert {r["source"] for r in got["messages"]} == {"capture", "segment"}
    # Kafka fetches that name topics by id (librdkafka, Fetch v13+) get names learned from
    # Metadata responses on other connections, in whichever task those were decoded
    by_id = [r for r in got["messages"] if r["protocol"] == "kafka" and r["topic_id"]]
    assert by_id and all(
        r["topic"] and r["message_id"] == f"{r['topic']}-{r['partition']}@{r['offset']}" for r in by_id
    )
    # every table, decoder tables included, opens in DuckDB with the same row count
    con = duckdb_connect()
    for t in tables.TABLES:
        path = str(tmp_path / "lake" / t)
        assert duckdb_count(con, path) == len(delta_rs_rows(path)), t
    cols = {
        r[0]
        for r in con.execute(
            f"DESCRIBE SELECT * FROM delta_scan('{tmp_path / 'lake' / 'messages'}')"
        ).fetchall()
    }
    assert set(tables.schema("messages").names) <= cols
    inputs = delta_rs_rows(str(tmp_path / "lake" / "inputs"))
    # a row per path; the public captures copied into sample_data/public are one input each
    dups = [ln for ln in summary.capture_errors if "same content as" in ln]
    # files that are no input (sample_data's READMEs, manifests, scripts) are recorded as skipped
    assert summary.skipped and all(
        p.endswith((".md", ".json", ".py", ".txt", ".sh")) for p, _ in summary.skipped
    )
    assert len(dups) == 5 and len(inputs) == summary.files + len(dups) + len(summary.skipped)
    assert {r["status"] for r in inputs if r["capture_id"] is None} == {"skipped"}
    assert len({r["capture_id"] for r in inputs if r["capture_id"]}) == summary.files
    assert {os.path.realpath(c) for c in caps} <= {r["path"] for r in inputs}
    assert sum({r["capture_id"]: r["packets"] or 0 for r in inputs}.values()) == summary.packets


def test_reingest_gives_identical_tables(spark, tmp_path):
    cap = tmp_path / "syn.pcap"
    write_capture(str(cap), n_conns=12, exchanges=5)
    settings = _settings(tmp_path / "lake")
    pipeline.ingest([str(cap)], settings, spark=spark)
    first = _all_rows(tmp_path / "lake")
    versions = {i.name: i.version for i in Lake(tmp_path / "lake").info()}
    pipeline.ingest([str(cap)], settings, spark=spark)
    second = _all_rows(tmp_path / "lake")
    assert len(first["streams"]) == 12
    for t in tables.DECODED_TABLES:
        assert normalized(second[t]) == normalized(first[t]), t
    # replaced in one write commit per table (then compacted), not appended
    from deltalake import DeltaTable

    for t in tables.TABLES:
        new = DeltaTable(str(tmp_path / "lake" / t)).history()
        new = new[: len(new) - versions[t] - 1]
        writes = [h for h in new if h.get("brokerscope", {}).get("operation") != "optimize"]
        assert len(writes) == (1 if second.get(t, [None]) else 0), t  # a table without rows: no commit
    assert len(delta_rs_rows(str(tmp_path / "lake" / "inputs"))) == 1


def test_a_capture_and_its_copy_decades_later_are_two_connections_each(spark, tmp_path):
    """A user trial: a capture and the same capture shifted 76 years (editcap -t) ingested in one
    run repeat every 4-tuple and ISN; each copy is a connection of its own, its rows decoded
    (before: one streams row spanning the decades, the copy's rows lost as retransmissions).
    In one task and through the shuffle; and the copy ingested by a later run beside the first."""
    orig = SAMPLE_DATA / "kafka" / "none.pcap"
    late = replay.shifted(orig, tmp_path / "late.pcap", 76 * replay.YEAR_S)
    alone = decode_files([str(orig)])
    both = decode_files([str(orig), str(late)])
    for t in tables.DECODED_TABLES:
        assert len(both[t]) == 2 * len(alone[t]), t
    for name, capture in (("one", {}), ("shuffle", {"split_size": 900})):
        lake = tmp_path / name
        assert pipeline.ingest([str(orig), str(late)], _settings(lake, **capture), spark=spark).errors == []
        got = _all_rows(lake)
        for t in tables.DECODED_TABLES:
            assert normalized(got[t]) == normalized(both[t]), (name, t)
        assert all(r["duration_us"] < 10_000_000 for r in got["streams"]), name  # 3.2 s at most
    lake = tmp_path / "two-runs"
    pipeline.ingest([str(orig)], _settings(lake), spark=spark)
    pipeline.ingest([str(orig), str(late)], _settings(lake), spark=spark, skip_ingested=True)
    got = _all_rows(lake)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(both[t]), ("two runs", t)


def test_the_shuffle_path_gives_what_decoding_in_one_process_gives_for_every_kind(spark, tmp_path):
    """Cut into 900-byte splits, pcapng (two real captures), gzip and pcap files go through the
    shuffle, payloads of plain files as offsets read back by the decode tasks (gzip ones as
    bytes): the tables equal the Spark-free decode of the same files."""
    import gzip
    import shutil

    paths = [tmp_path / "a.pcapng", tmp_path / "b.pcapng", tmp_path / "c.pcap.gz", tmp_path / "d.pcap"]
    shutil.copy(SAMPLE_DATA / "public" / "iggy-rs.pcapng", paths[0])
    shutil.copy(ROOT / "tests" / "data" / "captures" / "ndpi" / "kafka.pcapng", paths[1])
    with gzip.open(paths[2], "wb") as f:
        f.write((SAMPLE_DATA / "pulsar" / "pulsar_lz4.pcap").read_bytes())
    shutil.copy(SAMPLE_DATA / "kafka" / "zstd.pcap", paths[3])
    settings = _settings(tmp_path / "lake", split_size=900)
    todo = inputs.discover([str(p) for p in paths]).inputs
    psplits, _ = inputs.plan(todo, settings.split_size, 2)
    assert len(pipeline.pack_splits(psplits, inputs.effective_split_size(todo, 900, 2))) > 4
    summary = pipeline.ingest([str(p) for p in paths], settings, spark=spark)
    assert summary.partial == [] and summary.unreadable == []
    got, local = _all_rows(tmp_path / "lake"), decode_files([str(p) for p in paths], settings)
    assert {r["protocol"] for r in got["commands"]} >= {"iggy", "kafka", "pulsar"}
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(local[t]), t
    # frame numbers reach the tables, numbered across the splits as tshark numbers the files
    assert all(r["first_frame"] and r["last_frame"] for r in got["commands"] + got["streams"])
    frames = {
        f"{r['conn_id']}|{r['direction']}|{r['stream_offset']}": [r["first_frame"], r["last_frame"]]
        for r in got["commands"]
    }
    streams = {r["conn_id"]: [r["first_frame"], r["last_frame"]] for r in got["streams"]}
    answers = json.loads(RECORDED.read_text())
    for name in ("sample_data/public/iggy-rs.pcapng", "tests/data/captures/ndpi/kafka.pcapng"):
        assert {k: frames[k] for k in answers[name]["commands"]} == answers[name]["commands"]
        assert {k: streams[k] for k in answers[name]["streams"]} == answers[name]["streams"]


def test_tiny_splits_give_identical_tables(spark, tmp_path):
    """The capture whole is one task (read, sort and decode without a shuffle); cut into
    900-byte splits it is many read tasks and a shuffle, of connection runs (packetruns) or of
    one row per packet (spark.packet_runs = false). The tables are the same."""
    cap = tmp_path / "syn.pcap"
    info = write_capture(str(cap), n_conns=25, exchanges=8)
    whole = _settings(tmp_path / "a")
    split = _settings(tmp_path / "b", split_size=900)
    per_packet = Settings.load(
        overrides={
            "lake": {"path": str(tmp_path / "c")},
            "spark": {"shuffle_partitions": 4, "packet_runs": False},
            "capture": {"split_size": 900},
        }
    )
    assert split.raw["spark"]["packet_runs"] is True  # the default
    s1 = pipeline.ingest([str(cap)], whole, spark=spark)
    todo = inputs.discover([str(cap)]).inputs
    for size, tasks in ((whole.split_size, 1), (900, 2)):
        target = inputs.effective_split_size(todo, size, 2)
        assert min(len(pipeline.pack_splits(inputs.plan(todo, size, 2)[0], target)), 2) == tasks
    s2 = pipeline.ingest([str(cap)], split, spark=spark)
    s3 = pipeline.ingest([str(cap)], per_packet, spark=spark)
    assert s1.packets == s2.packets == s3.packets == info["packets"]
    a, b, c = _all_rows(tmp_path / "a"), _all_rows(tmp_path / "b"), _all_rows(tmp_path / "c")
    assert len(a["streams"]) == 25
    for t in tables.DECODED_TABLES:
        assert normalized(a[t]) == normalized(b[t]) == normalized(c[t]), t
    by_port = {r["client_port"]: r for r in a["streams"]}
    for c in info["connections"]:
        r = by_port[c["client_port"]]
        assert (r["c2s_bytes"], r["s2c_bytes"], r["c2s_packets"] + r["s2c_packets"]) == (
            c["c2s_bytes"],
            c["s2c_bytes"],
            c["packets"],
        )


@pytest.mark.parametrize(
    "name,steps", [("kafka/txn.pcap", [(86, 0.003)]), ("pulsar/pulsar_none.pcap", [(45, 3), (90, 3)])]
)
def test_a_capture_whose_clock_stepped_back_gives_the_same_tables_in_any_split(spark, tmp_path, name, steps):
    """A capture whose clock stepped back 3 ms (or twice 3 s) while it ran, decoded whole in one
    task, and cut into 900-byte splits through the shuffle as runs and as one row per packet:
    each read task orders its split's packets alone, the decode raises those after a split's
    start (capture.SplitOrder). The tables are the Spark-free decode's of the whole file, whose
    rows are the capture's without the steps (tests/unit/test_clock_steps.py)."""
    cap = SAMPLE_DATA / name
    for k, (first, seconds) in enumerate(steps):
        cap = replay.stepped_back(cap, tmp_path / f"stepped{k}.pcap", first, seconds)
    want = decode_files([str(cap)])
    for how, over in (
        ("whole", {}),
        ("runs", {"capture": {"split_size": 900}}),
        (
            "per-packet",
            {"capture": {"split_size": 900}, "spark": {"shuffle_partitions": 4, "packet_runs": False}},
        ),
    ):
        lake = tmp_path / how
        settings = Settings.load(
            overrides={"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}, **over}
        )
        assert pipeline.ingest([str(cap)], settings, spark=spark).errors == []
        got = _all_rows(lake)
        for t in tables.DECODED_TABLES:
            assert normalized(got[t]) == normalized(want[t]), (how, t)
    assert len(want["commands"]) == 105


def test_a_far_step_back_where_a_split_begins_is_counted(spark, tmp_path):
    """A step back of 6 s at the first record of a split: no read task sees it (the split's
    order starts there), and the summary said nothing (a user trial); SplitOrder counts it."""
    src = SAMPLE_DATA / "kafka" / "none.pcap"
    cap = replay.stepped_back(src, tmp_path / "stepped.pcap", 48, 6.0)
    head, recs = replay.records(cap)
    at = len(head) + sum(map(len, recs[:48]))  # the stepped record's offset: a split starts there
    said = {}
    for how, size in (("one split", 1 << 20), ("split at the step", at)):
        settings = Settings.load(
            overrides={"lake": {"path": str(tmp_path / how)}, "capture": {"split_size": size}}
        )
        summary = pipeline.ingest([str(cap)], settings, spark=spark)
        said[how] = [line for line in summary.lines() if "clock steps back" in line]
    assert (
        said["one split"]
        == said["split at the step"]
        == [
            f"warning: {cap}: 1 record(s) where the capture's clock steps back more than 5 s: the packets "
            "after each keep the file's order where no other file has records at those times, else sort "
            "by their time"
        ]
    )


def test_run_killed_before_commit_leaves_tables_unchanged(spark, tmp_path):
    lake = tmp_path / "lake"
    cap1, cap2 = tmp_path / "one.pcap", tmp_path / "two.pcap"
    write_capture(str(cap1), n_conns=3, exchanges=2)
    write_capture(str(cap2), n_conns=4, exchanges=2, server_port=7001, start_ns=1_700_000_100_000_000_000)
    pipeline.ingest([str(cap1)], _settings(lake), spark=spark)
    before = _all_rows(lake)
    versions = {i.name: i.version for i in Lake(lake).info()}
    # a separate process that dies (SIGKILL) at its first Delta commit
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from deltalake import DeltaTable
        DeltaTable.create_write_transaction = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        from brokerscope.config import Settings
        from brokerscope import pipeline
        s = Settings.load(overrides={{"lake": {{"path": {str(lake)!r}}}, "spark": {{"master": "local[1]"}}}})
        pipeline.ingest([{str(cap1)!r}, {str(cap2)!r}], s)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert _all_rows(lake) == before
    assert {i.name: i.version for i in Lake(lake).info()} == versions
    # and the next run completes normally over the leftovers
    pipeline.ingest([str(cap1), str(cap2)], _settings(lake), spark=spark)
    assert len(delta_rs_rows(str(lake / "streams"))) == 7


def test_delta_spark_writer_path_gives_the_same_rows(spark, tmp_path, monkeypatch):
    """The DataFrame path used with delta-spark's writer (its jars are not on this classpath):
    everything up to the `format("delta")` save is real, and gives exactly the embedded rows."""
    written: dict[str, list[dict]] = {}

    def save(self, table, df, replace_where):
        assert replace_where.startswith("capture_id IN (")
        written[table] = [r.asDict(recursive=True) for r in df.collect()]

    monkeypatch.setattr(Lake, "resolve_writer", lambda self, spark: "spark")
    monkeypatch.setattr(Lake, "_save_delta", save)
    inputs_ = [str(SAMPLE_DATA / "kafka"), str(SAMPLE_DATA / "tubemq")]
    settings = _settings(tmp_path / "lake")
    summary = pipeline.ingest(inputs_, settings, spark=spark)
    assert summary.writer == "spark"
    local = decode_files(inputs_, settings)
    for t in tables.DECODED_TABLES:
        assert normalized(written[t]) == normalized(local[t]), t
    assert any(r["topic_id"] for r in written["messages"])  # names resolved by topics.name_topics_df


def test_tubemq_schema_file_reaches_the_decode_tasks(spark, tmp_path):
    """`[protocols.tubemq] schema_file` is read on the driver and used in every Spark task: the
    V2 consumer calls in a capture are decoded by the user's messages (else by the built-in ones)."""
    pytest.importorskip("grpc_tools")
    from brokerscope.protocols.schema import MessagePool, load_descriptor_set
    from tests.unit.tubemq.kit import request, response
    from tests.unit.tubemq.test_tubemq_schema import STANDIN

    pool = MessagePool.from_bytes(load_descriptor_set(STANDIN))

    def payloads(conn: int, i: int) -> tuple[bytes, bytes]:
        name = ("RegisterRequestC2MV2", "HeartRequestC2MV2", "GetPartMetaRequestC2M")[i]
        rsp = ("RegisterResponseM2CV2", "HeartResponseM2CV2", "GetPartMetaResponseM2C")[i]
        req = pool.get(name)(clientId=f"cb-{conn}", groupName="grp")
        return request(i + 1, 1, 20 + i, req), response(i + 1, 20 + i, pool.get(rsp)(errCode=200))

    cap = tmp_path / "v2.pcap"
    write_capture(str(cap), n_conns=6, exchanges=3, payloads=payloads, server_port=8715)
    conf = tmp_path / "b.toml"
    conf.write_text(
        f'[lake]\npath = "{tmp_path / "lake"}"\n[spark]\nshuffle_partitions = 4\n'
        f'[protocols.tubemq]\nschema_file = "{STANDIN}"\n'
    )
    summary = pipeline.ingest([str(cap)], Settings.load(conf), spark=spark)
    assert summary.errors == []
    cmds = delta_rs_rows(str(tmp_path / "lake" / "commands"))
    assert len(cmds) == 36 and all(r["decode_status"] == "ok" for r in cmds)
    reqs = [r for r in cmds if r["direction"] == "c2s"]
    assert sorted(r["client_id"] for r in reqs) == sorted(f"cb-{c}" for c in range(6) for _ in range(3))
    assert all(json.loads(r["details"])["request"]["schema"] == "v2_standin.proto" for r in reqs)
    # the same capture without the schema: brokerscope's own V2 messages, no schema named
    plain = decode_files([str(cap)], _settings(tmp_path / "unused"))["commands"]
    assert len(plain) == 36 and all(r["decode_status"] == "ok" for r in plain)
    plain_reqs = [r for r in plain if r["direction"] == "c2s"]
    assert sorted(r["client_id"] for r in plain_reqs) == sorted(r["client_id"] for r in reqs)
    assert all("schema" not in json.loads(r["details"])["request"] for r in plain_reqs)


@pytest.mark.spark
def test_local_jvm_runs_with_c1_jit_and_the_log_config(spark):
    """make_spark in local mode starts the one JVM with C1 JIT only (pipeline.LOCAL_JIT) and
    brokerscope's log4j configuration: the running JVM's own arguments say so."""
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert pipeline.LOCAL_JIT in args
    assert any(a.startswith("-Dlog4j2.configurationFile=file:") for a in args)


def _failing_task(batches):
    import errno

    for _ in batches:
        raise OSError(errno.ENOSPC, "No space left on device", "/lake/messages/part-0.parquet")
    yield from ()


@pytest.mark.spark
def test_a_failed_task_is_told_once_by_the_driver_not_by_spark_s_log(spark, capfd, monkeypatch):
    """A task that fails (here: a full disk) was logged by the executor (the worker's traceback),
    by the scheduler (the same again) and as an aborted job, about 80 lines before brokerscope's
    one line (found by a user trial). The log configuration leaves that to the driver's error,
    which carries the worker's traceback (shown whole for a bug) and which cli.no_room reads, also
    once the JVM is gone (its first run on a machine stops it to save the class archive)."""
    from pyspark.errors.exceptions.captured import PythonException

    from brokerscope import cli

    capfd.readouterr()
    df = spark.range(2).mapInArrow(_failing_task, "id long")
    with pytest.raises(PythonException) as caught:
        df.collect()
    err = capfd.readouterr().err
    assert "Exception in task" not in err and "Lost task" not in err and "aborting job" not in err
    assert "OSError: [Errno 28] No space left on device" in str(caught.value)
    assert cli.no_room(caught.value) == "no space left on device"
    from pyspark import SparkContext

    with monkeypatch.context() as m:  # the JVM gone: str() of the error fails
        m.setattr(SparkContext, "_gateway", None)
        m.setattr(SparkContext, "_jvm", None)
        with pytest.raises(AssertionError):
            str(caught.value)
        assert cli.no_room(caught.value) == "no space left on device"


@pytest.mark.spark
def test_python_workers_import_the_installed_pyspark_not_the_zip(spark):
    """Spark puts its bundled pyspark.zip first on the workers' path; the daemon make_spark names
    (brokerscope.sparkdaemon) puts the installed PySpark, which has bytecode, ahead of it."""
    import pyarrow as pa
    import pyspark

    def where(batches):
        import sys

        import pyspark as p

        for _ in batches:
            pass
        main = getattr(sys.modules["__main__"], "__spec__", None)  # the daemon, run with -m
        yield pa.RecordBatch.from_pydict({"file": [p.__file__], "daemon": [main and main.name]})

    row = spark.range(1, numPartitions=1).mapInArrow(where, "file string, daemon string").collect()[0]
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "brokerscope.sparkdaemon"
    assert ".zip" not in row["file"], row["file"]
    assert row["file"] == pyspark.__file__
    assert row["daemon"] == "brokerscope.sparkdaemon"


@pytest.mark.spark
def test_session_arrow_batches_end_at_batch_bytes(spark):
    """The decode stage's input batches (Spark -> Python) are bounded in bytes like the reader's."""
    assert spark.conf.get("spark.sql.execution.arrow.maxBytesPerBatch") == str(Settings.load().batch_bytes)


@pytest.mark.slow
def test_filtered_ingest_keeps_only_matching_connections_and_records_the_filter(spark, tmp_path):
    """--host/--tcp-port/--since: the tables hold only the matching connections, on the one-task
    path and through the shuffle alike, equal to decode_files with the same filter; `inputs`
    records the filter and what it dropped; --skip-ingested skips only an input ingested with the
    same filter."""
    ndpi = str(ROOT / "tests" / "data" / "captures" / "ndpi" / "kafka.pcapng")
    none = str(SAMPLE_DATA / "kafka" / "none.pcap")  # 127.0.0.1 only: all 120 packets dropped
    copy = tmp_path / "copy-of-none.pcap"  # the same content under another path: one input
    copy.write_bytes((SAMPLE_DATA / "kafka" / "none.pcap").read_bytes())
    paths = [ndpi, none, str(copy)]
    flt = {"hosts": ["172.16.0.0/12"], "ports": ["9092"]}
    one = Settings.load(overrides={"lake": {"path": str(tmp_path / "one")}, "filter": flt})
    many = Settings.load(
        overrides={"lake": {"path": str(tmp_path / "many")}, "capture": {"split_size": 900}, "filter": flt}
    )
    todo = inputs.discover(paths).inputs

    def tasks(size: int) -> int:
        return len(
            pipeline.pack_splits(inputs.plan(todo, size, 2)[0], inputs.effective_split_size(todo, size, 2))
        )

    assert tasks(one.split_size) == 1 and tasks(900) > 1  # the one-task path, then the shuffle
    local = decode_files(paths, one)
    for settings, lake in ((one, tmp_path / "one"), (many, tmp_path / "many")):
        summary = pipeline.ingest(paths, settings, spark=spark)
        # 22 of ndpi's 41 packets are between 172.16.17.101 and 172.30.0.237:9092 (tshark)
        assert (summary.packets, summary.tcp_segments, summary.filtered) == (161, 22, 139)
        assert "filter host=172.16.0.0/12;port=9092: 139 of 161 packets dropped" in "\n".join(summary.lines())
        got = _all_rows(lake)
        for t in tables.DECODED_TABLES:
            assert normalized(got[t]) == normalized(local[t]), t
        assert len(got["streams"]) == 8 and got["commands"]
        assert all(r["server_ip"] == "172.30.0.237" and r["server_port"] == 9092 for r in got["streams"])
        assert {r["client_ip"] for r in got["commands"]} == {"172.16.17.101"}
        rows = {r["path"]: r for r in delta_rs_rows(str(lake / "inputs"))}
        assert {p: (r["filter"], r["filtered"], r["packets"]) for p, r in rows.items()} == {
            os.path.realpath(ndpi): ("host=172.16.0.0/12;port=9092", 19, 41),
            os.path.realpath(none): ("host=172.16.0.0/12;port=9092", 120, 120),
            os.path.realpath(copy): ("host=172.16.0.0/12;port=9092", 120, 120),
        }
    # the same filter: nothing to do; another filter (a time window that cuts the 127.0.0.1
    # connection after its handshake and first request): decoded again, its rows replaced
    again = pipeline.ingest(paths, one, spark=spark, skip_ingested=True)
    assert again.files == 0 and len(again.skipped_already_ingested) == 2
    window = Settings.load(
        overrides={"lake": {"path": str(tmp_path / "one")}, "filter": {"since": "1703132756.329655"}}
    )
    cut = pipeline.ingest([ndpi], window, spark=spark, skip_ingested=True)
    assert cut.files == 1 and cut.filtered == 41 - 14
    streams = delta_rs_rows(str(tmp_path / "one" / "streams"))
    assert [(r["client_port"], r["midstream"], r["syn_seen"]) for r in streams] == [(46136, True, False)]
    cmds = delta_rs_rows(str(tmp_path / "one" / "commands"))
    # the response to the request before the window is marked, the rest decodes
    assert sorted(r["decode_status"] for r in cmds) == ["ok"] * 6 + ["request_missing"]
    assert normalized(cmds) == normalized(decode_files([ndpi], window)["commands"])
    rows = {
        r["path"]: r for r in delta_rs_rows(str(tmp_path / "one" / "inputs")) if r["status"] != "replaced"
    }
    assert rows[os.path.realpath(ndpi)]["filter"] == "since=2023-12-21T04:25:56.329655Z"


def test_decode_tasks_log_their_work_when_asked(tmp_path):
    """`brokerscope ingest` with BROKERSCOPE_TASK_LOG (bench/versus_tshark.py): one line per
    decode task of the shuffle, the packets and payload bytes summing to the capture's, every
    connection in one task."""
    cap = tmp_path / "syn.pcap"
    info = write_capture(str(cap), n_conns=12, exchanges=4)
    conf = tmp_path / "b.toml"
    conf.write_text("[capture]\nsplit_size = 900\n[spark]\nshuffle_partitions = 4\n")
    log = tmp_path / "tasks.jsonl"
    exe = [sys.executable, "-m", "brokerscope.cli"]
    cmd = [
        *exe,
        "ingest",
        str(cap),
        "--lake",
        str(tmp_path / "lake"),
        "--conf",
        str(conf),
        "--master",
        "local[2]",
    ]
    env = {**os.environ, pipeline.TASK_LOG_ENV: str(log)}
    proc = subprocess.run([*cmd, "-q"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 4
    assert all(x["cpu_s"] > 0 and x["wall_s"] >= 0 for x in lines)
    # each connection in one task; the read tasks' counter rows (null 4-tuple) in one more
    assert sum(x["connections"] for x in lines) == 12 + 1
    assert sum(x["payload_bytes"] for x in lines) == sum(
        c["c2s_bytes"] + c["s2c_bytes"] for c in info["connections"]
    )


def test_a_damaged_segment_counts_the_bytes_it_lost(spark, tmp_path):
    """inputs.damaged_bytes of a Kafka segment with a torn tail, and of one with a batch whose
    checksum fails, were 0 (found by a user trial; README: how many bytes were skipped): the
    bytes of the log in its problem rows."""
    import shutil

    src = SAMPLE_DATA / "kafka" / "segments" / "bs-segment-0"
    log = (src / "00000000000000000000.log").read_bytes()
    torn, flipped = tmp_path / "torn" / "bs-segment-0", tmp_path / "flipped" / "bs-segment-0"
    for d in (torn, flipped):
        shutil.copytree(src, d)
    (torn / "00000000000000000000.log").write_bytes(log[:-37])
    bad = bytearray(log)
    bad[900] ^= 0xFF  # inside a batch after the first
    (flipped / "00000000000000000000.log").write_bytes(bytes(bad))
    lake = tmp_path / "lake"
    pipeline.ingest([str(torn.parent), str(flipped.parent)], _settings(lake), spark=spark)
    rows = {r["path"].split("/")[-3]: r for r in delta_rs_rows(str(lake / "inputs"))}
    problems = {
        r["capture_id"]: r["size"]
        for r in delta_rs_rows(str(lake / "commands"))
        if r["command"] == "LogSegment" and r["decode_status"] != "ok"
    }
    for name in ("torn", "flipped"):
        r = rows[name]
        assert r["status"] == "partial" and r["damaged_bytes"] == problems[r["capture_id"]] > 0, r
    assert rows["torn"]["damaged_bytes"] == 126  # the torn batch's bytes present (163 needed)


def _snapped(src: Path, dst: Path, snaplen: int) -> int:
    """A pcap of `src` cut as `tcpdump -s snaplen` would have captured it; the records it cut."""
    data = src.read_bytes()
    head, pos, cut = bytearray(data[:24]), 24, 0
    struct.pack_into("<I", head, 16, snaplen)  # the header's snap length (little-endian pcap)
    out = [bytes(head)]
    while pos + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from("<IIII", data, pos)
        keep = min(incl, snaplen)
        cut += keep < incl
        out.append(struct.pack("<IIII", sec, frac, keep, orig) + data[pos + 16 : pos + 16 + keep])
        pos += 16 + incl
    dst.write_bytes(b"".join(out))
    return cut


@pytest.mark.spark
def test_a_capture_cut_by_its_snap_length_and_traffic_no_decoder_knows_are_warned_of(spark, tmp_path):
    """Found by a user trial: `editcap -s 120` of a Kafka capture on a port not in [ports] gave no
    commands rows at all (its first bytes cut, nothing recognised it) and 'exit 0: every input read
    cleanly'. The summary now says how many packets the snap length cut and how many connections
    carried data no decoder recognised, with the remedy; the exit code stays 0 (the file is whole).
    At 120 bytes Kafka is recognised now (a first request cut short, answered by Kafka's response
    to it: its 67 commands rows); at 80 nothing is."""
    from brokerscope.streams import decode_files

    s120 = tmp_path / "none_s120.pcap"
    assert _snapped(SAMPLE_DATA / "kafka" / "none.pcap", s120, 120) > 0
    got = decode_files([str(s120)])
    assert {s["protocol"] for s in got["streams"]} == {"kafka"} and len(got["commands"]) == 67
    cap = tmp_path / "none_s80.pcap"
    assert _snapped(SAMPLE_DATA / "kafka" / "none.pcap", cap, 80) > 0
    settings = Settings.load(overrides={"lake": {"path": str(tmp_path / "lake")}})
    summary = pipeline.ingest([str(cap)], settings, spark=spark)
    streams = Lake(tmp_path / "lake").read_arrow("streams").to_pylist()
    cut = sum(s["snap_truncated_packets"] for s in streams)
    unknown = sum(
        s["protocol"] == "unknown" and s["c2s_bytes"] + s["s2c_bytes"] > 0 and s["snap_truncated_packets"] > 0
        for s in streams
    )
    (cid,) = {s["capture_id"] for s in streams}
    assert cut > 0 and unknown > 0
    assert summary.seen == {"snap_truncated": {cid: cut}, "unrecognised": {cid: unknown}}
    lines = summary.lines()
    assert (
        f"warning: {cap}: {cut:,} packet(s) cut short by the capture's snap length (tcpdump -s): "
        in "\n".join(lines)
    )
    assert any(
        ln.startswith(f"warning: {cap}: {unknown} connection")
        and "first bytes the capture missed or cut" in ln
        and "--port PROTO=PORT" in ln
        for ln in lines
    )
    assert summary.exit_code() == 0 and lines[-1] == "exit 0: every input read cleanly (see the warnings)"


def test_a_new_copy_of_an_ingested_capture_beside_a_new_capture(spark, tmp_path):
    """--skip-ingested over a directory where a copy of an ingested capture (its name sorting
    after the original's) arrived with a new capture: the new one is decoded, the copy recorded
    as the capture it repeats (was: KeyError in _identified, every night after)."""
    d = tmp_path / "in"
    d.mkdir()
    kafka = Path(SAMPLE_DATA) / "kafka"
    shutil.copy2(kafka / "none.pcap", d / "a.pcap")
    lake = tmp_path / "lake"
    first = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    shutil.copy2(d / "a.pcap", d / "b.pcap")  # the copy
    shutil.copy2(kafka / "lz4.pcap", d / "c.pcap")  # something new
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert summary.files == 1 and summary.exit_code() == 0
    assert [e for e in summary.capture_errors if "same content" in e] == [
        f"{d / 'b.pcap'}: same content as {d / 'a.pcap'}, ingested once"
    ]
    inputs = {Path(r["path"]).name: r for r in delta_rs_rows(str(lake / "inputs"))}
    assert sorted(inputs) == ["a.pcap", "b.pcap", "c.pcap"]
    assert inputs["b.pcap"]["capture_id"] == inputs["a.pcap"]["capture_id"] is not None
    assert inputs["a.pcap"]["run_id"] == first.run_id
    assert inputs["b.pcap"]["status"] == "ok" and inputs["b.pcap"]["run_id"] == summary.run_id
    messages = delta_rs_rows(str(lake / "messages"))
    assert len({r["capture_id"] for r in messages}) == 2  # a's rows once, c's
    again = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert again.files == 0 and not [e for e in again.capture_errors if "same content" in e]


def test_a_segment_whose_only_batch_fails_its_checksum_is_partial_not_unreadable(spark, tmp_path):
    """Its records are kept, flagged (checksum_ok false): was 'nothing readable', exit 4 (every
    row counted damaged), the summary counting each record as a damaged row (found by a user
    trial)."""
    from tests.support.kafka_segment import write_segment
    from tests.unit.kafka.test_kafka_segments import MSGS1, _batch

    b = bytearray(_batch(100, MSGS1))
    b[70] ^= 0x10  # inside the first record: the batch's CRC-32C fails
    write_segment(tmp_path / "in" / "orders-0", [bytes(b)], 100)
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(tmp_path / "in")], _settings(lake), spark=spark)
    assert summary.exit_code() == 3
    (row,) = [r for r in delta_rs_rows(str(lake / "inputs")) if r["path"].endswith(".log")]
    assert row["status"] == "partial"
    assert row["error"].startswith("1 damaged part, 2 flagged records: checksum_mismatch: ")
    msgs = delta_rs_rows(str(lake / "messages"))
    assert sorted(m["offset"] for m in msgs) == [100, 101] and not any(m["checksum_ok"] for m in msgs)


def test_an_iggy_batch_segment_with_a_damaged_batch_length_is_partial_with_the_rest_kept(spark, tmp_path):
    """One batch length of a VSR-generation segment overwritten (found by a user trial: 3 of 9
    batches kept): the batches after it are read, the damage is one malformed part, the segment
    partial, exit 3."""
    from tests.unit.iggy.test_iggy_segments import AT, NINE, SIZES, _set_length, part_dir, write_batches

    path, log = write_batches(part_dir(tmp_path / "in"), NINE, per_batch=2)
    path.write_bytes(_set_length(log, 3, 10**9))
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(tmp_path / "in")], _settings(lake, split_size=1500), spark=spark)
    assert summary.exit_code() == 3
    (row,) = [r for r in delta_rs_rows(str(lake / "inputs")) if r["path"].endswith(".log")]
    assert row["status"] == "partial" and row["damaged_bytes"] == SIZES[3]
    assert row["error"] == (
        f"1 damaged part: malformed: no batch at byte {AT[3]} (batch length 1000000000 does not fit "
        f"{len(log) - AT[3]} bytes): {SIZES[3]} bytes skipped to the next one, at byte {AT[4]}"
    )
    msgs = delta_rs_rows(str(lake / "messages"))
    assert sorted(m["offset"] for m in msgs) == [o for o in range(100, 118) if o not in (106, 107)]
