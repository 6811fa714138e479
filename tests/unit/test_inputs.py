"""Input discovery on real files: what a capture directory's other files are (inputs.discover)."""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import hashlib
import shutil
from pathlib import Path

import lz4.frame

from brokerscope import inputs
from tests.conftest import CAPTURES, SAMPLE_DATA

ZSTD = SAMPLE_DATA / "kafka" / "zstd.pcap"


def _night(tmp_path: Path) -> Path:
    """A capture directory as a nightly job finds one: captures next to the files people and
    tools leave beside them."""
    night = tmp_path / "night"
    shutil.copytree(CAPTURES / "deepflow", night)  # its .result files: the source's decodes, as text
    shutil.copy(CAPTURES / "ndpi" / "kafka.pcapng.out", night)  # nDPI's output for a capture
    (night / "README").write_text("captures of broker-3, 02:00-03:00\n")
    (night / "notes.txt~").write_text("an editor's backup\n")
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in night.glob("*.pcap"))
    (night / "SHA256SUMS.sha256").write_text(sums)
    (night / "_SUCCESS").write_bytes(b"")  # an empty marker file
    (night / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(100))
    (night / ".git").mkdir()
    shutil.copy(ZSTD, night / ".git" / "stashed.pcap")  # nothing under a hidden directory is an input
    return night


def test_sidecars_in_a_directory_are_skipped_not_errors(tmp_path):
    night = _night(tmp_path)
    d = inputs.discover([str(night)])
    assert sorted(Path(i.path).name for i in d.inputs) == sorted(p.name for p in night.glob("*.pcap"))
    assert d.errors == []
    skipped = {Path(p).name: why for p, why in d.skipped}
    assert set(skipped) == {
        *(p.name for p in night.glob("*.result")),
        "kafka.pcapng.out",
        "README",
        "notes.txt~",
        "SHA256SUMS.sha256",
        "_SUCCESS",
    }
    assert skipped["README"] == inputs.NOT_INPUT and skipped["_SUCCESS"] == inputs.EMPTY


def test_a_damaged_capture_in_a_directory_stays_an_error(tmp_path):
    """Loses nothing: a file named as a capture or segment whose bytes are none is an error with
    its reason; one with valid magic and bad content is an input (its damage is found when read)."""
    night = _night(tmp_path)
    data = ZSTD.read_bytes()
    (night / "cut.pcap").write_bytes(data[:9000])  # valid magic, truncated: an input
    (night / "torn.pcap").write_bytes(b"\x00" * 24 + data[24:])  # its header overwritten
    (night / "rotated.pcap3").write_bytes(b"")  # tcpdump -C's fourth file, never written
    (night / "broken.pcapng.gz").write_bytes(gzip.compress(b"half a pcapng header"))
    (night / "night.pcap.bz2").write_bytes(
        bz2.compress(data)
    )  # a capture, compressed as brokerscope cannot read
    (night / "night.pcap.lz4").write_bytes(lz4.frame.compress(data))
    (night / "backup.tar.lz4").write_bytes(lz4.frame.compress(b"a backup"))
    seg = night / "orders-0"
    seg.mkdir()
    (seg / "00000000000000000000.log").write_bytes(bytes(64))  # a segment of zeros
    d = inputs.discover([str(night)])
    assert "cut.pcap" in {Path(i.path).name for i in d.inputs}
    errors = {Path(p).name: why for p, why in d.errors}
    assert errors == {
        "torn.pcap": inputs.NOT_INPUT,
        "rotated.pcap3": inputs.EMPTY,
        "broken.pcapng.gz": inputs.NOT_INPUT,
        # found by a user trial: said to be no capture, not that it was compressed with another tool
        "night.pcap.bz2": f"{inputs.NOT_INPUT}: compressed with bzip2 (only gzip is read as it is: bzip2 -d it first)",
        "night.pcap.lz4": f"{inputs.NOT_INPUT}: compressed with lz4 (only gzip is read as it is: lz4 -d it first)",
        "00000000000000000000.log": inputs.NOT_INPUT,
    }
    assert not {Path(p).name for p, _ in d.skipped} & set(errors)
    assert "backup.tar.lz4" in {Path(p).name for p, _ in d.skipped}  # another tool's file, no capture name


def test_a_file_named_on_the_command_line_is_an_error_whatever_its_name(tmp_path):
    night = _night(tmp_path)
    d = inputs.discover([str(night / "README"), str(night / "_SUCCESS"), str(night / ".DS_Store")])
    assert d.inputs == [] and d.skipped == []
    assert [(Path(p).name, why) for p, why in d.errors] == [
        ("README", inputs.NOT_INPUT),
        ("_SUCCESS", inputs.EMPTY),
        (".DS_Store", inputs.NOT_INPUT),
    ]


def test_exclude_globs_match_names_and_paths_below_the_directory(tmp_path):
    night = _night(tmp_path)
    (night / "current.pcap.tmp").write_bytes(ZSTD.read_bytes()[:5000])  # a capture being written
    (night / "tmp").mkdir()
    shutil.copy(ZSTD, night / "tmp" / "scratch.pcap")
    sub = night / "broker-2"
    sub.mkdir()
    shutil.copy(ZSTD, sub / "zstd.pcap")
    shutil.copy(ZSTD, sub / "zstd-copy.pcap")
    d = inputs.discover([str(night)], exclude=["*.tmp", "tmp", "*.result", "broker-2/*-copy.pcap"])
    names = {Path(i.path).name for i in d.inputs}
    assert "zstd.pcap" in names and not names & {"current.pcap.tmp", "scratch.pcap", "zstd-copy.pcap"}
    assert sorted(str(Path(p).relative_to(night)) + ("/" if p.endswith("/") else "") for p in d.excluded) == [
        *sorted(p.name for p in night.glob("*.result")),
        "broker-2/zstd-copy.pcap",
        "current.pcap.tmp",
        "tmp/",
    ]
    assert not {Path(p).name for p, _ in d.skipped} & {p.name for p in night.glob("*.result")}
    # a file named on the command line is excluded too (a shell's glob names every file)
    named = inputs.discover([str(night / "current.pcap.tmp"), str(sub / "zstd.pcap")], exclude=["*.tmp"])
    assert [Path(i.path).name for i in named.inputs] == ["zstd.pcap"] and named.errors == []
    assert named.excluded == [str(night / "current.pcap.tmp")]


def test_fifos_and_symlink_loops_are_named_not_waited_on_nor_fatal(tmp_path):
    """A FIFO among a directory's files had discovery wait for a writer for ever (before Spark,
    no output); a symlink loop stopped the whole run with a traceback. Both are named with their
    reason (skipped where the name says no capture), and the capture beside them is ingested."""
    import os
    import signal

    shutil.copy(SAMPLE_DATA / "kafka" / "gzip.pcap", tmp_path / "a.pcap")
    os.mkfifo(tmp_path / "live.pcap")
    os.mkfifo(tmp_path / "notes")
    (tmp_path / "x2.pcap").symlink_to("x1")
    (tmp_path / "x1").symlink_to("x2.pcap")

    def waited(signum, frame):  # no OSError: discovery would take it for an unreadable file
        raise AssertionError("discovery waited on a FIFO")

    before = signal.signal(signal.SIGALRM, waited)
    signal.alarm(30)  # a FIFO opened blocks until a writer comes
    try:
        d = inputs.discover([str(tmp_path)])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert [Path(i.path).name for i in d.inputs] == ["a.pcap"]
    errors = {Path(p).name: e for p, e in d.errors}
    assert errors["live.pcap"] == inputs.NOT_REGULAR
    assert errors["x1"].startswith("cannot read: ") and "loop" in errors["x1"].lower()
    assert errors["x2.pcap"].startswith("cannot read: ")
    assert [(Path(p).name, e) for p, e in d.skipped] == [("notes", inputs.NOT_REGULAR)]


def test_a_kafka_segment_out_of_its_partition_directory_is_named_so(tmp_path):
    """A valid segment copied out of its `<topic>-<partition>` directory was 'not a capture
    (pcap, pcapng, gzip) or a broker segment file' (found by a user trial): the error says what
    it is and why it is not read."""
    log = SAMPLE_DATA / "kafka" / "segments" / "bs-segment-0" / "00000000000000000000.log"
    loose = tmp_path / "loose" / log.name
    loose.parent.mkdir()
    loose.write_bytes(log.read_bytes())
    d = inputs.discover([str(loose), str(tmp_path / "loose")])
    assert not d.inputs and d.errors == [
        (
            str(loose),
            "a Kafka log segment, read only in its <topic>-<partition> directory (the topic and "
            "partition of its rows): 'loose' is not one",
        )
    ]
    text = tmp_path / "app-1" / "00000000000000000000.log"  # a text log named like one: as before
    text.parent.mkdir()
    text.write_text("2026-11-27 broker started\n" * 3)
    assert inputs.discover([str(text)]).errors == [(str(text), inputs.NOT_INPUT)]


def test_splits_come_in_whole_rounds_one_per_core(tmp_path):
    """A capture set larger than a split per core is cut into whole rounds of splits, one per core
    each (a stage of 3 equal tasks on 2 cores takes 2 task times; of 4 smaller ones, 1.5), never
    above split_size; one core keeps split_size; a set smaller than a split per core gives each
    core one."""
    mib = 1 << 20
    cap = inputs.Input(str(tmp_path / "c.pcap"), "pcap", 401_900_000, 0, "", 0)

    def splits(total: int, cores: int) -> int:
        size = inputs.effective_split_size([dataclasses.replace(cap, size=total)], 128 * mib, cores)
        return -(-total // size)

    assert splits(401_900_000, 1) == 3
    assert splits(401_900_000, 2) == 4
    assert splits(257 * mib, 2) == 4 and splits(256 * mib, 2) == 2
    assert splits(1_200_000_000, 8) == 16 and splits(1_000_000_000, 8) == 8
    assert splits(100_000_000, 2) == 2 and splits(100_000_000, 4) == 4
