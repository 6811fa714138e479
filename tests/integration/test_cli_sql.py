"""`brokerscope sql` (-f, standard input, --out) and `brokerscope shell`, in process, on the
sample-data lake and one Spark session; and the checks that need no Spark at all."""

from __future__ import annotations

import base64
import io
import json
import shutil
import signal
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brokerscope import cli, report
from brokerscope.lake import Lake
from tests.integration.test_cli import _no_spark, run

# the longest values first: the 314-byte value is among them
LONG_VALUES = (
    "SELECT value, length(value) AS n, headers, ts FROM messages "
    "WHERE length(value) > 32 ORDER BY n DESC, ts, capture_id LIMIT 5"
)


def stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))


@pytest.mark.spark
def test_a_file_of_two_statements_prints_both_results_whole(spark, sample_lake, tmp_path, capsys):
    script = tmp_path / "q.sql"
    script.write_text(
        "-- protocols; then the longest values\n"
        "SELECT protocol, count(*) AS n FROM streams GROUP BY protocol ORDER BY protocol;\n"
        f"{LONG_VALUES};\n"
    )
    rc, out, err = run(capsys, "sql", "-f", str(script), "--lake", sample_lake, "--format", "jsonl")
    assert rc == 0, err
    first, second = out.split("\n\n")
    protocols = [json.loads(ln)["protocol"] for ln in first.splitlines()]
    assert {"kafka", "pulsar", "iggy", "tubemq"} <= set(protocols)
    rows = [json.loads(ln) for ln in second.splitlines()]
    assert len(rows) == 5 and rows[0]["n"] > 32
    for r in rows:  # every byte, not 32 and "..."
        assert len(base64.b64decode(r["value"])) == r["n"]
        assert r["ts"].endswith("Z") and len(r["ts"]) == len("2026-01-01T00:00:00.000000Z")
        assert r["headers"] is None or isinstance(r["headers"], list)


@pytest.mark.spark
def test_sql_from_standard_input(spark, sample_lake, monkeypatch, capsys):
    stdin(monkeypatch, "SELECT 'a;b' AS s; SELECT count(*) AS n FROM inputs")
    rc, out, _ = run(capsys, "sql", "--lake", sample_lake, "--format", "csv")
    assert rc == 0 and out.startswith("s\na;b\n\nn\n")
    stdin(monkeypatch, "SELECT unhex('00ff') AS b")
    rc, out, _ = run(capsys, "sql", "-", "--lake", sample_lake, "--format", "json", "--binary", "hex")
    assert rc == 0 and json.loads(out) == [{"b": "00ff"}]


@pytest.mark.spark
def test_out_parquet_reads_back_with_the_lake_types(spark, sample_lake, tmp_path, capsys):
    out = tmp_path / "r.parquet"
    q = "SELECT capture_id, ts_ns, value, headers, ts FROM messages WHERE value IS NOT NULL ORDER BY ts_ns"
    rc, stdout, err = run(capsys, "sql", q, "--lake", sample_lake, "--format", "parquet", "--out", str(out))
    assert rc == 0 and stdout == "" and f"to {out}" in err
    back = pq.read_table(out)
    assert back.schema.field("value").type == pa.binary()
    assert back.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert pa.types.is_list(back.schema.field("headers").type)
    lake = Lake(sample_lake).read_arrow("messages").filter(pa.compute.is_valid(pa.compute.field("value")))
    key = ["capture_id", "ts_ns", "value", "ts"]
    assert sorted(back.select(key).to_pylist(), key=str) == sorted(lake.select(key).to_pylist(), key=str)
    # two results and --out: numbered files
    rc, _, err = run(
        capsys,
        "sql",
        "SELECT 1 AS a; SELECT 2 AS b",
        "--lake",
        sample_lake,
        "--out",
        str(tmp_path / "x.csv"),
        "--format",
        "csv",
    )
    assert rc == 0
    assert (tmp_path / "x-1.csv").read_text() == "a\n1\n" and (tmp_path / "x-2.csv").read_text() == "b\n2\n"


@pytest.mark.spark
def test_out_that_cannot_be_written_leaves_the_file_as_it_was(spark, sample_lake, tmp_path, capsys):
    """A result that cannot be written (its fourth row a string Spark made of the byte C3, no
    UTF-8) is one line naming the column, and leaves --out as it was, and no part file; the code
    before export.whole_file had truncated it to the header and three rows."""
    out = tmp_path / "latest.csv"
    out.write_text("yesterday's result\n")
    q = "SELECT id, CASE WHEN id = 3 THEN CAST(unhex('C3') AS STRING) ELSE 'ok' END AS s FROM range(5)"
    rc, stdout, err = run(capsys, "sql", q, "--lake", sample_lake, "--format", "csv", "--out", str(out))
    assert (rc, stdout) == (report.EXIT_USAGE, "") and "wrote" not in err
    assert err.startswith("brokerscope: column s: text that is not UTF-8") and len(err.splitlines()) == 1
    assert out.read_text() == "yesterday's result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.csv"]
    # through a link, the file it names is replaced and the link stays
    (tmp_path / "r").mkdir()
    out.unlink()
    out.symlink_to(tmp_path / "r" / "2026-11-26.csv")
    rc, _, err = run(
        capsys, "sql", "SELECT 7 AS a", "--lake", sample_lake, "--format", "csv", "--out", str(out)
    )
    assert rc == 0 and out.is_symlink() and (tmp_path / "r" / "2026-11-26.csv").read_text() == "a\n7\n"


@pytest.mark.spark
def test_a_failing_statement_names_its_line(spark, sample_lake, capsys):
    rc, out, err = run(capsys, "sql", "SELECT 1 AS a;\nSELECT nope FROM streams", "--lake", sample_lake)
    assert rc == report.EXIT_USAGE and "(1 row)" in out
    assert err.startswith("brokerscope: query failed (statement at line 2): ") and len(err.splitlines()) == 1


@pytest.mark.spark
def test_a_failing_statement_of_a_file_names_the_file_and_its_line(spark, sample_lake, tmp_path, capsys):
    """`sql -f FILE`: the failure named the statement's line but not the file (found by a user
    trial); now FILE:LINE, as editors and compilers write it."""
    sql = tmp_path / "nightly.sql"
    sql.write_text("SELECT 1 AS a;\n\n-- the per-topic counts\nSELECT nope FROM streams;\n")
    rc, _, err = run(capsys, "sql", "-f", str(sql), "--lake", sample_lake)
    assert rc == report.EXIT_USAGE
    assert err.startswith(f"brokerscope: query failed ({sql}:4): ") and len(err.splitlines()) == 1, err
    # a result its format cannot hold (a column name twice in JSON) names its place too (a user trial)
    sql.write_text(
        "SELECT 1 AS a;\n\nSELECT c.conn_id, l.conn_id FROM commands c JOIN latencies l USING (conn_id);\n"
    )
    rc, _, err = run(capsys, "sql", "-f", str(sql), "--lake", sample_lake, "--format", "jsonl")
    assert rc == report.EXIT_USAGE
    assert err.startswith(
        f"brokerscope: cannot write the result ({sql}:3): column name conn_id given twice"
    ), err


@pytest.mark.spark
def test_shell_driven_through_standard_input(spark, sample_lake, monkeypatch, capsys):
    stdin(
        monkeypatch,
        "-- a note, then commands\n"
        "\\tables\n"
        "\\d latencies\n"
        "/* a comment:\n\\q inside it is no command */ SELECT count(*) AS n\n  FROM streams;\n"
        "SELECT count(*) AS n\n  FROM streams;\n"
        "SELECT nope FROM streams;\n"
        "\\format jsonl\n"
        "\\nothing\n"
        "\\d nosuch\n"
        "SELECT unhex('00ff') AS b, 'x;y' AS s;\n"
        "SELECT CAST(unhex('C3') AS STRING) AS t;\n"  # no UTF-8: said, and the session goes on
        "SELECT * FROM streams WHERE;\n"  # cut short: said, not every row (Spark's alias)
        "SELECT * FROM comands;\n"  # found by a user trial: Spark's TABLE_OR_VIEW_NOT_FOUND
        "CREATE TEMP VIEW mine AS SELECT 3 AS three;\nSELECT * FROM mine;\nDROP VIEW mine;\n"
        "SELECT 2 AS two\n",  # the last statement may lack its ;
    )
    rc, out, err = run(capsys, "shell", "--lake", sample_lake)
    assert rc == report.EXIT_USAGE  # a statement failed and the input was no terminal
    errors = err.splitlines()
    assert len(errors) == 6 and errors[0].startswith("error (line 9): ") and "nope" in errors[0]
    assert errors[4] == "error (line 15): the statement ends with WHERE: something must follow it"
    assert errors[5].startswith(
        f"error (line 16): no table `comands` in the lake at {sample_lake} (its tables: "
    )
    assert errors[1] == "error (line 11): unknown command \\nothing (\\? lists them)"
    # found by a user trial: Spark's TABLE_OR_VIEW_NOT_FOUND text; now as `sql` says it
    assert errors[2].startswith(
        f"error (line 12): no table `nosuch` in the lake at {sample_lake} (its tables: "
    )
    assert "streams" in errors[2] and "TABLE_OR_VIEW" not in errors[2]
    assert errors[3].startswith("error (line 14): column t: text that is not UTF-8")
    assert "streams" in out and "inputs" in out and "delta_version" in out  # \tables
    assert "latency_us" in out and "double" in out  # \d
    n = len(Lake(sample_lake).read_arrow("streams"))
    assert out.count(f"\n{n}\n(1 row)\n") == 2
    assert out.endswith(
        '{"b":"AP8=","s":"x;y"}\n{"three":3}\n{"two":2}\n'
    )  # a view of its own: made, read, dropped


def test_shell_goes_on_after_ctrl_c_and_stops_on_sigterm(spark, sample_lake, monkeypatch, capsys):
    """Ctrl-C cancels the statement running and the shell goes on; SIGTERM (Terminated, also a
    KeyboardInterrupt) ends it, exit 143, and leaves the signal handlers as they were."""
    from brokerscope import query

    real = query.fetch

    def fetch(session, text):
        if "'ctrl-c'" in text:
            raise KeyboardInterrupt
        if "'sigterm'" in text:
            raise report.Terminated
        return real(session, text)

    monkeypatch.setattr(query, "fetch", fetch)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stdin(monkeypatch, "SELECT 'ctrl-c';\nSELECT 1 AS one;\nSELECT 'sigterm';\nSELECT 2 AS two;\n")
    rc, out, err = run(capsys, "shell", "--lake", sample_lake)
    assert rc == report.EXIT_TERMINATED
    assert err.splitlines() == ["error: cancelled", "brokerscope: interrupted (SIGTERM)"]
    assert "one" in out and "two" not in out
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert spark.range(3).count() == 3  # the session main was called with is not stopped


def test_sql_cut_short_by_sigterm_is_an_interrupt_not_a_failed_query(spark, sample_lake, monkeypatch, capsys):
    """py4j's call cut short by SIGTERM (or Ctrl-C) fails as PySpark tidies up after it: that
    error had been reported as 'query failed', exit 2 (found by a user trial)."""
    from brokerscope import query

    def fetch(session, text, limit=None):
        try:
            raise report.Terminated
        except report.Terminated:
            raise RuntimeError("An error occurred while calling o206.getResult") from None

    def cut_short(session, text, limit=None):
        try:
            raise report.Terminated
        except report.Terminated:
            raise RuntimeError("An error occurred while calling o206.getResult")  # noqa: B904

    monkeypatch.setattr(query, "fetch", fetch)
    rc, out, err = run(capsys, "sql", "SELECT 1", "--lake", sample_lake)
    assert rc == report.EXIT_USAGE and "query failed" in err  # no interrupt behind it: a failure
    monkeypatch.setattr(query, "fetch", cut_short)
    rc, out, err = run(capsys, "sql", "SELECT 1", "--lake", sample_lake)
    assert rc == report.EXIT_TERMINATED
    assert err.strip() == "brokerscope: interrupted (SIGTERM)"


def test_limit_zero_gives_no_rows_and_a_negative_one_is_refused(spark, sample_lake, capsys):
    """--limit 0 printed every row (`if limit:`); a negative limit failed only in Spark."""
    rc, out, err = run(capsys, "sql", "SELECT 1 AS one FROM streams", "--lake", sample_lake, "--limit", "0")
    assert rc == 0, err
    assert out.strip().endswith("(0 rows)")
    with pytest.raises(SystemExit) as e:
        cli.main(["sql", "SELECT 1", "--lake", sample_lake, "--limit", "-1"])
    assert e.value.code == 2
    assert "a row count is 0 or more, not -1" in capsys.readouterr().err


def test_unknown_tables_and_bad_sql_fail_before_spark(tmp_path, monkeypatch, capsys):
    """A typo in a table name costs no JVM start: one line naming it, exit 2."""
    _no_spark(monkeypatch)
    lake = tmp_path / "lake"
    Lake(lake).ensure_tables()
    t0 = time.monotonic()
    rc, out, err = run(
        capsys,
        "sql",
        "SELECT 1 AS x;\nSELECT * FROM stream s JOIN acks a USING (conn_id)",
        "--lake",
        str(lake),
    )
    assert rc == report.EXIT_USAGE and out == ""
    assert (
        err
        == f"brokerscope: line 2: no table `stream` in the lake at {lake} (its tables: acks, commands, inputs, latencies, messages, streams)\n"
    )
    for argv, why in [
        (["sql", "SELECT 'open"], "line 1: a string opened with ' is not closed"),
        # found by a user trial: Spark read the WHERE as the table's alias and gave every row
        (
            ["sql", "SELECT * FROM commands WHERE"],
            "line 1: the statement ends with WHERE: something must follow it",
        ),
        (["sql", "SELECT 1;\nSELECT a,"], "line 2: the statement ends with ,: something must follow it"),
        # found by a user trial: DELETE was py4j's 'An error occurred while calling o51.sql', DROP
        # TABLE of a lake table (its view) printed nothing, exit 0
        (["sql", "DELETE FROM commands WHERE true"], "line 1: DELETE would change the lake: `sql` and the"),
        (["sql", "SELECT 1;\ndrop table if exists Commands"], "line 2: DROP would change the lake"),
        (["sql", "INSERT INTO acks SELECT * FROM acks"], "line 1: INSERT would change the lake"),
        (["sql", "-f", str(tmp_path / "none.sql")], "cannot read"),
        (["sql", "SELECT 1", "-f", str(tmp_path / "q.sql")], "not both"),
        (["sql", " ; -- nothing"], "no SQL statement given"),
        (["sql", "SELECT 1", "--format", "parquet"], "give --out FILE"),
    ]:
        rc, out, err = run(capsys, *argv, "--lake", str(lake))
        assert rc == report.EXIT_USAGE and why in err and len(err.splitlines()) == 1, (argv, err)
    assert time.monotonic() - t0 < 10


def test_a_reader_that_stops_early_is_no_error(tmp_path, monkeypatch):
    """`brokerscope ... | head`: the closed pipe ends the command quietly, exit 0."""
    Lake(tmp_path / "lake").ensure_tables()

    class ClosedPipe(io.StringIO):
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert cli.main(["tables", "--lake", str(tmp_path / "lake"), "--format", "jsonl"]) == 0


def test_demo_names_a_command_that_runs(monkeypatch):
    script = Path(sys.prefix) / "bin" / "brokerscope"
    if not script.exists():
        pytest.skip("brokerscope is not installed as a script in this environment")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert Path(cli.command_name()).resolve() == script.resolve()
    monkeypatch.setattr(shutil, "which", lambda name: str(script))
    assert cli.command_name() == "brokerscope"
    monkeypatch.setattr(sys, "prefix", str(Path("/nonexistent-venv")))
    assert cli.command_name() == f"{sys.executable} -m brokerscope.cli"


@pytest.mark.spark
def test_a_damaged_table_is_one_line_and_the_others_still_answer(spark, sample_lake, tmp_path, capsys):
    """A commit of commands' log cut short (a full disk), then a data file of commands gone (an
    early vacuum): `tables` and `sql` printed a Python and Rust traceback, and a query of the
    intact messages table failed too (found by a user trial). Now one line names the table and
    why, exit 2, and the other tables answer."""
    lake = tmp_path / "lake"
    shutil.copytree(sample_lake, lake)
    log = sorted((lake / "commands" / "_delta_log").glob("*.json"))[-1]
    good = log.read_bytes()
    log.write_text("{garbage")
    rc, out, err = run(capsys, "tables", "--lake", str(lake), "--format", "csv")
    assert rc == report.EXIT_USAGE and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"brokerscope: {lake / 'commands'}: the Delta table cannot be read: "
        + err.split("the Delta table cannot be read: ", 1)[1].strip()
    ]
    assert "messages," in out and "commands," not in out
    rc, out, err = run(
        capsys, "sql", "SELECT count(*) AS n FROM messages", "--lake", str(lake), "--format", "csv"
    )
    assert rc == report.EXIT_OK and out.startswith("n\n") and f"{lake / 'commands'}: the Delta table" in err
    log.write_bytes(good)
    next(iter((lake / "commands").glob("date=*/*.parquet"))).unlink()
    rc, out, err = run(capsys, "sql", "SELECT count(*) FROM commands", "--lake", str(lake))
    assert rc == report.EXIT_USAGE and "Traceback" not in err
    assert f"{lake / 'commands'}: the Delta table cannot be read: [PATH_NOT_FOUND]" in err


@pytest.mark.spark
def test_a_data_file_gone_is_named_by_tables_and_report_draws_the_rest(spark, sample_lake, tmp_path, capsys):
    """A data file of messages deleted by hand (found by a user trial: `tables` listed messages as
    healthy, exit 0; `report` stopped with DataFusion's 'Failed to fetch metadata', exit 2). Now
    `tables` names it in one line, exit 2, the other tables listed; `report` writes the page
    without the charts of messages, saying why, exit 0."""
    lake = tmp_path / "lake"
    shutil.copytree(sample_lake, lake)
    gone = next(iter((lake / "messages").glob("date=*/*.parquet")))
    gone.unlink()
    rc, out, err = run(capsys, "tables", "--lake", str(lake), "--format", "csv")
    assert rc == report.EXIT_USAGE and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"brokerscope: {lake / 'messages'}: the Delta table cannot be read: a data file its log "
        f"names is gone: {gone} " + err.split(f"{gone} ", 1)[1].strip()
    ]
    assert "commands," in out and "messages," not in out
    html = tmp_path / "r.html"
    rc, out, err = run(capsys, "report", "--lake", str(lake), "-o", str(html))
    assert rc == report.EXIT_OK, err
    page = html.read_text()
    assert "a data file its log names is gone" in page
    assert "table cannot be read (see above)" in page
    assert 'data-chart="requests"' in page and "plotly-graph-div" in page  # latencies still drawn
