"""The `brokerscope` command and the nightly job, run in-process against a real Spark session."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from brokerscope import cli, pipeline, report
from brokerscope.streams import decode_files
from tests.conftest import CAPTURES, ROOT, SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows
from tests.support.synth import write_capture

pytestmark = pytest.mark.spark


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _inputs(lake) -> dict[str, dict]:
    return {r["path"].rsplit("/", 1)[1]: r for r in delta_rs_rows(str(lake / "inputs"))}


def test_ingest_reports_bad_inputs_and_keeps_the_rest(spark, tmp_path, capsys):
    """`ingest good.pcap truncated.pcap empty.pcap notes.txt /nope`: the good file and the good
    part of the truncated one land; the exit code says some inputs were partial or rejected."""
    good = tmp_path / "good.pcap"
    write_capture(str(good), n_conns=3, exchanges=2)
    cut = tmp_path / "truncated.pcap"
    cut.write_bytes((SAMPLE_DATA / "kafka" / "zstd.pcap").read_bytes()[:9000])
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    text = tmp_path / "notes.txt"
    text.write_text("not a capture\n")
    missing = tmp_path / "missing.pcap"
    lake = tmp_path / "lake"
    paths = [str(good), str(cut), str(empty), str(text), str(missing)]
    rc, out, err = run(capsys, "ingest", *paths, "--lake", str(lake), "-q")
    assert rc == report.EXIT_PARTIAL
    lines = [ln for ln in err.splitlines() if ln.startswith("brokerscope: ")]
    assert len(lines) == 3
    assert any(str(empty) in ln and "empty" in ln for ln in lines)
    assert any(str(text) in ln and "not a capture" in ln for ln in lines)
    assert any(str(missing) in ln and "no such file" in ln for ln in lines)
    n_cut = len(decode_files([str(cut)])["streams"])
    assert n_cut > 0 and "2 file(s)" in out and f"streams={3 + n_cut}" in out
    # every warning names its file; the summary names the partial and rejected files
    warnings = [ln for ln in out.splitlines() if ln.startswith("warning: ")]
    assert warnings and all(str(cut) in ln for ln in warnings)
    # the synthetic connections of good.pcap, whole, carry bytes of no broker protocol: no warning
    assert str(good) not in "\n".join(warnings)
    assert f"partial: 1 file(s): {cut} (truncated record at offset" in out
    assert "rejected: 3 file(s):" in out and "exit 3:" in out
    assert len(delta_rs_rows(str(lake / "streams"))) == 3 + n_cut
    inp = _inputs(lake)
    assert set(inp) == {"good.pcap", "truncated.pcap", "empty.pcap", "notes.txt", "missing.pcap"}
    assert (inp["missing.pcap"]["status"], inp["missing.pcap"]["size"]) == ("error", None)
    assert (inp["good.pcap"]["status"], inp["good.pcap"]["error"], inp["good.pcap"]["damaged_bytes"]) == (
        "ok",
        None,
        0,
    )
    t = inp["truncated.pcap"]
    assert t["status"] == "partial" and t["packets"] > 0 and 0 < t["damaged_bytes"] < 2000
    assert t["error"].startswith("truncated record at offset")
    assert inp["empty.pcap"]["status"] == "error" and inp["empty.pcap"]["error"] == "empty file"
    assert inp["notes.txt"]["status"] == "error" and inp["notes.txt"]["capture_id"] is None


def test_a_capture_of_garbage_is_an_error_not_ok(spark, tmp_path, capsys):
    """A valid pcap header followed by random bytes reads 0 packets: status error, exit 4."""
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(
        (SAMPLE_DATA / "kafka" / "zstd.pcap").read_bytes()[:24] + random.Random(7).randbytes(5000)
    )
    lake = tmp_path / "lake"
    rc, out, _ = run(capsys, "ingest", str(junk), "--lake", str(lake), "-q")
    assert rc == report.EXIT_NOTHING
    r = _inputs(lake)["junk.pcap"]
    assert r["status"] == "error" and r["error"].startswith("nothing readable") and r["damaged_bytes"] == 5000
    assert f"unreadable: 1 file(s): {junk}" in out


def test_a_capture_with_the_wrong_link_type_is_unreadable_naming_the_fix(spark, tmp_path, capsys):
    """Ethernet frames under a raw-IP header read as no packet: the input is an error that says
    what the records read as (was 'ok' with 0 TCP segments, exit 0); the good file beside it is kept."""
    good = SAMPLE_DATA / "kafka" / "lz4.pcap"
    wrong = tmp_path / "wrong.pcap"
    head = bytearray(good.read_bytes())
    head[20:24] = (101).to_bytes(4, "little")  # pcap global header: link type u32 @20
    wrong.write_bytes(head)
    lake = tmp_path / "lake"
    rc, out, _ = run(capsys, "ingest", str(good), str(wrong), "--lake", str(lake), "-q")
    assert rc == report.EXIT_PARTIAL
    r = _inputs(lake)["wrong.pcap"]
    assert (r["status"], r["packets"]) == ("error", 121)
    assert r["error"] == (
        "nothing readable: declares link type 101 but its records read as link type 1 (32 of the first "
        "32 are IP packets then, none as declared): rewrite the header, e.g. editcap -T ether IN OUT"
    )
    assert f"unreadable: 1 file(s): {wrong} (nothing readable: declares link type 101" in out
    assert _inputs(lake)["lz4.pcap"]["status"] == "ok"


def test_files_skipped_inside_a_directory_are_listed_and_recorded(spark, tmp_path, capsys):
    """In a directory, a README is skipped (no failure); an empty file named as a capture is
    rejected (tcpdump died before writing it): both are listed and recorded."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write_capture(str(inbox / "a.pcap"), n_conns=2, exchanges=2)
    (inbox / "empty.pcap").write_bytes(b"")
    (inbox / "README").write_text("captures of the night\n")
    lake = tmp_path / "lake"
    rc, out, err = run(capsys, "ingest", str(inbox), "--lake", str(lake), "-q")
    assert rc == report.EXIT_PARTIAL
    assert f"rejected: 1 file(s): {inbox / 'empty.pcap'} (empty file)" in out
    assert f"skipped, not a capture: 1 file(s): {inbox / 'README'}\n" in out
    assert f"brokerscope: {inbox / 'empty.pcap'}: empty file" in err and "README" not in err
    inp = _inputs(lake)
    assert {k: v["status"] for k, v in inp.items()} == {
        "a.pcap": "ok",
        "empty.pcap": "error",
        "README": "skipped",
    }
    # the nightly job does not report them again, and says all is well
    sys.path.insert(0, str(ROOT / "jobs"))
    import nightly_ingest

    assert nightly_ingest.main(["--input", str(inbox), "--lake", str(lake)]) == report.EXIT_OK
    assert "nothing to ingest" in capsys.readouterr().out
    # nor does `ingest --skip-ingested`: no error line for the files rejected before
    rc, out, err = run(capsys, "ingest", str(inbox), "--lake", str(lake), "-q", "--skip-ingested")
    assert rc == report.EXIT_OK and "brokerscope: " not in err, err
    assert "already ingested: 1 file(s) skipped" in out and "rejected" not in out


def test_a_dangling_symlink_and_a_copy_are_reported_once_a_missing_path_every_time(spark, tmp_path, capsys):
    """Found by a user trial: a dangling symlink in the nightly's directory was rejected again by
    every --skip-ingested run (exit 3 each night), and neither it nor a missing path got the
    `inputs` row every input gets. Now the link is recorded with its own size and mtime and not
    reported again; a path that is not there is recorded (no size) and reported by each run."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    write_capture(str(inbox / "a.pcap"), n_conns=1, exchanges=2)
    (inbox / "gone.pcap").symlink_to(tmp_path / "rotated-away.pcap")
    shutil.copy(inbox / "a.pcap", inbox / "b.pcap")  # named once too, by the run that finds it
    lake = tmp_path / "lake"
    missing = tmp_path / "never.pcap"
    rc, out, err = run(capsys, "ingest", str(inbox), str(missing), "--lake", str(lake), "-q")
    assert rc == report.EXIT_PARTIAL, out
    assert "b.pcap: same content as" in out
    assert f"brokerscope: {inbox / 'gone.pcap'}: " in err and f"{missing}: no such file" in err
    inp = _inputs(lake)
    assert {k: v["status"] for k, v in inp.items()} == {
        "a.pcap": "ok",
        "b.pcap": "ok",
        "gone.pcap": "error",
        "never.pcap": "error",
    }
    assert inp["gone.pcap"]["path"] == str(inbox / "gone.pcap")  # the link, not where it pointed
    assert inp["gone.pcap"]["size"] == len(str(tmp_path / "rotated-away.pcap"))
    assert inp["never.pcap"]["size"] is None and inp["never.pcap"]["mtime"] is None
    sys.path.insert(0, str(ROOT / "jobs"))
    import nightly_ingest

    for _ in range(2):
        assert nightly_ingest.main(["--input", str(inbox), "--lake", str(lake)]) == report.EXIT_OK
        out = capsys.readouterr().out
        assert "nothing to ingest" in out and "rows:" not in out  # was an empty `rows: ` line
        assert "same content" not in out
    rc, out, err = run(
        capsys, "ingest", str(inbox), str(missing), "--lake", str(lake), "-q", "--skip-ingested"
    )
    assert rc == report.EXIT_NOTHING and "gone.pcap" not in err and f"{missing}: no such file" in err, err


def test_a_path_emptied_or_removed_keeps_the_record_of_its_ingested_content(spark, tmp_path, capsys):
    """Found by a user trial: ingesting a path again after it was emptied (or removed, or
    overwritten with text) replaced its inputs row by the error row, and the rows decoded from
    its earlier content were left with a capture_id no inputs row named. That row stays."""
    cap = tmp_path / "a.pcap"
    shutil.copy(SAMPLE_DATA / "kafka" / "none.pcap", cap)
    lake = tmp_path / "lake"
    assert run(capsys, "ingest", str(cap), "--lake", str(lake), "-q")[0] == report.EXIT_OK
    (first,) = delta_rs_rows(str(lake / "inputs"))
    decoded = {r["capture_id"] for r in delta_rs_rows(str(lake / "commands"))}
    assert decoded == {first["capture_id"]}
    for damage in ("empty", "text", "removed"):
        if damage == "removed":
            cap.unlink()
        else:
            cap.write_text("" if damage == "empty" else "notes, not a capture\n")
        rc, _, err = run(capsys, "ingest", str(cap), "--lake", str(lake), "-q")
        assert rc == report.EXIT_NOTHING and str(cap) in err
        rows = delta_rs_rows(str(lake / "inputs"))
        assert [r for r in rows if r["capture_id"]] == [first], damage
        assert [(r["status"], r["capture_id"]) for r in rows if not r["capture_id"]] == [("error", None)]
        assert {r["capture_id"] for r in delta_rs_rows(str(lake / "commands"))} == decoded


def test_a_capture_directory_with_sidecars_ingests_cleanly(spark, tmp_path, capsys):
    """A real capture directory (deepflow's captures, each with its .result) plus what people and
    tools leave there: the first run exits 0, the sidecars skipped and recorded as such; hidden
    and --exclude'd files are not inputs. A damaged capture dropped in later is still exit 3
    with its reason, and one named as a capture whose bytes are none is rejected."""
    night = tmp_path / "night"
    shutil.copytree(CAPTURES / "deepflow", night)
    (night / "README").write_text("captures of broker-3\n")
    (night / "SHA256SUMS.sha256").write_text("0" * 64 + "  00-produce-v2.pcap\n")
    (night / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(100))
    shutil.copy(SAMPLE_DATA / "kafka" / "zstd.pcap", night / "current.pcap.tmp")
    lake = tmp_path / "lake"
    caps = sorted(p.name for p in night.glob("*.pcap"))
    rc, out, err = run(capsys, "ingest", str(night), "--lake", str(lake), "-q", "--exclude", "*.tmp")
    assert rc == report.EXIT_OK, out
    assert "brokerscope: " not in err and "rejected" not in out
    assert f"skipped, not a capture: {len(caps) - 1 + 2} file(s):" in out  # every .result, README, sums
    assert "excluded: 1 path(s)" in out and "\nexit 0: every input read cleanly\n" in out
    inp = _inputs(lake)
    assert {n for n, r in inp.items() if r["status"] == "ok"} == set(caps)
    assert {n for n, r in inp.items() if r["status"] != "ok"} == {
        *(p.name for p in night.glob("*.result")),
        "README",
        "SHA256SUMS.sha256",
    }
    assert {r["status"] for n, r in inp.items() if n not in caps} == {"skipped"}
    # a damaged capture and a torn one arrive: the nightly job names both, exit 3
    sys.path.insert(0, str(ROOT / "jobs"))
    import nightly_ingest

    data = (SAMPLE_DATA / "kafka" / "zstd.pcap").read_bytes()
    (night / "cut.pcap").write_bytes(data[:9000])
    (night / "torn.pcap").write_bytes(bytes(24) + data[24:])
    rc = nightly_ingest.main(["--input", str(night), "--lake", str(lake), "--exclude", "*.tmp"])
    out = capsys.readouterr().out
    assert rc == report.EXIT_PARTIAL
    assert f"partial: 1 file(s): {night / 'cut.pcap'} (truncated record at offset" in out
    assert f"rejected: 1 file(s): {night / 'torn.pcap'} (not a capture" in out
    assert "skipped, not a capture" not in out and "current.pcap.tmp" not in str(_inputs(lake))
    assert (_inputs(lake)["torn.pcap"]["status"], _inputs(lake)["cut.pcap"]["status"]) == ("error", "partial")


def test_ingest_with_nothing_valid_fails_plainly(tmp_path, capsys):
    """A mistyped path and no lake yet: exit 4, and no lake of six empty tables is made to record
    the missing path (found by a user trial); an existing lake records it (test above)."""
    lake = tmp_path / "lake"
    rc, out, err = run(capsys, "ingest", str(tmp_path / "nope.pcap"), "--lake", str(lake))
    assert rc == report.EXIT_NOTHING and "nope.pcap: no such file or directory" in err
    assert f"lake: {lake} (none made: nothing to record)" in out and not lake.exists()
    empty = tmp_path / "inbox"
    empty.mkdir()
    rc, out, err = run(capsys, "ingest", str(empty), "--lake", str(lake), "--skip-ingested")
    assert rc == report.EXIT_OK and "exit 0: nothing new to ingest" in out and not lake.exists()


def _no_spark(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(cli, "_spark", refuse)
    monkeypatch.setattr(pipeline, "make_spark", refuse)


def test_bad_filter_values_fail_before_spark_naming_the_flag(tmp_path, capsys, monkeypatch):
    _no_spark(monkeypatch)
    good = tmp_path / "good.pcap"
    write_capture(str(good), n_conns=1, exchanges=1)
    lake = str(tmp_path / "lake")
    for flags, why in [
        # found by a user trial: the first three were named by the settings they set
        (["--split-size", "0"], "brokerscope: --split-size must be at least 256 bytes, not '0'"),
        (["--split-size", "lots"], "brokerscope: --split-size: not a size: 'lots'"),
        (["--port", "kafka=99999"], "and PORT 1-65535 (e.g. kafka=19092), not 'kafka=99999'"),
        (["--since", "yesterday"], "--since: not a time: 'yesterday'"),
        (["--until", "2026-13-01T00:00:00"], "--until: not a time: '2026-13-01T00:00:00'"),
        (
            ["--since", "1700000010", "--until", "1700000000"],
            "--until (1700000000) must be later than --since",
        ),
        (["--host", "10.0.0.1", "--host", "broker-1"], "--host: not an IP address or network: 'broker-1'"),
        (["--tcp-port", "9092", "--tcp-port", "99999"], "--tcp-port: not a TCP port: '99999'"),
    ]:
        rc, _, err = run(capsys, "ingest", str(good), "--lake", lake, *flags)
        assert rc == report.EXIT_USAGE and why in err and len(err.strip().splitlines()) == 1, err
    conf = tmp_path / "c.toml"
    conf.write_text('[filter]\nports = ["https"]\n')
    rc, _, err = run(capsys, "ingest", str(good), "--conf", str(conf), "--lake", lake)
    assert rc == report.EXIT_USAGE and "filter.ports: not a TCP port: 'https'" in err
    # the flag replaces the config's key: the bad config value is not read
    with pytest.raises(AssertionError, match="Spark was started"):
        run(capsys, "ingest", str(good), "--conf", str(conf), "--lake", lake, "--tcp-port", "9092")
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["ingest"].format_help()
    assert all(
        f in help_text for f in ("--since TIME", "--until TIME", "--host ADDR[/PREFIX]", "--tcp-port N")
    )
    with pytest.raises(SystemExit) as e:  # delta-rs's own message, before
        cli.main(["vacuum", "--lake", lake, "--retain-hours", "-5"])
    assert e.value.code == report.EXIT_USAGE
    assert "argument --retain-hours: hours are 0 or more, not -5" in capsys.readouterr().err


def test_bad_lake_paths_and_ports_fail_before_spark(tmp_path, capsys, monkeypatch):
    _no_spark(monkeypatch)
    good = tmp_path / "good.pcap"
    write_capture(str(good), n_conns=1, exchanges=1)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for lake, why in [(afile, "is not a directory"), (afile / "lake", "cannot write to the lake")]:
        rc, out, err = run(capsys, "ingest", str(good), "--lake", str(lake))
        assert rc == report.EXIT_USAGE and why in err and len(err.strip().splitlines()) == 1, err
    rc, _, err = run(capsys, "ingest", str(good), "--port", "foo=36525", "--lake", str(tmp_path / "l"))
    assert rc == report.EXIT_USAGE and "foo=36525" in err and "kafka" in err
    conf = tmp_path / "c.toml"
    conf.write_text("[ports]\nfoo = [36525]\n")
    rc, _, err = run(capsys, "ingest", str(good), "--conf", str(conf), "--lake", str(tmp_path / "l"))
    assert rc == report.EXIT_USAGE and "ports.foo: unknown protocol" in err
    for cmd in (["sql", "SELECT 1"], ["tables"]):
        rc, _, err = run(capsys, *cmd, "--lake", str(tmp_path / "no-lake"))
        assert rc == report.EXIT_USAGE and "no brokerscope lake at" in err, cmd
    assert not (tmp_path / "no-lake").exists()
    sys.path.insert(0, str(ROOT / "jobs"))
    import nightly_ingest

    assert nightly_ingest.main(["--input", str(good), "--lake", str(afile)]) == report.EXIT_USAGE


# every subcommand that takes --lake, with what else it needs to get as far as the lake
LAKE_COMMANDS = {
    "ingest": ["ingest", str(SAMPLE_DATA / "kafka" / "lz4.pcap"), "-q"],
    "demo": ["demo", "-q"],
    "sql": ["sql", "SELECT 1"],
    "shell": ["shell"],
    "tables": ["tables"],
    "report": ["report", "-o", "/dev/null"],
    "extract": ["extract", "--conn-id", "0", "-o", "/dev/null"],
    "recover": ["recover"],
    "optimize": ["optimize"],
    "vacuum": ["vacuum"],
}


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc")
def test_lake_paths_that_cannot_be_a_lake_are_one_line_naming_what_is_wrong(tmp_path, capsys, monkeypatch):
    """--lake /proc (a directory no file can be created in), a path under it, a file, a path
    under a file, a broken link: for every subcommand, one line naming the path and what is
    wrong, exit 2, before Spark starts (it said "cannot write to the lake /proc: No such file or
    directory": /proc exists)."""
    _no_spark(monkeypatch)
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    writers = {"ingest", "demo"}
    cases = {
        "/proc": "cannot write to the lake /proc: cannot create files in /proc (",
        "/proc/lake": "cannot write to the lake /proc/lake: cannot create the directory /proc/lake in /proc (",
        str(afile): f"lake {afile} is not a directory: it is a file",
        str(afile / "lake"): f"cannot write to the lake {afile / 'lake'}: {afile} is a file, not a directory",
        str(tmp_path / "link"): f"lake {tmp_path / 'link'} is not a directory: it is a broken symbolic link",
    }
    for lake, why in cases.items():
        for name, argv in LAKE_COMMANDS.items():
            monkeypatch.setattr(sys, "stdin", io.StringIO(""))
            rc, out, err = run(capsys, *argv, "--lake", lake)
            if name not in writers and "cannot write" in why:  # a reader is told there is no lake
                why_here = f"no brokerscope lake at {lake} (run `brokerscope ingest` first)"
            else:
                why_here = why
            assert (rc, out, err.count("\n")) == (report.EXIT_USAGE, "", 1), (lake, name, err)
            assert err.startswith(f"brokerscope: {why_here}"), (lake, name, err)
        sys.path.insert(0, str(ROOT / "jobs"))
        import nightly_ingest

        assert (
            nightly_ingest.main(["--input", str(SAMPLE_DATA / "kafka"), "--lake", lake]) == report.EXIT_USAGE
        )
        err = capsys.readouterr().err
        assert err.startswith(f"nightly_ingest: {why}") and err.count("\n") == 1, err
    assert not afile.is_dir() and not (tmp_path / "gone").exists()


@contextlib.contextmanager
def _read_only(src: Path, at: Path):
    """`src` seen read-only at `at`: a read-only bind mount as root (who writes through
    permissions), else mode 0555 on every directory of a copy. Skips where neither works."""
    if os.geteuid() != 0:
        shutil.copytree(src, at)
        for d, _, _ in os.walk(at):
            os.chmod(d, 0o555)
        try:
            yield at
        finally:
            for d, _, _ in os.walk(at):
                os.chmod(d, 0o755)
        return
    at.mkdir()
    mounted = subprocess.run(["mount", "--bind", str(src), str(at)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("root, and no bind mount to make a directory read-only")
    try:
        if subprocess.run(["mount", "-o", "remount,ro,bind", str(at)], capture_output=True).returncode:
            pytest.skip("root, and no read-only remount")
        yield at
    finally:
        subprocess.run(["umount", str(at)], check=True)


def test_a_read_only_lake_is_read_and_refused_for_writes(sample_lake, tmp_path, capsys, monkeypatch):
    """A lake on a read-only mount (a snapshot, an archive) with a run left unfinished: the
    commands that write it say so in one line, exit 2, before they start (optimize crashed with
    a Delta error, every command with OSError on the run's lock); those that read it say that
    the interrupted run could not be finished and read what is committed."""
    _no_spark(monkeypatch)
    copy = tmp_path / "copy"
    shutil.copytree(sample_lake, copy)
    (copy / "_runs" / "20260101T000000-deadbeef").mkdir(parents=True)  # killed before its manifest
    with _read_only(copy, tmp_path / "ro") as ro:
        for name in ("ingest", "recover", "optimize", "vacuum"):
            rc, out, err = run(capsys, *LAKE_COMMANDS[name], "--lake", str(ro))
            assert (rc, out) == (report.EXIT_USAGE, ""), (name, err)
            assert err.startswith(f"brokerscope: cannot write to the lake {ro}: cannot create files in ")
            assert err.count("\n") == 1, (name, err)
        for argv in (["tables"], ["vacuum", "--dry-run"]):
            rc, out, err = run(capsys, *argv, "--lake", str(ro))
            assert rc == 0 and "\ninputs " in out and out.endswith(" rows)\n"), (argv, out, err)
            assert err == f"brokerscope: cannot finish interrupted runs in {ro} (" + err.split("(", 1)[1]
            assert err.endswith("): reading what they committed\n") and err.count("\n") == 1
    assert (copy / "_runs" / "20260101T000000-deadbeef").is_dir()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_unwritable_lake_fails_before_spark(tmp_path, capsys, monkeypatch):
    _no_spark(monkeypatch)
    good = tmp_path / "good.pcap"
    write_capture(str(good), n_conns=1, exchanges=1)
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    rc, _, err = run(capsys, "ingest", str(good), "--lake", str(ro))
    assert rc == report.EXIT_USAGE and "cannot write to the lake" in err


def test_outputs_that_cannot_be_written_fail_before_the_work(spark, tmp_path, capsys, monkeypatch):
    """-o/--out naming a directory, or a file in a missing directory: one line naming it, exit 2,
    nothing written, for `sql`, `extract` and `report`."""
    lake = tmp_path / "lake"
    rc, _, _ = run(capsys, "ingest", str(SAMPLE_DATA / "kafka" / "lz4.pcap"), "--lake", str(lake), "-q")
    assert rc == report.EXIT_OK
    conn = delta_rs_rows(str(lake / "streams"))[0]["conn_id"]
    outdir = tmp_path / "outdir"
    outdir.mkdir()
    missing = tmp_path / "no" / "such" / "r.out"
    commands = {
        "sql": ["sql", "SELECT 1", "--lake", str(lake), "--format", "csv", "--out"],
        "extract": ["extract", "--lake", str(lake), "--conn-id", conn, "-o"],
        "report": ["report", "--lake", str(lake), "--out"],
    }
    _no_spark(monkeypatch)  # sql checks before Spark starts
    for name, argv in commands.items():
        rc, _, err = run(capsys, *argv, str(outdir))
        assert rc == report.EXIT_USAGE and f"--out {outdir} is a directory" in err, (name, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (name, err)
        rc, _, err = run(capsys, *argv, str(missing))
        assert rc == report.EXIT_USAGE and f"no directory {missing.parent}" in err, (name, err)
    # two statements, one of them without a result: the one result goes to --out itself
    two = "CREATE TEMPORARY VIEW v AS SELECT 1 AS x; SELECT * FROM v"
    rc, _, err = run(capsys, "sql", two, "--lake", str(lake), "--format", "csv", "--out", str(outdir))
    assert rc == report.EXIT_USAGE and f"--out {outdir} is a directory" in err, err
    assert list(outdir.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["lake", "outdir"]


def test_report_is_written_as_open_would(spark, tmp_path, capsys):
    lake = tmp_path / "lake"
    run(capsys, "ingest", str(SAMPLE_DATA / "kafka" / "lz4.pcap"), "--lake", str(lake), "-q")
    old = os.umask(0o022)
    try:
        rc, _, _ = run(capsys, "report", "--lake", str(lake), "--out", str(tmp_path / "r.html"))
    finally:
        os.umask(old)
    assert rc == 0 and (tmp_path / "r.html").stat().st_mode & 0o777 == 0o644


def test_ingest_without_java_leaves_no_lake(tmp_path, capsys, monkeypatch):
    good = tmp_path / "good.pcap"
    write_capture(str(good), n_conns=1, exchanges=1)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    cli._java_ok.cache_clear()
    try:
        rc, _, err = run(capsys, "ingest", str(good), "--lake", str(tmp_path / "lake"))
    finally:
        cli._java_ok.cache_clear()
    assert rc == report.EXIT_USAGE and "Java 17 or newer is required" in err
    assert not (tmp_path / "lake").exists()


def test_sql_and_tables_formats(spark, tmp_path, capsys):
    lake = tmp_path / "lake"
    rc, _, _ = run(capsys, "ingest", str(CAPTURES / "ndpi" / "kafka.pcapng"), "--lake", str(lake), "-q")
    assert rc == 0
    q = "SELECT client_port, c2s_packets, s2c_packets FROM streams ORDER BY client_port"
    rc, out, _ = run(capsys, "sql", q, "--lake", str(lake), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and len(rows) == 9
    assert {"client_port": "46136", "c2s_packets": "12", "s2c_packets": "7"} in rows
    rc, out, _ = run(capsys, "sql", q, "--lake", str(lake), "--format", "jsonl", "--limit", "2")
    recs = [json.loads(ln) for ln in out.splitlines()]
    assert len(recs) == 2 and all(set(r) == {"client_port", "c2s_packets", "s2c_packets"} for r in recs)
    rc, out, _ = run(capsys, "sql", q, "--lake", str(lake), "--format", "json", "--limit", "2")
    assert json.loads(out) == recs
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
    assert f"\nnext: {cli.command_name()} sql " in out  # a command the person can run
    assert "streams=3" in out
    # the report hint runs as printed (but for where the page goes)
    (hint,) = [ln.split(" report ", 1)[1] for ln in out.splitlines() if " report --lake " in ln]
    words = hint.split()
    words[words.index("--out") + 1] = str(tmp_path / "report.html")
    rc, _, err = run(capsys, "report", *words)
    assert rc == 0, err
    assert (tmp_path / "report.html").stat().st_size > 100_000  # plotly.js inlined


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
    assert "1 file(s)" in out and "already ingested: 1 file(s) skipped" in out
    assert out.rstrip().splitlines()[-1].startswith("exit 0:")  # the verdict is the last line
    assert len(delta_rs_rows(str(lake / "streams"))) == 5
    assert sorted(r["path"].rsplit("/", 1)[1] for r in delta_rs_rows(str(lake / "inputs"))) == [
        "a.pcap",
        "b.pcap",
    ]


def test_sample_data_exists_with_provenance():
    assert (SAMPLE_DATA / "README.md").is_file()


def test_demo_in_its_own_process_asks_for_one_session(tmp_path):
    """`brokerscope demo` as `make demo` runs it: the example query runs on the ingest's session
    (asking for one again logged Spark's 'Using an existing Spark session' warning)."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(CAPTURES / "iggy" / "rs.pcapng", data)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    argv = [sys.executable, "-m", "brokerscope.cli", "demo", "--sample-data", str(data), "--lake", "lake"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "(3 rows)" in p.stdout
    assert "Using an existing Spark session" not in p.stderr and " WARN " not in p.stderr, p.stderr


# the progress-bar setting of a session made as the CLI makes one for `ingest` (no -q)
PROGRESS_PROBE = (
    "from brokerscope.config import Settings; from brokerscope.pipeline import make_spark; "
    "s = make_spark(Settings.load(overrides={'spark': {'master': 'local[1]'}})); "
    "print(s.sparkContext.getConf().get('spark.ui.showConsoleProgress')); s.stop()"
)


def test_the_progress_bar_is_drawn_only_on_a_terminal(tmp_path):
    """Without -q, Spark's progress bar is on when standard error is a terminal, off when it is
    a pipe or a file (a nightly log, `2> err.txt`): it drew carriage-return lines into those."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    got = {}
    for where in ("pipe", "terminal"):
        main, term = os.openpty()
        err = term if where == "terminal" else subprocess.PIPE
        try:
            p = subprocess.run(
                [sys.executable, "-c", PROGRESS_PROBE],
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=600,
                cwd=tmp_path,
            )
        finally:
            os.close(term)
            os.close(main)
        assert p.returncode == 0, p.stderr
        got[where] = p.stdout.split()[-1]
    assert got == {"pipe": "false", "terminal": "true"}


def test_a_night_without_captures_is_a_quiet_night_not_a_failure(tmp_path, capsys):
    """--skip-ingested over a directory with no capture yet, or only a README (found by a user
    trial: exit 4, 'no input could be ingested', and no line naming the directory; the README
    gives 0 for nothing new): exit 0, the directory named. A plain `ingest` of it stays 4."""
    empty, notes = tmp_path / "empty", tmp_path / "notes"
    empty.mkdir()
    notes.mkdir()
    (notes / "README").write_text("captures land here\n")
    lake = tmp_path / "lake"
    for inbox in (empty, notes, notes):
        rc, out, err = run(capsys, "ingest", str(inbox), "--lake", str(lake), "--skip-ingested")
        assert rc == report.EXIT_OK, (inbox, out, err)
        assert f"nothing to ingest: no capture or segment file in {inbox}" in out + err
    rc, out, err = run(capsys, "ingest", str(empty), "--lake", str(lake))
    assert rc == report.EXIT_NOTHING and f"no capture or segment file in {empty}" in out + err


def test_a_skipped_file_that_gave_nothing_is_not_said_to_have_rows(spark, tmp_path, capsys):
    """A night that only skips: the summary said 'the lake holds their rows' of a file that gave
    nothing when it was read (status error), and 'every input read cleanly' with nothing read
    (found by a user trial). Now it says how many gave nothing, and 'nothing new to ingest'."""
    import struct

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    shutil.copy(SAMPLE_DATA / "iggy" / "client_vsr.pcap", inbox / "a.pcap")
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)  # a pcap header, then noise
    (inbox / "noise.pcap").write_bytes(head + random.Random(7).randbytes(3000))
    lake = tmp_path / "lake"
    rc, out, err = run(capsys, "ingest", str(inbox), "--lake", str(lake), "--skip-ingested")
    assert _inputs(lake)["noise.pcap"]["status"] == "error", out + err
    rc, out, err = run(capsys, "ingest", str(inbox), "--lake", str(lake), "--skip-ingested")
    assert rc == report.EXIT_OK, out + err
    assert "already ingested: 2 file(s) skipped (1 of them gave nothing then: inputs.status error)" in out
    assert out.rstrip().splitlines()[-2] == "exit 0: nothing new to ingest"
