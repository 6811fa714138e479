"""`brokerscope extract`: the packets of a row's connection, or of a capture's time window, read
back from the original inputs of the sample-data lake, checked against scapy's reading of those
inputs (an independent reader) packet for packet: time, length and bytes, and where tshark is
installed, tshark's reading of the output against its own filter of the connection on the source."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from deltalake import DeltaTable
from scapy.layers.inet import IP, TCP
from scapy.utils import PcapNgReader, PcapReader, rdpcap

from tests.integration.test_cli import run

pytestmark = pytest.mark.spark


def _streams(lake: str) -> list[dict]:
    return DeltaTable(f"{lake}/streams").to_pyarrow_table().to_pylist()


def _path_of(lake: str, capture_id: str) -> str:
    rows = DeltaTable(f"{lake}/inputs").to_pyarrow_table().to_pylist()
    return next(r["path"] for r in rows if r["capture_id"] == capture_id)


def _packets(path: str) -> list[tuple[float, bytes]]:
    """(time, frame bytes) of every packet, by scapy."""
    with open(path, "rb") as fh:
        ng = fh.read(4) == b"\x0a\x0d\x0d\x0a"
    reader = PcapNgReader(path) if ng else PcapReader(path)
    with reader as r:
        return [(float(p.time), bytes(p)) for p in r]


def _of_conn(path: str, row: dict) -> list[tuple[float, bytes]]:
    ends = {(row["client_ip"], row["client_port"]), (row["server_ip"], row["server_port"])}
    out = []
    for p in rdpcap(path):
        if IP in p and TCP in p and {(p[IP].src, p[TCP].sport), (p[IP].dst, p[TCP].dport)} == ends:
            out.append((float(p.time), bytes(p)))
    return out


def _tshark(args: list[str]) -> list[str]:
    res = subprocess.run(["tshark", "-r", *args], capture_output=True, text=True, check=True)
    return res.stdout.splitlines()


def _conn(lake: str, kind: str) -> dict:
    """The sample lake's connection with the most packets among captures of `kind`."""
    rows = [r for r in _streams(lake) if _path_of(lake, r["capture_id"]).endswith(kind)]
    return max(rows, key=lambda r: (r["c2s_packets"] + r["s2c_packets"], r["conn_id"]))


@pytest.mark.parametrize("kind", [".pcap", ".pcapng"])
def test_a_connection_comes_out_packet_for_packet(sample_lake, tmp_path, capsys, kind):
    row = _conn(sample_lake, kind)
    src = _path_of(sample_lake, row["capture_id"])
    want = _of_conn(src, row)
    assert len(want) >= 2
    out = tmp_path / "conn.pcapng"
    rc, stdout, _ = run(capsys, "extract", "--lake", sample_lake, "--conn-id", row["conn_id"], "-o", str(out))
    assert rc == 0
    assert f"wrote {len(want)} packet(s) from 1 file(s)" in stdout
    got = _packets(str(out))
    assert [b for _, b in got] == [b for _, b in want]
    assert [round(t, 6) for t, _ in got] == [round(t, 6) for t, _ in want]
    if shutil.which("tshark"):  # Wireshark's reading: the same packets as its filter on the source
        conn = (
            f"ip.addr=={row['client_ip']} && ip.addr=={row['server_ip']}"
            f" && tcp.port=={row['client_port']} && tcp.port=={row['server_port']}"
        )
        fields = ["-T", "fields", "-e", "frame.time_epoch", "-e", "frame.len", "-e", "tcp.stream"]
        of_out = _tshark([str(out), *fields])
        assert {ln.split("\t")[2] for ln in of_out} == {"0"}  # one TCP conversation, nothing else
        assert [ln.split("\t")[:2] for ln in of_out] == [
            ln.split("\t")[:2] for ln in _tshark([src, "-Y", conn, *fields])
        ]


def test_a_pcap_source_can_come_out_as_pcap_byte_for_byte(sample_lake, tmp_path, capsys):
    row = _conn(sample_lake, ".pcap")
    src = _path_of(sample_lake, row["capture_id"])
    out = tmp_path / "conn.pcap"
    rc, _, _ = run(capsys, "extract", "--lake", sample_lake, "--conn-id", row["conn_id"], "-o", str(out))
    assert rc == 0
    data, orig = out.read_bytes(), open(src, "rb").read()
    assert data[:24] == orig[:24]  # the source's own header: link type, snap length, resolution
    pos, n = 24, 0
    while pos < len(data):  # every record is a record of the source, verbatim
        incl = int.from_bytes(data[pos + 8 : pos + 12], "little")
        assert data[pos : pos + 16 + incl] in orig
        pos, n = pos + 16 + incl, n + 1
    assert n == len(_of_conn(src, row))


def test_a_time_window_of_a_capture(sample_lake, tmp_path, capsys):
    row = _conn(sample_lake, ".pcapng")
    src = _path_of(sample_lake, row["capture_id"])
    tcp = [(float(p.time), bytes(p)) for p in rdpcap(src) if TCP in p]
    lo, hi = tcp[len(tcp) // 4][0], tcp[3 * len(tcp) // 4][0]
    want = [b for t, b in tcp if lo <= t < hi]
    out = tmp_path / "window.pcapng"
    argv = ["extract", "--lake", sample_lake, "--capture-id", row["capture_id"], "-o", str(out)]
    rc, _, _ = run(capsys, *argv, "--since", f"{lo:.6f}", "--until", f"{hi:.6f}")
    assert rc == 0
    assert [b for _, b in _packets(str(out))] == want


def test_what_cannot_be_extracted_is_one_line(sample_lake, tmp_path, capsys):
    out = tmp_path / "x.pcapng"
    rc, _, err = run(
        capsys, "extract", "--lake", sample_lake, "--conn-id", "0123456789abcdef", "-o", str(out)
    )
    assert rc == 2 and "no connection 0123456789abcdef" in err and not out.exists()
    row = _conn(sample_lake, ".pcap")
    argv = ["extract", "--lake", sample_lake, "--conn-id", row["conn_id"], "-o", str(out)]
    rc, _, err = run(capsys, *argv, "--until", "1970-01-02T00:00:00Z")
    assert rc == 1 and "no packet matched" in err and not out.exists()
    rc, _, err = run(capsys, *argv, "--since", "yesterday")
    assert rc == 2 and "not a time: 'yesterday'" in err


def test_the_ingest_filter_flags_narrow_a_capture(sample_lake, tmp_path, capsys):
    row = _conn(sample_lake, ".pcapng")
    src = _path_of(sample_lake, row["capture_id"])
    port = row["client_port"]
    want = [bytes(p) for p in rdpcap(src) if TCP in p and port in (p[TCP].sport, p[TCP].dport)]
    out = tmp_path / "port.pcapng"
    argv = ["extract", "--lake", sample_lake, "--capture-id", row["capture_id"], "-o", str(out)]
    rc, _, _ = run(capsys, *argv, "--tcp-port", str(port), "--host", row["client_ip"])
    assert rc == 0
    assert [b for _, b in _packets(str(out))] == want


def _commands(lake: str) -> list[dict]:
    return DeltaTable(f"{lake}/commands").to_pyarrow_table().to_pylist()


@pytest.mark.parametrize("kind", [".pcap", ".pcapng"])
def test_the_frames_of_a_commands_row_come_out_as_in_the_original_file(sample_lake, tmp_path, capsys, kind):
    """Query, extract, open: a commands row's first_frame..last_frame, extracted from its capture,
    are the packets Wireshark numbers so in the original file (read back by scapy, byte for byte,
    and by tshark where installed)."""
    rows = [r for r in _commands(sample_lake) if _path_of(sample_lake, r["capture_id"]).endswith(kind)]
    row = max(rows, key=lambda r: (r["last_frame"] - r["first_frame"], r["size"], r["conn_id"]))
    assert row["last_frame"] > row["first_frame"] or kind == ".pcapng"  # the pcap: a frame spanning packets
    src = _path_of(sample_lake, row["capture_id"])
    want = _packets(src)[row["first_frame"] - 1 : row["last_frame"]]
    out = tmp_path / "row.pcapng"
    argv = ["extract", "--lake", sample_lake, "--capture-id", row["capture_id"], "-o", str(out)]
    rc, stdout, _ = run(capsys, *argv, "--frames", f"{row['first_frame']}-{row['last_frame']}")
    assert rc == 0 and f"wrote {len(want)} packet(s)" in stdout
    assert _packets(str(out)) == want
    if shutil.which("tshark"):
        lines = subprocess.run(
            ["tshark", "-r", str(out), "-T", "fields", "-e", "frame.len"], capture_output=True, text=True
        ).stdout.split()
        assert [int(x) for x in lines] == [len(b) for _, b in want]
    # single frames, repeatable, in any order: the file's order comes out
    pick = [row["last_frame"] + 1, max(row["first_frame"] - 1, 1)]
    rc, _, _ = run(capsys, *argv, "--frame", str(pick[0]), "--frame", str(pick[1]))
    every = _packets(src)
    assert rc == 0 and _packets(str(out)) == [every[pick[1] - 1], every[pick[0] - 1]]


def test_frames_want_one_capture(sample_lake, tmp_path, capsys):
    row = _conn(sample_lake, ".pcap")
    out = tmp_path / "x.pcapng"
    rc, _, err = run(
        capsys, "extract", "--lake", sample_lake, "--conn-id", row["conn_id"], "--frame", "1", "-o", str(out)
    )
    assert rc == 2 and "frame numbers are per file" in err and not out.exists()
    argv = ["extract", "--lake", sample_lake, "--capture-id", row["capture_id"], "-o", str(out)]
    rc, _, err = run(capsys, *argv, "--frames", "0-3")
    assert rc == 2 and "frame numbers start at 1" in err
    rc, _, err = run(capsys, *argv, "--frame", "1000000")
    # how many frames it has (a user trial asked for 500-600 of 41: no hint)
    n = sum(1 for _ in PcapReader(_path_of(sample_lake, row["capture_id"])))
    assert (
        rc == 1 and err == f"brokerscope: no packet matched: nothing written (the capture has {n:,} frames)\n"
    )
    # a range running past the end writes what there is and says what is not (a user trial asked
    # for 119-500 of 120: 'wrote 2 packet(s)', nothing said of the rest)
    rc, got, err = run(capsys, *argv, "--frames", f"{n - 1}-{n + 380}")
    assert rc == 0 and "wrote 2 packet(s)" in got
    assert err == (
        f"brokerscope: 380 frame number(s) past the capture's {n:,} frames (from {n + 1:,}): "
        "nothing written for them\n"
    )


def test_a_capture_comes_from_any_path_that_holds_it_and_says_why_none_does(spark, tmp_path, capsys):
    """Found by a user trial: a capture ingested under two paths (the same bytes) came out of the
    first path recorded even when that one was moved away ('the capture is gone', exit 2); a
    capture whose path then grew (replaced) and a segment file's capture said 'no packet matched'
    (exit 1); ids pasted in upper case were 'no capture'. Now: the path still holding it, whatever
    the case of the id, once (not once per path); a replaced or segment capture is exit 2 saying
    what it is."""
    from brokerscope import pipeline
    from brokerscope.capture import capture_id
    from brokerscope.config import Settings
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "iggy" / "client_vsr.pcap"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    shutil.copy(src, tmp_path / "a" / "x.pcap")
    shutil.copy(src, tmp_path / "b" / "y.pcap")
    cut = tmp_path / "grow.pcap"
    cut.write_bytes(src.read_bytes()[:3000])
    lake = tmp_path / "lake"
    settings = Settings.load(overrides={"lake": {"path": str(lake)}})
    segs = SAMPLE_DATA / "kafka" / "segments"
    pipeline.ingest([str(tmp_path / "a"), str(tmp_path / "b"), str(cut), str(segs)], settings, spark=spark)
    cut_id = capture_id(cut)
    shutil.copy(src, cut)  # it grew: the cut content is replaced
    pipeline.ingest([str(cut)], settings, spark=spark, skip_ingested=True)
    cid = capture_id(src)
    want = [(float(p.time), bytes(p)) for p in rdpcap(str(src)) if TCP in p]
    out = tmp_path / "o.pcapng"
    rc, stdout, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cid, "-o", str(out))
    assert rc == 0 and "from 1 file(s)" in stdout, err
    assert _packets(str(out)) == want  # once, not once per path
    (tmp_path / "a" / "x.pcap").rename(tmp_path / "a" / "x.moved")
    rc, stdout, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cid.upper(), "-o", str(out))
    assert rc == 0 and "from 1 file(s)" in stdout, err
    assert _packets(str(out)) == want
    rc, _, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cut_id, "-o", str(out))
    assert rc == 2 and f"was replaced by {cid}" in err, err
    seg = next(
        r["capture_id"]
        for r in DeltaTable(str(lake / "inputs")).to_pyarrow_table().to_pylist()
        if r["path"].endswith(".log")
    )
    rc, _, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", seg, "-o", str(out))
    assert rc == 2 and "holds no packets to extract" in err, err
    (tmp_path / "b" / "y.pcap").unlink()  # the grown file holds the same bytes: it serves
    rc, stdout, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cid, "-o", str(out))
    assert rc == 0 and _packets(str(out)) == want, err
    cut.unlink()
    rc, _, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cid, "-o", str(out))
    assert rc == 2 and all(n in err for n in ("x.pcap", "y.pcap", "grow.pcap")) and "gone" in err, err


def test_a_capture_changed_in_place_with_its_size_is_not_extracted(spark, tmp_path, capsys):
    """Found by a user trial: one byte of a packet's payload changed, the size kept, and extract
    wrote the new bytes as the capture's packets (only the size was checked). Its content must
    hash to the capture id; a gzip file recorded as the capture it decompresses to (tcpdump -z
    gzip after ingest) still serves."""
    import gzip

    from brokerscope import pipeline
    from brokerscope.capture import capture_id
    from brokerscope.config import Settings
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "iggy" / "client_vsr.pcap"
    cap = tmp_path / "x.pcap"
    shutil.copy(src, cap)
    lake = tmp_path / "lake"
    settings = Settings.load(overrides={"lake": {"path": str(lake)}})
    pipeline.ingest([str(cap)], settings, spark=spark)
    cid = capture_id(cap)
    want = [(float(p.time), bytes(p)) for p in rdpcap(str(src)) if TCP in p]
    out = tmp_path / "o.pcapng"
    data = bytearray(cap.read_bytes())
    data[-10] ^= 0xFF  # the last packet's payload
    cap.write_bytes(bytes(data))
    rc, _, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cid, "-o", str(out))
    assert rc == 2 and f"{cap}: changed since it was ingested (the same size, other bytes" in err, err
    assert not out.exists()
    cap.write_bytes(src.read_bytes())  # back as it was, then gzipped in place: recorded, not decoded
    with open(cap, "rb") as f, gzip.open(f"{cap}.gz", "wb") as g:
        g.write(f.read())
    cap.unlink()
    pipeline.ingest([str(tmp_path)], settings, spark=spark, skip_ingested=True)
    rc, stdout, err = run(capsys, "extract", "--lake", str(lake), "--capture-id", cid, "-o", str(out))
    assert rc == 0 and "from 1 file(s)" in stdout, err
    assert _packets(str(out)) == want


def test_a_row_past_damage_comes_out_as_in_the_undamaged_file(spark, tmp_path, capsys):
    """Found by a user trial: past a pcap record whose caplen was damaged, `extract --frames` of a
    row's frames found nothing ('no packet matched', exit 1), and the rows' frame numbers were one
    less than the undamaged file's. Now the damaged record keeps its number (a frame with no
    packet) and extract walks the frames as ingest does: a row past the damage comes out as the
    undamaged file's packets of its numbers; the damaged frame alone writes nothing, saying why."""
    import struct

    from brokerscope import pipeline
    from brokerscope.capture import capture_id
    from brokerscope.config import Settings
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "kafka" / "txn.pcap"
    buf = bytearray(src.read_bytes())
    off, offs = 24, []
    while off + 16 <= len(buf):
        offs.append(off)
        off += 16 + struct.unpack_from("<I", buf, off + 8)[0]
    n = len(offs) // 3
    struct.pack_into("<I", buf, offs[n - 1] + 8, struct.unpack_from("<I", buf, offs[n - 1] + 8)[0] + 100)
    path = tmp_path / "d.pcap"
    path.write_bytes(bytes(buf))
    lake = tmp_path / "lake"
    settings = Settings.load(overrides={"lake": {"path": str(lake)}})
    pipeline.ingest([str(path)], settings, spark=spark)
    cid = capture_id(path)
    rows = [r for r in _commands(str(lake)) if min(r["first_frame"], r["last_frame"]) > n]
    assert rows
    row = max(rows, key=lambda r: (abs(r["last_frame"] - r["first_frame"]), r["conn_id"]))
    a, b = sorted((row["first_frame"], row["last_frame"]))
    every = _packets(str(src))  # the undamaged file
    out = tmp_path / "row.pcapng"
    argv = ["extract", "--lake", str(lake), "--capture-id", cid, "-o", str(out)]
    rc, stdout, err = run(capsys, *argv, "--frames", f"{a}-{b}")
    assert rc == 0 and f"wrote {b - a + 1} packet(s)" in stdout, err
    assert _packets(str(out)) == every[a - 1 : b]
    rc, stdout, err = run(capsys, *argv, "--frames", f"{n - 1}-{n + 1}")  # across it
    assert rc == 0 and "wrote 2 packet(s)" in stdout and f"frame {n}: a record whose length is damaged" in err
    assert _packets(str(out)) == [every[n - 2], every[n]]
    rc, _, err = run(capsys, *argv, "--frame", str(n))
    assert rc == 1 and "no packet in it" in err and "no packet matched" in err


def test_a_connection_of_a_file_whose_clock_stepped_back_comes_out_whole(spark, tmp_path, capsys):
    """A user trial: with a capture's clock stepped back (2 s, or one record a day off), `extract
    --conn-id` kept only the packets inside the connection's first and last times: 'no packet
    matched' (exit 1), or 30 of 34 packets with exit 0, the ones left out those of the request
    whose latency was flagged. A connection of one file now comes out as its frames."""
    from brokerscope import pipeline
    from brokerscope.config import Settings
    from tests.conftest import SAMPLE_DATA
    from tests.support import replay

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    steps = replay.stepped_back(src, tmp_path / "steps.pcap", 30, 2.5)
    steps = replay.stepped_back(steps, tmp_path / "steps2.pcap", 86, 2.0)
    oneoff = replay.stepped_back(src, tmp_path / "oneoff.pcap", 44, -86_400.0, count=1)
    for cap in (steps, oneoff):
        lake = tmp_path / f"lake-{cap.stem}"
        pipeline.ingest([str(cap)], Settings.load(overrides={"lake": {"path": str(lake)}}), spark=spark)
        for row in _streams(str(lake)):
            want = _of_conn(str(cap), row)
            out = tmp_path / "conn.pcapng"
            argv = ["extract", "--lake", str(lake), "--conn-id", row["conn_id"], "-o", str(out)]
            rc, stdout, err = run(capsys, *argv)
            assert rc == 0 and f"wrote {len(want)} packet(s)" in stdout, (cap.name, row["conn_id"], err)
            assert [b for _, b in _packets(str(out))] == [b for _, b in want]


@pytest.mark.parametrize("suffix", [".pcap", ".pcapng"])
def test_a_connection_captured_per_direction_comes_out_in_time_order(spark, tmp_path, capsys, suffix):
    """One place's capture written per direction (tcpdump -Q out / -Q in): a connection's packets
    came out one file after the other (every request, then every response; a user trial: mergecap
    needed before Wireshark could follow the stream). Pcap files with one header are merged by
    record time now, as mergecap merges: the packets of the connection as the whole capture has
    them, in its order."""
    from brokerscope import pipeline
    from brokerscope.config import Settings
    from tests.conftest import SAMPLE_DATA
    from tests.support import replay

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    halves = replay.by_direction(src, tmp_path / "out.pcap", tmp_path / "in.pcap", 36525)
    lake = tmp_path / "lake"
    pipeline.ingest(
        [str(p) for p in halves], Settings.load(overrides={"lake": {"path": str(lake)}}), spark=spark
    )
    rows = _streams(str(lake))
    assert len(rows) == 5
    for row in rows:
        want = _of_conn(str(src), row)
        out = tmp_path / f"conn{suffix}"
        rc, stdout, err = run(
            capsys, "extract", "--lake", str(lake), "--conn-id", row["conn_id"], "-o", str(out)
        )
        assert rc == 0 and f"wrote {len(want)} packet(s)" in stdout, (row["conn_id"], err)
        assert _packets(str(out)) == want
