"""The `brokerscope` command and the nightly job, run in-process against a real Spark session."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sys

import pytest

from brokerscope import cli
from tests.conftest import CAPTURES, ROOT, SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows
from tests.support.synth import write_capture

pytestmark = pytest.mark.spark


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_ingest_reports_bad_inputs_and_keeps_the_rest(spark, tmp_path, capsys):
    good = tmp_path / "good.pcap"
    write_capture(str(good), n_conns=3, exchanges=2)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    text = tmp_path / "notes.txt"
    text.write_text("not a capture\n")
    missing = tmp_path / "missing.pcap"
    lake = tmp_path / "lake"
    rc, out, err = run(
        capsys, "ingest", str(good), str(empty), str(text), str(missing), "--lake", str(lake), "-q"
    )
    assert rc == 0
    lines = [ln for ln in err.splitlines() if ln.startswith("brokerscope: ")]
    assert len(lines) == 3
    assert any(str(empty) in ln and "empty" in ln for ln in lines)
    assert any(str(text) in ln and "not a capture" in ln for ln in lines)
    assert any(str(missing) in ln and "no such file" in ln for ln in lines)
    assert "1 file(s)" in out and "streams=3" in out
    assert len(delta_rs_rows(str(lake / "streams"))) == 3


def test_ingest_with_nothing_valid_fails_plainly(tmp_path, capsys):
    rc, out, err = run(capsys, "ingest", str(tmp_path / "nope.pcap"), "--lake", str(tmp_path / "lake"))
    assert rc == 2 and "nope.pcap: no such file or directory" in err


def test_sql_and_tables_formats(spark, tmp_path, capsys):
    lake = tmp_path / "lake"
    rc, _, _ = run(capsys, "ingest", str(CAPTURES / "ndpi" / "kafka.pcapng"), "--lake", str(lake), "-q")
    assert rc == 0
    q = "SELECT client_port, c2s_packets, s2c_packets FROM streams ORDER BY client_port"
    rc, out, _ = run(capsys, "sql", q, "--lake", str(lake), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and len(rows) == 9
    assert {"client_port": "46136", "c2s_packets": "12", "s2c_packets": "7"} in rows
    rc, out, _ = run(capsys, "sql", q, "--lake", str(lake), "--format", "json", "--limit", "2")
    recs = [json.loads(ln) for ln in out.splitlines()]
    assert len(recs) == 2 and all(set(r) == {"client_port", "c2s_packets", "s2c_packets"} for r in recs)
    rc, out, _ = run(capsys, "sql", "SELECT count(*) AS n FROM commands", "--lake", str(lake))
    assert rc == 0 and "(1 row)" in out
    rc, _, err = run(capsys, "sql", "SELECT nope FROM streams", "--lake", str(lake))
    assert rc == 2 and err.startswith("brokerscope: query failed:")
    rc, out, _ = run(capsys, "tables", "--lake", str(lake), "--format", "csv")
    info = {r["table"]: r for r in csv.DictReader(io.StringIO(out))}
    assert set(info) == {"commands", "messages", "latencies", "acks", "streams", "inputs"}
    assert info["streams"]["rows"] == "9" and info["inputs"]["rows"] == "1"


def test_demo_on_a_directory(spark, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(CAPTURES / "iggy" / "rs.pcapng", data)
    rc, out, _ = run(capsys, "demo", "--sample-data", str(data), "--lake", str(tmp_path / "lake"), "-q")
    assert rc == 0
    assert "example query" in out and "(3 rows)" in out
    assert "streams=3" in out


def test_nightly_job_never_ingests_a_file_twice(spark, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "jobs"))
    import nightly_ingest

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write_capture(str(inbox / "a.pcap"), n_conns=2, exchanges=2)
    lake = tmp_path / "lake"
    args = ["--input", str(inbox), "--lake", str(lake)]
    assert nightly_ingest.main(args) == 0
    assert len(delta_rs_rows(str(lake / "streams"))) == 2
    assert nightly_ingest.main(args) == 0
    assert "nothing to ingest" in capsys.readouterr().out
    write_capture(str(inbox / "b.pcap"), n_conns=3, exchanges=2, server_port=7001)
    assert nightly_ingest.main(args) == 0
    out = capsys.readouterr().out
    assert "1 file(s)" in out and "skipped 1 file(s)" in out
    assert len(delta_rs_rows(str(lake / "streams"))) == 5
    assert sorted(r["path"].rsplit("/", 1)[1] for r in delta_rs_rows(str(lake / "inputs"))) == [
        "a.pcap",
        "b.pcap",
    ]


def test_sample_data_exists_with_provenance():
    assert (SAMPLE_DATA / "README.md").is_file()
