"""The command's own text: each subcommand's --help says what it does, the run summary counts."""

from brokerscope import cli
from brokerscope.report import Summary
from tests.conftest import SAMPLE_DATA

SAMPLE = SAMPLE_DATA / "kafka" / "lz4.pcap"


def test_every_subcommand_help_starts_with_what_it_does():
    parser = cli.build_parser()
    sub = parser._subparsers._group_actions[0]
    listed = {a.dest: a.help for a in sub._choices_actions}
    assert {"ingest", "sql", "extract", "report", "demo"} <= set(listed)
    for name, p in sub.choices.items():
        text = " ".join(p.format_help().split())
        assert listed[name] and " ".join(listed[name].split()) in text, name


def test_summary_counts_connections_in_the_right_number():
    one = Summary(run_id="r", files=1, connections=1).lines()[0]
    many = Summary(run_id="r", files=1, connections=2).lines()[0]
    assert "1 connection," in one and "2 connections," in many


def test_a_full_disk_is_one_line_and_exit_1_wherever_it_was_raised(monkeypatch, capsys, tmp_path):
    """Found by a user trial: a lake on a disk that filled during a run gave 162 lines of Spark
    and Python traceback and no line naming what happened. An error the disk caused (full, over
    quota, read-only), in the exception's chain or in the text Spark and py4j wrap it in, is one
    line; any other error keeps its traceback."""
    import errno

    from brokerscope import pipeline

    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "lake" / "messages" / "x.parquet"))
    assert cli.no_room(full) == f"no space left on device ({full.filename})"
    wrapped = RuntimeError("An error occurred while calling o123.collect")
    wrapped.__cause__ = full
    assert cli.no_room(wrapped).startswith("no space left on device (")
    py4j = RuntimeError("Job aborted ... OSError: [Errno 28] No space left on device: '/x' ... at org.apache")
    assert cli.no_room(py4j) == "no space left on device"
    assert cli.no_room(OSError(errno.EROFS, "Read-only file system")) == "read-only file system"
    assert cli.no_room(ValueError("a bug")) is None

    def fails(*a, **k):
        raise wrapped

    monkeypatch.setattr(pipeline, "ingest", fails)
    monkeypatch.setattr(cli, "_spark", lambda *a, **k: None)
    rc = cli.main(["ingest", str(SAMPLE), "--lake", str(tmp_path / "lake")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith(f"brokerscope: no space left on device ({full.filename}): the command stopped")


def test_a_lake_whose_runs_cannot_be_finished_is_one_line_without_colour_codes(capsys, tmp_path):
    """Found by a user trial (a full disk): `tables` printed delta-rs's several-line error with its
    terminal colour codes into a log before reading what was committed."""

    class Stuck:
        root = tmp_path

        def recover(self):
            raise OSError(
                "Generic error: commit failed\n\x1b[31m↳\x1b[0m No space left on device (os error 28)"
            )

    assert cli._recover(Stuck()) == []
    err = capsys.readouterr().err
    assert (
        err
        == f"brokerscope: cannot finish interrupted runs in {tmp_path} (no space left on device): reading what they committed\n"
    )

    class Other(Stuck):
        def recover(self):
            raise OSError("\x1b[1mGeneric error\x1b[0m: the log is damaged\nmore")

    cli._recover(Other())
    assert capsys.readouterr().err.endswith(
        "(Generic error: the log is damaged): reading what they committed\n"
    )


def test_a_file_not_found_that_names_only_its_path_says_so(monkeypatch, capsys, tmp_path):
    """pyarrow's FileNotFoundError is the bare path (found by a user trial: 'brokerscope: <path>',
    no reason): the line says what is wrong with it."""
    from brokerscope import pipeline

    gone = str(tmp_path / "lake" / "inputs" / "part-0.parquet")

    def fails(*a, **k):
        raise FileNotFoundError(gone)

    monkeypatch.setattr(pipeline, "ingest", fails)
    monkeypatch.setattr(cli, "_spark", lambda *a, **k: None)
    rc = cli.main(["ingest", str(SAMPLE), "--lake", str(tmp_path / "lake")])
    assert (rc, capsys.readouterr().err) == (2, f"brokerscope: no such file: {gone}\n")


def test_a_file_name_with_a_line_break_stays_on_its_summary_line():
    """Found by a user trial: `bad \\nnewline.pcap` split the 'rejected' line in two (sql escaped
    the same name); control characters in names print escaped, as in query output."""
    lines = Summary(run_id="r", errors=[("/caps/bad \nnewline\x1b[2J.pcap", "not a capture")]).lines()
    (rejected,) = [ln for ln in lines if ln.startswith("rejected:")]
    assert rejected == "rejected: 1 file(s): /caps/bad \\nnewline\\x1b[2J.pcap (not a capture)"
    assert all("\n" not in ln and "\x1b" not in ln for ln in lines)


def test_a_lake_path_with_a_url_escape_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """delta-rs reads `%41` in a table path as `A` (found by a user trial: a traceback, exit 1, and a
    lake left half made): refused before anything is written."""
    from brokerscope import pipeline

    monkeypatch.setattr(cli, "_spark", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "make_spark", lambda *a, **k: None)
    lake = tmp_path / "lp %41"
    rc = cli.main(["ingest", str(SAMPLE), "--lake", str(lake)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "%XX" in err and not lake.exists()


def test_a_rejected_file_s_own_line_escapes_control_characters(monkeypatch, capsys, tmp_path):
    """The line each rejected file gets before the summary (found by a user trial: a name with a
    bell or a line break printed raw, one line split in two)."""
    from brokerscope import pipeline

    monkeypatch.setattr(cli, "_spark", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "make_spark", lambda *a, **k: None)
    bad = tmp_path / "empty\a\n.pcap"
    bad.write_bytes(b"")
    cli.main(["ingest", str(bad), "--lake", str(tmp_path / "lake")])
    err = capsys.readouterr().err
    assert "\a" not in err and "empty\\x07\\n.pcap" in err
