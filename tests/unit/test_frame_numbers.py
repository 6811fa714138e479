"""first_frame / last_frame of commands and streams rows are the frame numbers tshark shows (and
messages rows name their carrying frame's).

The answers (tests/support/frames.py: tshark's packets, their sequence numbers and lengths, no
brokerscope code) were recorded with TShark 4.0 (Debian 12) in tests/data/frames/tshark_frames.json
for every sample and public capture, pcap and pcapng, and a pcapng of two interfaces
(tests/data/frames/README.md); they are checked without tshark, and compared with tshark itself
where it is installed. The numbers do not depend on how a file is cut into splits, nor on an
ingest filter (the records it drops still count).
"""

from __future__ import annotations

import json
import shutil

import pytest

from brokerscope.config import Settings
from brokerscope.streams import decode_files
from tests.conftest import CAPTURES, ROOT, SAMPLE_DATA
from tests.support.frames import FRAMES_DATA, RECORDED, answers, captures, label

ANSWERS = json.loads(RECORDED.read_text())
TSHARK = shutil.which("tshark") is not None


def _key(r: dict) -> str:
    return f"{r['conn_id']}|{r['direction']}|{r['stream_offset']}"


def _frames(out: dict) -> tuple[dict, dict]:
    streams = {r["conn_id"]: [r["first_frame"], r["last_frame"]] for r in out["streams"]}
    commands = {_key(r): [r["first_frame"], r["last_frame"]] for r in out["commands"]}
    return streams, commands


def test_every_capture_has_recorded_answers():
    assert sorted(ANSWERS) == sorted(label(p) for p in captures())
    assert len(ANSWERS) >= 30


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_frames_equal_tshark_recorded(name):
    out = decode_files([str(ROOT / name)])
    streams, commands = _frames(out)
    assert streams == ANSWERS[name]["streams"]
    assert ANSWERS[name]["commands"]
    for k, v in ANSWERS[name]["commands"].items():
        assert commands[k] == v, k
    for r in out["commands"]:
        assert 1 <= r["first_frame"] <= r["last_frame"], r


@pytest.mark.skipif(not TSHARK, reason="tshark not installed")
@pytest.mark.parametrize("path", captures(), ids=label)
def test_frames_equal_tshark(path):
    """Every row tshark can answer for, not only the recorded ones; the recording is tshark's."""
    out = decode_files([str(path)])
    ans = answers(path, out)
    streams, commands = _frames(out)
    assert streams == ans["streams"]
    assert len(ans["commands"]) >= len(commands) - 1  # rows whose bytes were not all captured
    for k, v in ans["commands"].items():
        assert commands[k] == v, k
    rec = ANSWERS[label(path)]
    assert rec["streams"] == ans["streams"]
    assert {k: ans["commands"][k] for k in rec["commands"]} == rec["commands"]


SPLIT_CASES = [
    FRAMES_DATA / "two_interfaces.pcapng",
    CAPTURES / "ndpi" / "kafka.pcapng",
    SAMPLE_DATA / "kafka" / "txn.pcap",
    SAMPLE_DATA / "pulsar" / "pulsar_chunked.pcap",
]


@pytest.mark.parametrize("path", SPLIT_CASES, ids=lambda p: p.name)
def test_frames_do_not_depend_on_splits(path):
    """Cut into 900-byte splits (each resyncs to its first record), the frame numbers are the
    file's: a split's records follow those of the splits before it."""
    whole = decode_files([str(path)])
    cut = decode_files([str(path)], Settings.load(overrides={"capture": {"split_size": 900}}))
    assert len(cut["_capture_stats"]) >= 10
    assert _frames(cut) == _frames(whole)
    streams, commands = _frames(whole)
    rec = ANSWERS[label(path)]
    assert streams == rec["streams"]
    assert {k: commands[k] for k in rec["commands"]} == rec["commands"]


@pytest.mark.parametrize("split_size", [0, 900])
def test_filtered_records_still_count(split_size):
    """An ingest filter drops records (here every packet but one connection's, and the records
    before a time) before they are decoded; the frame numbers of the rows kept are still those of
    the file, in one split or many."""
    path = str(CAPTURES / "ndpi" / "kafka.pcapng")
    whole_streams, whole_commands = _frames(decode_files([path]))
    over = {"filter": {"hosts": ["172.16.0.0/12"], "ports": ["9092"], "since": "2023-04-18T20:00:00Z"}}
    if split_size:
        over["capture"] = {"split_size": split_size}
    out = decode_files([path], Settings.load(overrides=over))
    assert sum(s.get("filtered", 0) for s in out["_capture_stats"]) > 19
    streams, commands = _frames(out)
    assert commands and streams
    for k, v in commands.items():
        assert whole_commands[k] == v, k
    assert min(f for f, _ in streams.values()) > 1  # the first records were filtered, and counted


def _kafka_midstream(path: str, exchanges: int) -> None:
    """A Kafka connection caught mid-stream: first a response whose request is not in the
    capture (held for inference until the connection ends), then `exchanges` Produce pairs,
    one packet each (frame numbers 1, 2, 3, ...)."""
    from tests.support.synth import ACK, PSH, PcapWriter, frame
    from tests.unit.kafka import kit

    cli, srv = ("10.0.0.1", 40000), ("10.0.0.2", 9092)
    cseq, sseq = 1000, 9000
    w = PcapWriter(path)
    ts = 1_700_000_000_000_000_000

    def send(src, dst, seq, ack, data):
        nonlocal ts
        ts += 1_000_000
        w.write(ts, frame(*src, *dst, seq, ack, ACK | PSH, data))
        return seq + len(data)

    sseq = send(srv, cli, sseq, cseq, kit.produce_response(3, "t", 0, 5, corr=999))
    recs = kit.records([(b"k", b"v" * 50, [])])
    for i in range(exchanges):
        cseq = send(cli, srv, cseq, sseq, kit.produce_request(3, "t", 0, recs, corr=i))
        sseq = send(srv, cli, sseq, cseq, kit.produce_response(3, "t", 0, i, corr=i))
    w.close()


def test_the_frame_index_stays_bounded(tmp_path, monkeypatch):
    """The driver's per-direction index of packets (one entry per delivered packet) is pruned
    below Conversation.low_water as it grows, and the rows name the same frames: among them a
    response held for inference to the end of the connection, from the first packet."""
    from brokerscope import streams

    path = str(tmp_path / "long.pcap")
    _kafka_midstream(path, 300)
    whole = decode_files([path])
    held = [r for r in whole["commands"] if r["decode_status"] == "request_missing"]
    assert [(r["first_frame"], r["last_frame"]) for r in held] == [(1, 1)]
    last = sorted(
        (r["direction"], r["first_frame"], r["last_frame"])
        for r in whole["commands"]
        if r["correlation_id"] == 299
    )
    assert last == [("c2s", 600, 600), ("s2c", 601, 601)]
    sizes = []
    real = streams._Frames.prune

    def prune(self, low):
        real(self, low)
        sizes.append(len(self.starts))

    monkeypatch.setattr(streams, "PRUNE_AT", 16)
    monkeypatch.setattr(streams._Frames, "prune", prune)
    pruned = decode_files([path])
    assert _frames(pruned) == _frames(whole)
    assert len(sizes) > 10
    # c2s: everything below the pending bytes goes; s2c: kept from the held response on
    assert min(sizes) <= 2 and max(sizes) > 16

    # without the held response's offset in low_water, its row would lose its frames
    from brokerscope.protocols import base
    from brokerscope.protocols.kafka.conversation import KafkaConversation

    monkeypatch.setattr(KafkaConversation, "low_water", base.Conversation.low_water)
    dropped = decode_files([path])
    held = [r for r in dropped["commands"] if r["decode_status"] == "request_missing"]
    assert [(r["first_frame"], r["last_frame"]) for r in held] == [(None, None)]


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_messages_name_the_frames_that_carried_them(name):
    """A messages row's frames are its carrying frame's: a commands row of the same connection
    and direction (produce: c2s, deliver: s2c), whose frames are tshark's (above); a chunked
    Pulsar message runs from its first chunk's first packet to its last chunk's last packet."""
    out = decode_files([str(ROOT / name)])
    cmds: dict[tuple, set] = {}
    for r in out["commands"]:
        cmds.setdefault((r["conn_id"], r["direction"]), set()).add((r["first_frame"], r["last_frame"]))
    for r in out["messages"]:
        sent = cmds[(r["conn_id"], "c2s" if r["direction"] == "produce" else "s2c")]
        span = (r["first_frame"], r["last_frame"])
        if '"chunks"' in (r["details"] or "") or r["decode_status"] == "chunk_incomplete":
            assert span[0] in {f for f, _ in sent} and span[1] in {last for _, last in sent}, r
            assert span[0] < span[1], r
        else:
            assert span in sent, r


def test_a_chunked_message_spans_its_chunks():
    out = decode_files([str(SAMPLE_DATA / "pulsar" / "pulsar_chunked.pcap")])
    sends = sorted(r["first_frame"] for r in out["commands"] if r["command"] == "SEND")
    chunked = [r for r in out["messages"] if r["direction"] == "produce" and '"chunks"' in r["details"]]
    assert [(r["first_frame"], r["last_frame"]) for r in chunked] == [
        (sends[0], sends[2]),
        (sends[3], sends[5]),
    ]
