"""A frame whose size was damaged (larger) runs past the end of the connection or into a capture
gap: the frames it holds are read, it alone is one malformed row (Framer.reread_if_cut with
KafkaRules.cut_start), and a real frame cut by a real gap is not split into frames read out of
its records."""

from __future__ import annotations

import pytest

from brokerscope import tables
from brokerscope.protocols import base
from tests.support.drive import Drive

from .kit import Driver, fetch_request, fetch_response, produce_request, produce_response, records

N = 30
BROKEN = 25  # the request whose size is damaged (+4096)


def _requests(n: int = N) -> list[bytes]:
    """`n` Produce v7 requests, correlation ids 1..n, one message each (kafka-python's encoders)."""
    return [
        produce_request(7, "orders", 0, records([(b"k%d" % i, b"value-%d" % i, [])]), corr=i + 1)
        for i in range(n)
    ]


def _responses(n: int = N) -> list[bytes]:
    return [produce_response(7, "orders", 0, 100 + i, corr=i + 1) for i in range(n)]


def _damaged(frame: bytes, add: int = 4096) -> bytes:
    """`frame` with its size field `add` bytes larger (one bit flipped for 4096)."""
    size = int.from_bytes(frame[:4], "big") + add
    return size.to_bytes(4, "big") + frame[4:]


def _accounted(out: dict, direction: str) -> int:
    return sum(r["size"] for r in out["commands"] if r["direction"] == direction)


def _run(reqs, resps, gap_at: int | None = None, chunk: int | None = None) -> dict:
    """Each request then its response; `gap_at`: that request never captured (a c2s gap)."""
    d = Driver()
    for i, (q, r) in enumerate(zip(reqs, resps)):
        if i == gap_at:
            d.gap(base.C2S, len(q))
        else:
            d.c2s(q, chunk)
        d.s2c(r, chunk)
    return d.close()


@pytest.mark.parametrize("chunk", [None, 7])
def test_a_damaged_size_that_runs_past_the_end_of_the_connection_loses_no_request(chunk):
    """Request 25's size says 4096 bytes more than the connection holds: it waited for bytes
    that never came, and at the close it and the 4 requests after it were one truncated row
    (their messages and latencies lost, their responses request_missing)."""
    reqs, resps = _requests(), _responses()
    reqs[BROKEN] = _damaged(reqs[BROKEN])
    out = _run(reqs, resps, chunk=chunk)
    sent = [r for r in out["commands"] if r["direction"] == "c2s" and r["decode_status"] == "ok"]
    assert sorted(r["correlation_id"] for r in sent) == [i + 1 for i in range(N) if i != BROKEN]
    [bad] = [r for r in out["commands"] if r["direction"] == "c2s" and r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and bad["command"] is None and bad["raw"] is None
    assert "runs past the end of the connection" in bad["decode_error"]
    assert "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(reqs[BROKEN])
    assert _accounted(out, "c2s") == sum(map(len, reqs))
    assert _accounted(out, "s2c") == sum(map(len, resps))
    values = sorted(m["value"] for m in out["messages"] if m["offset"] is not None)
    assert values == sorted(b"value-%d" % i for i in range(N) if i != BROKEN)
    lat = {r["correlation_id"]: r for r in out["latencies"]}
    answered = sorted(c for c, r in lat.items() if r["latency_us"] is not None and r["response_ts_ns"])
    assert answered == [i + 1 for i in range(N) if i != BROKEN]
    # the damaged request's response: its request unknown
    [missing] = [r for r in out["commands"] if r["direction"] == "s2c" and r["decode_status"] != "ok"]
    assert missing["correlation_id"] == BROKEN + 1 and missing["decode_status"] == "request_missing"


def test_a_damaged_size_that_runs_into_a_capture_gap_loses_no_request():
    """The same damage (request 12) followed by a capture gap that took request 20: the gap was
    taken to end inside the damaged frame, one gap row spanning its 4 KiB and requests 13..19
    lost with it. Now they are read, then the gap is a gap."""
    reqs, resps = _requests(), _responses()
    reqs[12] = _damaged(reqs[12])
    out = _run(reqs, resps, gap_at=20)
    sent = [r for r in out["commands"] if r["direction"] == "c2s" and r["decode_status"] == "ok"]
    assert sorted(r["correlation_id"] for r in sent) == [i + 1 for i in range(N) if i not in (12, 20)]
    [bad, gap] = [r for r in out["commands"] if r["direction"] == "c2s" and r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "runs past a capture gap" in bad["decode_error"]
    assert bad["size"] == len(reqs[12]) and bad["raw"] is None
    assert gap["decode_status"] == "gap" and gap["size"] == len(reqs[20])
    assert _accounted(out, "c2s") == sum(map(len, reqs))
    values = sorted(m["value"] for m in out["messages"] if m["offset"] is not None)
    assert values == sorted(b"value-%d" % i for i in range(N) if i not in (12, 20))
    lat = {r["correlation_id"]: r for r in out["latencies"] if r["latency_us"] is not None}
    assert sorted(lat) == [i + 1 for i in range(N) if i not in (12, 20)]


def _fetch_with_lookalikes(pending: list[int]) -> bytes:
    """A Fetch v4 response (correlation id 1) whose records hold bytes that read as frame starts
    to a resync: a whole Produce v7 request frame (its api key and version read as correlation
    id 7, pending), and a size followed by each pending correlation id."""
    lookalike = produce_request(7, "orders", 0, records([(b"k", b"v", [])]), corr=99)
    values = [b"x" * 300 + lookalike + b"y" * 300]
    values += [b"\x00\x00\x00\x40" + c.to_bytes(4, "big") + b"z" * 200 for c in pending]
    recs = records([(None, v, []) for v in values])
    return fetch_response(4, "orders", 0, recs, corr=1)


def _fetch_cut_by_a_gap() -> tuple[dict, list[bytes], int]:
    """A Fetch (corr 1) and 7 Produce v7 requests (corr 2..8) pipelined; the Fetch response is
    cut by a real capture gap past its lookalikes, the Produce responses follow."""
    reqs = [fetch_request(4, "orders", 0, 0, corr=1)] + [
        produce_request(7, "orders", 0, records([(b"k", b"v%d" % c, [])]), corr=c) for c in range(2, 9)
    ]
    fetch = _fetch_with_lookalikes(list(range(1, 9)))
    resps = [produce_response(7, "orders", 0, 10 + c, corr=c) for c in range(2, 9)]
    d = Driver()
    for q in reqs:
        d.c2s(q)
    kept = len(fetch) - 100
    d.s2c(fetch[:kept], 64).gap(base.S2C, len(fetch) - kept)
    for r in resps:
        d.s2c(r)
    return d.close(), resps, len(fetch)


def test_a_large_response_cut_by_a_real_gap_is_not_split_into_frames_read_from_its_records():
    """A real Fetch response cut by a real gap is short of its size like a damaged one; its
    records hold bytes that a resync's judge confirms as frame starts (a pending correlation id
    after a size). They are not believed (KafkaRules.cut_start): one gap row spans the Fetch, no
    row is invented, and the Produce responses after it decode."""
    out, resps, fetch_len = _fetch_cut_by_a_gap()
    s2c = [r for r in out["commands"] if r["direction"] == "s2c"]
    assert [(r["command"], r["decode_status"]) for r in s2c] == [("Fetch", "gap")] + [("Produce", "ok")] * 7
    assert s2c[0]["size"] == fetch_len and s2c[0]["correlation_id"] == 1
    assert _accounted(out, "s2c") == fetch_len + sum(map(len, resps))


def test_the_lookalikes_do_fool_the_resync_judge(monkeypatch):
    """The guard above sees a real trap: believed on `judge` alone, the Fetch's records become
    invented frames."""
    from brokerscope.protocols.kafka.framing import KafkaRules

    monkeypatch.setattr(KafkaRules, "cut_start", lambda self, d, i: self.judge(d, i) == base.CONFIRMED)
    out, _resps, _n = _fetch_cut_by_a_gap()
    s2c = [r for r in out["commands"] if r["direction"] == "s2c"]
    assert [r for r in s2c if r["decode_status"] == "malformed"]


@pytest.mark.parametrize("chunk", [None, 7])
def test_a_damaged_request_size_mid_stream_takes_no_request_in(chunk):
    """Request 11 of 120 says 4096 bytes more than it has: it took the requests after it in up to
    that size, one malformed row ("4096 bytes left after the Produce v7 request"), 32 requests
    lost with no row of their own and their responses request_missing (87 of 119 latencies).
    Now a request that does not decode and holds credible frame starts (KafkaRules.cut_start) is
    read again (Framer.reread_if_swallowed): it alone is malformed, the responses held for the
    requests after it pair once those are read."""
    reqs, resps = _requests(120), _responses(120)
    reqs[10] = _damaged(reqs[10])
    out = _run(reqs, resps, chunk=chunk)
    sent = [r for r in out["commands"] if r["direction"] == "c2s" and r["decode_status"] == "ok"]
    assert sorted(r["correlation_id"] for r in sent) == [i + 1 for i in range(120) if i != 10]
    [bad] = [r for r in out["commands"] if r["direction"] == "c2s" and r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(reqs[10]) and bad["raw"] is None
    assert _accounted(out, "c2s") == sum(map(len, reqs))
    answered = sorted(r["correlation_id"] for r in out["latencies"] if r["response_ts_ns"])
    assert answered == [i + 1 for i in range(120) if i != 10]
    values = sorted(m["value"] for m in out["messages"] if m["offset"] is not None)
    assert values == sorted(b"value-%d" % i for i in range(120) if i != 10)


def test_a_damaged_response_size_mid_stream_takes_no_response_in():
    """Response 11's size 4096 bytes larger: the responses after it were in its malformed row,
    their requests unanswered (49 of 120 latencies); now only its own exchange has no response."""
    reqs, resps = _requests(120), _responses(120)
    resps[10] = _damaged(resps[10])
    out = _run(reqs, resps)
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["direction"] == "s2c" and "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(resps[10])
    assert _accounted(out, "s2c") == sum(map(len, resps))
    answered = sorted(r["correlation_id"] for r in out["latencies"] if r["response_ts_ns"])
    assert answered == [i + 1 for i in range(120) if i != 10]
    assert sum(m["offset"] is not None for m in out["messages"]) == 119


def test_a_response_captured_before_its_request_is_paired():
    """Responses in the capture before their requests (two files' clocks a few ms apart: one
    place's capture written per direction; a NIC's queues merged out of order): each was a
    request_missing row and its request unanswered, the produced messages without offsets. Now
    the response held for inference pairs with its request once that is read; its latency is
    negative, so null with an anomaly, as any response timed before its request."""
    reqs, resps = _requests(), _responses()
    d = Driver()
    for q, r in zip(reqs, resps):
        d.s2c(r)
        d.c2s(q)
    Drive.close(d)
    out = d.tables(allow_anomalies=True)
    assert all(r["decode_status"] == "ok" for r in out["commands"])
    rsp = [r for r in out["commands"] if r["direction"] == "s2c"]
    assert sorted(r["correlation_id"] for r in rsp) == list(range(1, N + 1))
    assert sorted(m["offset"] for m in out["messages"]) == [100 + i for i in range(N)]
    lat = out["latencies"]
    assert len(lat) == N and all(r["response_ts_ns"] < r["request_ts_ns"] for r in lat)
    batch = tables.conform("latencies", lat)
    assert batch.column("latency_us").null_count == N
    assert all("timed before the request" in a[0] for a in batch.column("anomalies").to_pylist())


def test_a_damaged_response_before_a_metadata_v13_response_is_read_again(tmp_path):
    """none.pcap (librdkafka's mock broker) with its JoinGroup response's size +256 (a user
    trial): it took in the Metadata v13 and SyncGroup responses after it and was not read again,
    their latencies null: a Metadata v13 response there has the one byte after its body that the
    mock broker sends, which a frame start's check (KafkaRules.cut_start) refused. It takes what
    the decoder keeps now: only the JoinGroup exchange differs."""
    from brokerscope.streams import decode_files
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    data = bytearray(src.read_bytes())
    data[12090] ^= 0x01  # the JoinGroup response's size (big-endian, its second-lowest byte): 108 -> 364
    cap = tmp_path / "damaged.pcap"
    cap.write_bytes(bytes(data))
    want, got = decode_files([str(src)]), decode_files([str(cap)])
    lat = {
        (r["client_port"], r["correlation_id"], r["request_command"]): r["latency_us"]
        for r in want["latencies"]
    }
    for r in got["latencies"]:
        key = (r["client_port"], r["correlation_id"], r["request_command"])
        if key == (40784, 4, "JoinGroup"):
            assert r["latency_us"] is None
        else:
            assert r["latency_us"] == lat[key], key
    bad = [r for r in got["commands"] if r["decode_status"] != "ok"]
    assert [(r["direction"], r["size"]) for r in bad] == [("s2c", 112)]


def test_a_damaged_first_request_on_a_port_found_by_content_keeps_its_connection(tmp_path):
    """none.pcap (a broker on port 36525, known by content) with its first ApiVersions request's
    size +256 (a user trial): the request looked incomplete though answered, which Kafka's sniff
    takes for not Kafka: the whole connection `unknown`, 20 commands rows gone, not a word. A
    response of Kafka's to it (its correlation id, sizes that chain) says Kafka: only the
    ApiVersions exchange differs."""
    from brokerscope.streams import decode_files
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "kafka" / "none.pcap"
    data = bytearray(src.read_bytes())
    data[8921] ^= 0x01  # the connection's first request's size: 64 -> 320
    cap = tmp_path / "damaged.pcap"
    cap.write_bytes(bytes(data))
    want, got = decode_files([str(src)]), decode_files([str(cap)])
    assert {r["protocol"] for r in got["streams"]} == {"kafka"}
    assert len(got["commands"]) == len(want["commands"])
    bad = [(r["direction"], r["decode_status"]) for r in got["commands"] if r["decode_status"] != "ok"]
    assert bad == [("c2s", "malformed"), ("s2c", "request_missing")]
    assert len(got["latencies"]) == len(want["latencies"]) - 1


def test_a_damaged_apiversions_error_response_is_read_again(tmp_path):
    """share.pcap with its first ApiVersions response's size +4096 (a user trial): the answer of
    error 35 (UNSUPPORTED_VERSION) is kept raw when no version describes its body, so one
    4,117-byte ok row took in 36 responses (their latencies null, 13 messages and 13 acks lost,
    two request_missing rows of invented correlation ids). Such a body that holds frame starts is
    read again too: only its own exchange differs."""
    from brokerscope.streams import decode_files
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "kafka" / "share.pcap"
    data = bytearray(src.read_bytes())
    data[8232] ^= 0x10  # the first ApiVersions response's size: 17 -> 4113
    cap = tmp_path / "damaged.pcap"
    cap.write_bytes(bytes(data))
    want, got = decode_files([str(src)]), decode_files([str(cap)])
    for t in ("commands", "messages", "acks", "latencies"):
        assert len(got[t]) == len(want[t]), t
    bad = [(r["direction"], r["size"]) for r in got["commands"] if r["decode_status"] != "ok"]
    assert bad == [("s2c", 21)]
    assert sum(r["latency_us"] is None for r in got["latencies"]) == 1 + sum(
        r["latency_us"] is None for r in want["latencies"]
    )
