"""Several vantage points (issue 16): the journeys traffic of test_journeys (confluent-kafka against
librdkafka's mock cluster, captured on loopback) cut into the captures three hosts would take, their
clocks set apart with editcap -t, and ingested as one capture set.

- producer.pcap: the producer's connections, as captured (the producer host's clock);
- broker.pcap: every connection as the broker's host sees it: a request `path` ns later, a
  response `path` ns earlier than its client does (the path between them: at most PATH_NS, and a
  third of the shortest time from a request packet to the next response packet, so no packet
  passes another), then `editcap -t -1.5`: the broker's clock 1.5 s behind the producer's;
- consumer.pcap: the consumers' connections, `editcap -t 0.25`: the consumer's clock 0.25 s ahead.

The broker shares connections with both others: it is the reference, the producer's offset is
+1.5 s and the consumer's +1.75 s. The journeys must be the single capture's, a step's time taken
from its client's host and put on the broker's clock."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from brokerscope import pipeline
from brokerscope.config import Settings
from brokerscope.streams import decode_files
from tests.integration.test_journeys import EARLY, LATE, PER_BATCH, _record
from tests.support.lakecheck import delta_rs_rows, normalized
from tests.support.loopcap import _tcp_ports, read_pcap, write_pcap

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"),
    pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (wireshark-common) not installed"),
]

PATH_NS = 5_000  # one way between a client's host and the broker's
BROKER_SHIFT, CONSUMER_SHIFT = "-1.5", "0.25"  # editcap -t, seconds
PRODUCER_OFFSET_US = 1_500_000.0  # the producer's clock minus the broker's
CONSUMER_OFFSET_US = 1_750_000.0
TS_STEPS = ("produced_ts", "acked_ts", "delivered_ts", "committed_ts")
LATENCIES = ("produce_to_ack_us", "ack_to_deliver_us", "produce_to_deliver_us", "deliver_to_commit_us")


def _editcap(src: Path, dest: Path, seconds: str) -> None:
    subprocess.run(["editcap", "-t", seconds, str(src), str(dest)], check=True, capture_output=True)


def _path_ns(frames: list[tuple[int, bytes]], bport: int) -> int:
    """The one-way time between the clients' hosts and the broker's the frames allow: PATH_NS,
    or less where a response packet followed a request packet sooner than 3 x PATH_NS."""
    gap, last_c2s = PATH_NS * 3, {}
    for ts, f in frames:
        a, b = _tcp_ports(f)
        if b == bport:
            last_c2s[a] = ts
        elif b in last_c2s:
            gap = min(gap, ts - last_c2s.pop(b))
    return gap // 3


def _broker_view(frames: list[tuple[int, bytes]], bport: int, path: int) -> list[tuple[int, bytes]]:
    """The frames as the broker's host captures them: requests `path` ns later, responses earlier."""
    return [(ts + (path if _tcp_ports(f)[1] == bport else -path), f) for ts, f in frames]


def _settings(lake: Path, **capture) -> Settings:
    over = {"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}, "journeys": {"enabled": True}}
    if capture:
        over["capture"] = capture
    return Settings.load(overrides=over)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> dict:
    """The recording, the roles of its connections, and the three hosts' captures."""
    tmp = tmp_path_factory.mktemp("vantage")
    run = _record(tmp)
    single = decode_files([run["pcap"]])
    (bport,) = {r["server_port"] for r in single["streams"]}
    clients = {r["client_port"]: r["client_id"] for r in single["commands"] if r["client_id"]}
    producer = {p for p, c in clients.items() if c == "bs-journeys-producer"}
    consumers = {p for p, c in clients.items() if c in (f"{EARLY}-client", f"{LATE}-client")}
    assert producer and consumers and len(producer) + len(consumers) == len(single["streams"])
    frames = read_pcap(run["pcap"])

    def port(f: bytes) -> int:
        a, b = _tcp_ports(f)
        return a if b == bport else b

    paths = {name: tmp / f"{name}.pcap" for name in ("producer", "broker", "consumer")}
    write_pcap(str(paths["producer"]), [(t, f) for t, f in frames if port(f) in producer])
    path = _path_ns(frames, bport)
    assert path >= 500, f"packets too close to model a path: {path} ns"
    broker = _broker_view(frames, bport, path)
    assert [t for t, _f in broker] == sorted(t for t, _f in broker)  # no packet passed another
    write_pcap(str(tmp / "broker0.pcap"), broker)
    _editcap(tmp / "broker0.pcap", paths["broker"], BROKER_SHIFT)
    write_pcap(str(tmp / "consumer0.pcap"), [(t, f) for t, f in frames if port(f) in consumers])
    _editcap(tmp / "consumer0.pcap", paths["consumer"], CONSUMER_SHIFT)
    return {"run": run, "paths": {k: str(v) for k, v in paths.items()}, "tmp": tmp, "path_ns": path}


@pytest.fixture(scope="module")
def lakes(spark, hosts) -> dict:
    """The single capture and the three hosts' captures ingested, each into a lake of its own;
    the three through the shuffle (tiny splits), the others in one task."""
    tmp, paths = hosts["tmp"], hosts["paths"]
    three = [paths["producer"], paths["broker"], paths["consumer"]]
    runs = {
        "single": ([hosts["run"]["pcap"]], {}),
        "three": (three, {"split_size": 900}),
        "apart": ([paths["producer"], paths["consumer"]], {}),  # no connection in common
    }
    out = {}
    for name, (files, capture) in runs.items():
        summary = pipeline.ingest(files, _settings(tmp / name, **capture), spark=spark)
        assert summary.errors == [] and summary.partial == [], name
        out[name] = tmp / name
    return out


def _inputs(lake: Path, paths: dict) -> dict[str, dict]:
    by_path = {r["path"]: r for r in delta_rs_rows(str(lake / "inputs"))}
    return {name: by_path[os.path.realpath(p)] for name, p in paths.items() if os.path.realpath(p) in by_path}


def test_the_offset_of_each_host_is_estimated_within_a_millisecond(lakes, hosts):
    rows = _inputs(lakes["three"], hosts["paths"])
    broker = rows["broker"]["capture_id"]
    assert {r["vantage"] for r in rows.values()} == {r["capture_id"] for r in rows.values()}
    assert {r["clock_offset_ref"] for r in rows.values()} == {broker}  # the host sharing both
    assert rows["broker"]["clock_offset_us"] == 0.0
    for name, want in (("producer", PRODUCER_OFFSET_US), ("consumer", CONSUMER_OFFSET_US)):
        r = rows[name]
        assert abs(r["clock_offset_us"] - want) < 1_000, (name, r["clock_offset_us"])
        # the bound holds the shift applied and comes from the path's round trips
        assert (
            abs(r["clock_offset_us"] - want) <= r["clock_offset_bound_us"] <= hosts["path_ns"] / 1000 + 0.01
        )
        assert r["clock_offset_pairs"] > 5
    print(
        {
            n: (r["clock_offset_us"], r["clock_offset_bound_us"], r["clock_offset_pairs"])
            for n, r in rows.items()
        }
    )


def test_each_host_keeps_the_rows_it_saw(lakes, hosts):
    """Every capture's connections are decoded as it saw them: the broker's are the single
    capture's, the producer's and the consumer's add up to them; none is a retransmission of
    another host's copy. The Spark run through the shuffle equals the Spark-free decode."""
    three = {t: delta_rs_rows(str(lakes["three"] / t)) for t in ("streams", "commands", "messages")}
    single = delta_rs_rows(str(lakes["single"] / "streams"))
    ids = {n: r["capture_id"] for n, r in _inputs(lakes["three"], hosts["paths"]).items()}
    per = {n: [r for r in three["streams"] if r["capture_id"] == c] for n, c in ids.items()}
    assert len(per["broker"]) == len(single) == len(per["producer"]) + len(per["consumer"])
    assert all(r["retransmitted_bytes"] == 0 and r["frames_failed"] == 0 for r in three["streams"])
    assert all(r["capture_ids"] == [r["capture_id"]] for r in three["streams"])
    local = decode_files(list(hosts["paths"].values()))
    for t, rows in three.items():
        assert normalized(rows) == normalized(local[t]), t


def _key(r: dict) -> tuple:
    return (r["partition"], r["offset"], r["consumer"])


def test_journeys_are_the_single_captures_on_the_brokers_clock(lakes, hosts):
    single = {_key(r): r for r in delta_rs_rows(str(lakes["single"] / "journeys"))}
    three = {_key(r): r for r in delta_rs_rows(str(lakes["three"] / "journeys"))}
    assert len(single) == 4 * PER_BATCH and set(three) == set(single)  # one row per message and group
    streams = delta_rs_rows(str(lakes["three"] / "streams"))
    ids = {n: r["capture_id"] for n, r in _inputs(lakes["three"], hosts["paths"]).items()}
    conns = {n: {r["conn_id"] for r in streams if r["capture_id"] == c} for n, c in ids.items()}
    behind = PRODUCER_OFFSET_US / 1e6  # the broker's clock, behind the producer's (the single capture's)
    for k, one in single.items():
        r = three[k]
        assert r["clock_corrected"] is True and one["clock_corrected"] is False
        for c in ("status", "deliveries", "redeliveries", "produce_attempts", "key_hash", "message_id"):
            assert r[c] == one[c], (k, c)
        for c in TS_STEPS:
            assert (r[c] is None) == (one[c] is None), (k, c)
            if one[c] is not None:
                assert (one[c] - r[c]).total_seconds() == pytest.approx(behind, abs=1e-6), (k, c)
        for c in LATENCIES:
            assert (r[c] is None) == (one[c] is None), (k, c)
            if one[c] is not None:
                assert r[c] == pytest.approx(one[c], abs=1.0), (k, c)  # µs
        # each step from its client's host: the producer's copy of the Produce, the consumer's
        # of the Fetch (the broker's copies of those connections left out)
        assert r["producer_conn_id"] in conns["producer"] and r["capture_id"] == ids["producer"]
        assert r["consumer_conn_id"] is None or r["consumer_conn_id"] in conns["consumer"]
        assert r["produced_ts"] < r["acked_ts"] and (
            r["delivered_ts"] is None or r["acked_ts"] < r["delivered_ts"]
        )


def test_hosts_without_a_connection_in_common_stay_uncorrected(lakes, hosts):
    """The producer's and the consumer's captures alone share no connection: no offset, the
    journeys' times as captured (the consumer's 0.25 s ahead shows in its latencies)."""
    rows = _inputs(lakes["apart"], hosts["paths"])
    assert set(rows) == {"producer", "consumer"}
    for r in rows.values():
        assert r["vantage"] == r["capture_id"]
        assert (
            r["clock_offset_us"] is None and r["clock_offset_ref"] is None and r["clock_offset_pairs"] is None
        )
    single = {_key(r): r for r in delta_rs_rows(str(lakes["single"] / "journeys"))}
    apart = {_key(r): r for r in delta_rs_rows(str(lakes["apart"] / "journeys"))}
    assert set(apart) == set(single)
    for k, r in apart.items():
        assert r["clock_corrected"] is False and r["status"] == single[k]["status"]
        assert r["produced_ts"] == single[k]["produced_ts"]
        if r["produce_to_deliver_us"] is not None:
            skew = r["produce_to_deliver_us"] - single[k]["produce_to_deliver_us"]
            assert skew == pytest.approx(float(CONSUMER_SHIFT) * 1e6, abs=1.0)


def test_a_copy_of_the_capture_shifted_by_editcap(spark, hosts, tmp_path):
    """The same capture taken twice (two interfaces of one path), one copy's clock 1.5 s behind:
    the estimate is the shift, and the journeys are the single capture's."""
    src = hosts["run"]["pcap"]
    shifted = tmp_path / "shifted.pcap"
    _editcap(Path(src), shifted, "-1.5")
    settings = _settings(tmp_path / "lake")
    assert pipeline.ingest([src, str(shifted)], settings, spark=spark).errors == []
    rows = _inputs(tmp_path / "lake", {"orig": src, "shifted": str(shifted)})
    # the reference is one of the two: the other's offset is its clock minus the reference's
    gap = rows["shifted"]["clock_offset_us"] - rows["orig"]["clock_offset_us"]
    assert abs(gap - (-1_500_000.0)) < 1_000
    assert rows["orig"]["clock_offset_ref"] == rows["shifted"]["clock_offset_ref"]
    got = {_key(r): r for r in delta_rs_rows(str(tmp_path / "lake" / "journeys"))}
    assert len(got) == 4 * PER_BATCH
    ref_is_orig = rows["orig"]["clock_offset_us"] == 0.0
    for r in got.values():
        # equal round trips at both: the reference's copy is taken, nothing moved
        assert r["clock_corrected"] is False
        assert r["capture_id"] == rows["orig" if ref_is_orig else "shifted"]["capture_id"]


def test_one_places_capture_written_per_direction_is_one_vantage_point(spark, tmp_path):
    """Two files of one place, one per direction, whose times overlap: one vantage point in
    `inputs` and one connection per 4-tuple, in one task and through the shuffle (the read
    tasks' directions beside their digests): the rows of the Spark-free decode of the files,
    which are the capture's (tests/unit/test_one_place_two_files.py)."""
    from brokerscope import tables
    from tests.conftest import SAMPLE_DATA
    from tests.support import replay

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    halves = [str(p) for p in replay.by_direction(src, tmp_path / "out.pcap", tmp_path / "in.pcap", 36525)]
    want = decode_files(halves)
    assert len(want["streams"]) == 5 and not [r for r in want["streams"] if r["protocol"] != "kafka"]
    for name, capture in (("one", {}), ("shuffle", {"split_size": 900})):
        lake = tmp_path / name
        assert pipeline.ingest(halves, _settings(lake, **capture), spark=spark).errors == []
        for t in tables.DECODED_TABLES:
            assert normalized(delta_rs_rows(str(lake / t))) == normalized(want[t]), (name, t)
        assert len({r["vantage"] for r in delta_rs_rows(str(lake / "inputs"))}) == 1, name


def test_a_place_captured_per_direction_has_its_clock_offset_against_another(spark, tmp_path):
    """The two direction files of one place and a whole capture of another host 20 ms ahead (a
    user trial: every offset null, the journeys uncorrected: requests and responses of the
    place were rows of two captures, paired within one only)."""
    from tests.conftest import SAMPLE_DATA
    from tests.support import replay

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    halves = replay.by_direction(src, tmp_path / "out.pcap", tmp_path / "in.pcap", 36525)
    other = replay.stepped_back(src, tmp_path / "other.pcap", 0, -0.020)
    lake = tmp_path / "lake"
    paths = [str(p) for p in (*halves, other)]
    assert pipeline.ingest(paths, _settings(lake), spark=spark).errors == []
    rows = {Path(r["path"]).name: r for r in delta_rs_rows(str(lake / "inputs"))}
    assert rows["out.pcap"]["vantage"] == rows["in.pcap"]["vantage"] != rows["other.pcap"]["vantage"]
    got = {n: r["clock_offset_us"] for n, r in rows.items()}
    assert abs(abs(got["other.pcap"] - got["in.pcap"]) - 20_000) < 1_000, got
    assert got["in.pcap"] == got["out.pcap"] and rows["other.pcap"]["clock_offset_pairs"] >= 30, rows


def test_a_capture_of_one_direction_alone_is_warned_of(spark, tmp_path):
    """One direction's file ingested alone (its other half left for another run, a user trial:
    0 rows, 'every input read cleanly', not a word): the summary names the connections with
    one endpoint's packets only. Both halves in one run: no such warning."""
    from tests.conftest import SAMPLE_DATA
    from tests.support import replay

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    to_server, to_client = replay.by_direction(src, tmp_path / "out.pcap", tmp_path / "in.pcap", 36525)
    alone = pipeline.ingest([str(to_client)], _settings(tmp_path / "a"), spark=spark)
    (cid,) = alone.seen["one_direction"]
    assert alone.seen["one_direction"][cid] == 5 and alone.rows["commands"] == 0
    said = [line for line in alone.lines() if "with one endpoint's packets only" in line]
    assert said == [
        f"warning: {to_client}: 5 connections with one endpoint's packets only (the other's in "
        "another capture not in this run, or it never answered): requests without their responses, "
        "or responses without requests; a capture per direction is ingested with the other "
        "direction's file in the same run, and a broker on a port not in [ports] named with --port "
        "PROTO=PORT (streams.c2s_packets, streams.s2c_packets, streams.protocol)"
    ]
    both = pipeline.ingest([str(to_server), str(to_client)], _settings(tmp_path / "b"), spark=spark)
    assert "one_direction" not in both.seen and both.rows["commands"] == 67


def test_the_idle_periods_of_a_rotation_are_no_place_and_no_copies(spark, tmp_path):
    """A rotation whose idle periods wrote files of headers only (editcap -i, tcpdump -G): they
    were a vantage point of their own in `inputs` and 'same content as' warnings for every one
    after the first (a user trial). Now they have no vantage point, nothing is said of them, and
    the files with packets around them are one place as before; a real copy is still named."""
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    shutil.copy(src, tmp_path / "cap_1.pcap")
    for n in (2, 3):
        (tmp_path / f"cap_{n}.pcap").write_bytes(src.read_bytes()[:24])
    (tmp_path / "copy_of_1.pcap").write_bytes(src.read_bytes())
    got = pipeline.ingest([str(tmp_path)], _settings(tmp_path / "lake"), spark=spark)
    said = [line for line in got.lines() if "same content as" in line]
    assert said == [
        f"warning: {tmp_path / 'copy_of_1.pcap'}: same content as {tmp_path / 'cap_1.pcap'}, ingested once"
    ]
    rows = {Path(r["path"]).name: r for r in delta_rs_rows(str(tmp_path / "lake" / "inputs"))}
    assert rows["cap_2.pcap"]["vantage"] is None and rows["cap_3.pcap"]["vantage"] is None
    assert rows["cap_2.pcap"]["packets"] == 0 and rows["cap_1.pcap"]["vantage"] is not None
