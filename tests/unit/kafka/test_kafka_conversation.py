"""The Kafka conversation: framing, pairing, rows, and bad bytes, fed with byte literals (from the
public deepflow captures) and frames encoded by kafka-python."""

from __future__ import annotations

import json
import struct

import pytest

from brokerscope.protocols import base
from brokerscope.protocols.kafka import conversation as conv

from .kit import (
    Driver,
    fetch_request,
    fetch_response,
    frame,
    produce_request,
    produce_response,
    records,
)

# Produce v9 (flexible) request and response, console producer -> Kafka 3.x (deepflow capture)
PRODUCE_V9_REQ = bytes.fromhex(
    "00000098000000090000002f0010636f6e736f6c652d70726f647563657200000001000005dc02097a71792d7465"
    "7374020000000064000000000000000000000057ffffffff023345f48e00000000000000000191ea86ee1d000001"
    "91ea86ee1dffffffffffffffffffffffffffff000000014a000000013e7171717171717171717171717171717171"
    "717171717171717171717171717100000000"
)
PRODUCE_V9_RESP = bytes.fromhex(
    "000000370000002f0002097a71792d74657374020000000000000000000000000023ffffffffffffffff00000000"
    "00000010010000000000000000"
)
# Produce v2 (message format v1) request and response (deepflow capture)
PRODUCE_V2_REQ = bytes.fromhex(
    "0000007500000002000000010010636f6e736f6c652d70726f64756365720001000005dc000000010006746f7069"
    "633200000001000000000000003d000000000000000000000031dfa8ca66010000000158741cd909ffffffff0000"
    "001b4d65737361676520776974686f757420636f6d7072657373696f6e"
)
PRODUCE_V2_RESP = bytes.fromhex(
    "0000002e00000001000000010006746f70696332000000010000000000000000000000000000ffffffffffffffff00000000"
)
# ApiVersions v0 request from an old librdkafka (4 trailing zero bytes the broker ignores), ndpi
APIVERSIONS_V0_RDKAFKA = bytes.fromhex("000000150012000000000081000772646b61666b6100000000")


def _cmd(out, direction):
    return [r for r in out["commands"] if r["direction"] == direction]


def test_golden_produce_v9():
    out = Driver().c2s(PRODUCE_V9_REQ).s2c(PRODUCE_V9_RESP).close()
    req, resp = out["commands"]
    assert (req["command"], req["command_code"], req["api_version"], req["correlation_id"]) == (
        "Produce",
        0,
        9,
        47,
    )
    assert (req["client_id"], req["topic"], req["topics"], req["partition"]) == (
        "console-producer",
        "zqy-test",
        ["zqy-test"],
        0,
    )
    assert req["decode_status"] == "ok" and req["size"] == len(PRODUCE_V9_REQ) and req["stream_offset"] == 0
    d = json.loads(req["details"])
    assert d["Acks"] == 1 and d["TimeoutMs"] == 1500
    assert d["TopicData"][0]["PartitionData"][0]["Records"]["batches"][0]["record_count"] == 1
    assert (resp["command"], resp["correlation_id"], resp["error_code"], resp["throttle_time_ms"]) == (
        "Produce",
        47,
        0,
        0,
    )
    (m,) = out["messages"]
    assert (m["direction"], m["topic"], m["partition"], m["offset"], m["message_id"]) == (
        "produce",
        "zqy-test",
        0,
        35,
        "zqy-test-0@35",
    )
    assert m["value"] == b"q" * 31 and m["key"] is None and m["checksum_ok"] is True
    assert m["message_ts_ns"] == 0x191EA86EE1D * 1_000_000
    (lat,) = out["latencies"]
    assert lat["request_command"] == "Produce" and lat["latency_us"] > 0
    (ack,) = out["acks"]
    assert (ack["ack_type"], ack["offset"], ack["message_id"], ack["error_code"]) == (
        "kafka_produce",
        35,
        "zqy-test-0@35",
        0,
    )


def test_golden_produce_v2_below_spec_baseline():
    """Produce v2 was removed from the specs (Kafka 4.0 baseline is v3); the field version ranges
    still describe it, and message format v1 decodes."""
    out = Driver().c2s(PRODUCE_V2_REQ).s2c(PRODUCE_V2_RESP).close()
    req, resp = out["commands"]
    assert (req["api_version"], req["decode_status"], resp["decode_status"]) == (2, "ok", "ok")
    assert "baseline" in json.loads(req["details"])["_note"]
    (m,) = out["messages"]
    assert (m["value"], m["offset"], m["compression"], m["checksum_ok"]) == (
        b"Message without compression",
        0,
        "none",
        True,
    )
    assert m["producer_id"] is None  # message format v1 has no producer state


def test_trailing_request_bytes_are_kept():
    out = Driver().c2s(APIVERSIONS_V0_RDKAFKA).close()
    (r,) = out["commands"]
    assert (r["command"], r["api_version"], r["correlation_id"], r["client_id"], r["decode_status"]) == (
        "ApiVersions",
        0,
        129,
        "rdkafka",
        "ok",
    )
    assert json.loads(r["details"])["_trailing_bytes"] == {"base64": "AAAAAA=="}


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_any_chunking_gives_the_same_rows(chunk):
    whole = Driver().c2s(PRODUCE_V9_REQ + PRODUCE_V2_REQ).s2c(PRODUCE_V9_RESP + PRODUCE_V2_RESP).close()
    split = (
        Driver()
        .c2s(PRODUCE_V9_REQ + PRODUCE_V2_REQ, chunk)
        .s2c(PRODUCE_V9_RESP + PRODUCE_V2_RESP, chunk)
        .close()
    )
    keep = ("command", "api_version", "correlation_id", "decode_status", "details", "size", "stream_offset")
    assert [{k: r[k] for k in keep} for r in split["commands"]] == [
        {k: r[k] for k in keep} for r in whole["commands"]
    ]
    assert [m["value"] for m in split["messages"]] == [m["value"] for m in whole["messages"]]
    assert len(split["latencies"]) == 2


def test_every_split_point_of_a_request():
    data = PRODUCE_V9_REQ + PRODUCE_V9_RESP
    n = len(PRODUCE_V9_REQ)
    for cut in range(1, n):
        d = Driver()
        d.c2s(PRODUCE_V9_REQ[:cut]).c2s(PRODUCE_V9_REQ[cut:]).s2c(data[n:])
        out = d.close()
        assert [r["decode_status"] for r in out["commands"]] == ["ok", "ok"], cut
        assert out["commands"][0]["ts_ns"] < out["commands"][0]["ts_end_ns"]


def test_timestamps_first_and_last_byte():
    out = Driver().c2s(PRODUCE_V9_REQ, chunk=50).s2c(PRODUCE_V9_RESP).close()
    req = out["commands"][0]
    lat = out["latencies"][0]
    assert lat["request_ts_ns"] == req["ts_end_ns"]
    assert lat["response_ts_ns"] == out["commands"][1]["ts_ns"]
    assert lat["latency_us"] == (lat["response_ts_ns"] - lat["request_ts_ns"]) / 1000.0


def test_acks_zero_expects_no_response():
    recs = records([(b"k", b"v", [])])
    out = Driver().c2s(produce_request(9, "t", 3, recs, acks=0, corr=5)).close()
    assert out["latencies"] == []
    (m,) = out["messages"]
    assert m["offset"] is None and m["message_id"] is None and m["value"] == b"v"


def test_produced_offsets_from_the_response_and_errors():
    recs = records([(b"a", b"1", []), (b"b", b"2", []), (b"c", b"3", [])])
    out = (
        Driver()
        .c2s(produce_request(9, "t", 0, recs, corr=1))
        .s2c(produce_response(9, "t", 0, 500, corr=1))
        .c2s(produce_request(9, "t", 1, recs, corr=2))
        .s2c(produce_response(9, "t", 1, -1, error=6, corr=2))
        .close()
    )
    ids = [(m["partition"], m["offset"], m["message_id"]) for m in out["messages"]]
    assert ids == [
        (0, 500, "t-0@500"),
        (0, 501, "t-0@501"),
        (0, 502, "t-0@502"),
        (1, None, None),
        (1, None, None),
        (1, None, None),
    ]
    assert [(a["partition"], a["error_code"], a["offset"]) for a in out["acks"]] == [
        (0, 0, 500),
        (1, 6, None),
    ]
    assert out["commands"][3]["error_code"] == 6  # first non-zero per-partition error


def test_response_without_request():
    out = Driver().s2c(PRODUCE_V9_RESP).close()
    (r,) = out["commands"]
    assert (r["decode_status"], r["correlation_id"], r["command"]) == ("request_missing", 47, None)
    assert r["raw"] is None  # of undetermined type: no bytes (Context.raw)


def test_unanswered_request_at_close():
    out = Driver().c2s(PRODUCE_V9_REQ).close()
    (lat,) = out["latencies"]
    assert lat["response_ts_ns"] is None and lat["latency_us"] is None and lat["correlation_id"] == 47
    (m,) = out["messages"]
    assert m["offset"] is None  # never acknowledged


def test_unsupported_version_keeps_raw():
    req = bytearray(PRODUCE_V9_REQ)
    struct.pack_into(">h", req, 6, 30)  # Produce v30: newer than the specs
    resp = PRODUCE_V9_RESP
    out = Driver().c2s(bytes(req)).s2c(resp).c2s(PRODUCE_V9_REQ).close()
    r0, r1, r2 = out["commands"]
    assert (r0["decode_status"], r0["command"], r0["api_version"], r0["correlation_id"]) == (
        "unsupported_version",
        "Produce",
        30,
        47,
    )
    assert r0["raw"] == bytes(req[4:])
    assert r1["decode_status"] == "unsupported_version" and r1["command"] == "Produce" and r1["raw"]
    assert r2["decode_status"] == "ok"


def test_unknown_api_key_is_framed_and_paired():
    # api key 1000: in no spec and unnamed (every key up to the newest has a spec, the ZooKeeper-era
    # 4-7 from interbroker_specs.py). Mid-conversation, so framed without a plausible header.
    body = struct.pack(">hhih", 1000, 0, 9, 3) + b"bs!" + b"\x00" + b"\x00"
    resp = struct.pack(">i", 9) + b"\x00" + b"\x00\x00" + b"\x00" * 8
    out = (
        Driver()
        .c2s(PRODUCE_V9_REQ)
        .s2c(PRODUCE_V9_RESP)
        .c2s(struct.pack(">i", len(body)) + body)
        .s2c(struct.pack(">i", len(resp)) + resp)
        .c2s(PRODUCE_V9_REQ)
        .close()
    )
    r0, r1, r2, r3, r4 = out["commands"]
    assert (r0["decode_status"], r1["decode_status"]) == ("ok", "ok")
    assert (
        r2["command"],
        r2["command_code"],
        r2["decode_status"],
        r2["correlation_id"],
        r2["client_id"],
    ) == (
        None,
        1000,
        "unknown_command",
        9,
        "bs!",
    )
    assert (r3["command"], r3["command_code"], r3["decode_status"], r3["correlation_id"]) == (
        None,
        1000,
        "unknown_command",
        9,
    )
    assert r2["raw"] is None and r3["raw"] is None  # an unnamed frame keeps no bytes
    assert r4["decode_status"] == "ok"


def test_fetch_deliver_rows_and_partial_tail():
    recs = records([(b"k1", b"v1", [("h", b"x")]), (b"k2", b"v2", [])], offset=0)
    # broker-side batch: absolute base offset 10
    recs = struct.pack(">q", 10) + recs[8:]
    tail = records([(b"k3", b"v3", [])])[:25]
    out = (
        Driver()
        .c2s(fetch_request(12, "topic-a", 2, 11, corr=3))
        .s2c(fetch_response(12, "topic-a", 2, recs + tail, corr=3))
        .close()
    )
    req, resp = out["commands"]
    assert resp["decode_status"] == "ok"
    d = json.loads(resp["details"])
    assert d["Responses"][0]["Partitions"][0]["Records"]["partial_tail_bytes"] == 25
    # the record before the fetch offset (10) is not delivered to the consumer; 11 is
    (m,) = out["messages"]
    assert (m["direction"], m["topic"], m["partition"], m["offset"], m["message_id"], m["key"]) == (
        "deliver",
        "topic-a",
        2,
        11,
        "topic-a-2@11",
        b"k2",
    )


def test_fetch_topic_ids_resolved_from_metadata():
    from .kit import MetadataRequest, MetadataResponse

    tid = "0d5e4a4f-8f4f-4a51-9d2b-0123456789ab"
    M = MetadataResponse
    md = M(
        version=12,
        throttle_time_ms=0,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            M.MetadataResponseTopic(
                version=12, error_code=0, name="named", topic_id=tid, is_internal=False, partitions=[]
            )
        ],
    )
    recs = records([(b"k", b"v", [])])
    out = (
        Driver()
        .c2s(
            frame(
                MetadataRequest(
                    version=12,
                    topics=None,
                    allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False,
                ),
                1,
            )
        )
        .s2c(frame(md, 1))
        .c2s(fetch_request(13, None, 0, 0, corr=2, topic_id=tid))
        .s2c(fetch_response(13, None, 0, recs, corr=2, topic_id=tid))
        .close()
    )
    assert [c["decode_status"] for c in out["commands"]] == ["ok"] * 4
    assert out["commands"][3]["topic"] == "named"
    (m,) = out["messages"]
    assert (m["topic"], m["message_id"]) == ("named", "named-0@0")


def test_sasl_secrets_are_redacted():
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse

    secret = b"\x00alice\x00s3cr3t-password"
    out = (
        Driver()
        .c2s(frame(SaslAuthenticateRequest(version=2, auth_bytes=secret), 4))
        .s2c(
            frame(
                SaslAuthenticateResponse(
                    version=2,
                    error_code=0,
                    error_message=None,
                    auth_bytes=b"server-final",
                    session_lifetime_ms=0,
                ),
                4,
            )
        )
        .close()
    )
    for r in out["commands"]:
        assert r["decode_status"] == "ok" and r["raw"] is None
        assert "s3cr3t" not in r["details"] and "server-final" not in r["details"]
        assert "<redacted" in r["details"]


@pytest.mark.parametrize("midstream", [False, True])
def test_a_guessed_first_frame_keeps_no_raw(midstream):
    """A capture that starts mid-stream: the first response bytes read as a frame whose
    correlation id is pending (ApiVersions) and whose size spans the real frames after it, a
    SaslAuthenticate response among them, cut by the end of the capture. Such a guessed start
    keeps no bytes; after a handshake the same tail is a frame in step and keeps them."""
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.sasl import SaslAuthenticateResponse

    sasl = frame(
        SaslAuthenticateResponse(
            version=1, error_code=0, error_message=None, auth_bytes=b"v=S1gnatur3", session_lifetime_ms=0
        ),
        3,
    )
    out = (
        Driver(midstream=midstream)
        .c2s(frame(ApiVersionsRequest(version=0), 2))
        .s2c(struct.pack(">ii", 4000, 2) + b"\0" * 6 + sasl)
        .close()
    )
    (tail,) = [r for r in out["commands"] if r["direction"] == "s2c"]
    assert tail["decode_status"] == "truncated" and tail["command"] is None
    if midstream:
        assert tail["raw"] is None
    else:
        assert b"S1gnatur3" in tail["raw"]


def test_sasl_handshake_v0_raw_tokens():
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    token = b"\x00alice\x00s3cr3t"
    out = (
        Driver()
        .c2s(frame(SaslHandshakeRequest(version=0, mechanism="PLAIN"), 1))
        .s2c(frame(SaslHandshakeResponse(version=0, error_code=0, mechanisms=["PLAIN"]), 1))
        .c2s(struct.pack(">i", len(token)) + token)
        .s2c(struct.pack(">i", 0))
        .c2s(PRODUCE_V9_REQ)
        .s2c(PRODUCE_V9_RESP)
        .close()
    )
    cmds = out["commands"]
    assert [c["command"] for c in cmds] == [
        "SaslHandshake",
        "SaslHandshake",
        "SaslToken",
        "SaslToken",
        "Produce",
        "Produce",
    ]
    assert all(c["decode_status"] == "ok" for c in cmds)
    assert "s3cr3t" not in cmds[2]["details"] and cmds[2]["raw"] is None


# -- bad bytes ----------------------------------------------------------------------------------


def test_truncated_frame_at_close():
    out = Driver().c2s(PRODUCE_V9_REQ[:60]).close()
    (r,) = out["commands"]
    assert r["decode_status"] == "truncated" and r["raw"] == PRODUCE_V9_REQ[:60]


def test_two_gigabyte_size_field_then_good_frames():
    bogus = struct.pack(">i", 0x7FFFFFF0) + b"\x00\x00\x00\x09\x00\x00\x00\x30"
    out = Driver().c2s(bogus + PRODUCE_V9_REQ).s2c(PRODUCE_V9_RESP).close()
    statuses = [r["decode_status"] for r in out["commands"]]
    assert statuses[0] == "oversize" and statuses[-2:] == ["ok", "ok"]
    assert out["messages"][0]["offset"] == 35


def test_oversize_with_credible_header_is_skipped_exactly():
    ctx = base.Context(max_frame_bytes=130)  # the v9 request (156 bytes) is over, the v2 one (121) under
    out = Driver(ctx).c2s(PRODUCE_V9_REQ + PRODUCE_V2_REQ, chunk=17).close()
    r0, r1 = out["commands"]
    assert (r0["decode_status"], r0["command"], r0["correlation_id"]) == ("oversize", "Produce", 47)
    assert r1["decode_status"] == "ok" and r1["stream_offset"] == len(PRODUCE_V9_REQ)


def test_garbage_after_a_valid_frame():
    junk = b"\xde\xad\xbe\xef" * 10
    out = Driver().c2s(PRODUCE_V9_REQ + junk + PRODUCE_V2_REQ).s2c(PRODUCE_V9_RESP + PRODUCE_V2_RESP).close()
    cmds = out["commands"]
    assert cmds[0]["decode_status"] == "ok"
    bad = [c for c in cmds if c["decode_status"] != "ok"]
    assert bad and all(c["decode_status"] in ("malformed", "oversize") for c in bad)
    assert sum(c["size"] for c in bad if c["decode_status"] == "malformed") <= len(junk)
    good = [(c["direction"], c["correlation_id"]) for c in cmds if c["decode_status"] == "ok"]
    assert good == [("c2s", 47), ("c2s", 1), ("s2c", 47), ("s2c", 1)]


def test_gap_inside_a_frame_resyncs():
    d = Driver().c2s(PRODUCE_V9_REQ[:40]).gap(base.C2S, len(PRODUCE_V9_REQ) - 40).c2s(PRODUCE_V2_REQ)
    out = d.s2c(PRODUCE_V2_RESP).close()
    cmds = out["commands"]
    assert cmds[0]["decode_status"] == "gap"
    assert [(c["decode_status"], c["correlation_id"]) for c in cmds[1:]] == [("ok", 1), ("ok", 1)]


def test_flipped_crc_bit_in_a_produce_request():
    req = bytearray(PRODUCE_V9_REQ)
    req[-10] ^= 0x04  # inside the record value
    out = Driver().c2s(bytes(req)).s2c(PRODUCE_V9_RESP).close()
    r = out["commands"][0]
    assert r["decode_status"] == "checksum_mismatch" and r["raw"]
    (m,) = out["messages"]
    assert m["checksum_ok"] is False and m["decode_status"] == "checksum_mismatch"
    assert out["commands"][1]["decode_status"] == "ok"


@pytest.mark.parametrize("mode, raw_len", [("keep", None), ("truncate", 16), ("hash", 0), ("drop", 0)])
def test_raw_bytes_of_a_bad_frame_follow_the_payload_policy(mode, raw_len):
    """A frame kept in `raw` carries message values: with `hash`/`drop` none of it is kept, with
    `truncate` only truncate_bytes; the row's status and size stay."""
    req = bytearray(PRODUCE_V9_REQ)
    req[-10] ^= 0x04  # a record value bit: checksum_mismatch, a row that keeps raw bytes
    ctx = base.Context(payload=base.PayloadPolicy(mode=mode, truncate_bytes=16))
    r = Driver(ctx).c2s(bytes(req)).close()["commands"][0]
    assert r["decode_status"] == "checksum_mismatch" and r["size"] == len(req)
    frame = bytes(req[4:])  # raw holds the frame after its size field
    if raw_len is None:
        assert r["raw"] == frame[: ctx.max_raw_bytes]
    elif raw_len == 0:
        assert r["raw"] is None
    else:
        assert r["raw"] == frame[:raw_len]


def test_compression_bomb_in_a_produce_request():
    import gzip

    plain = records([(b"k", b"\0" * (2 << 20), [])])
    body = gzip.compress(plain[61:], 9)
    head = bytearray(plain[:61])
    struct.pack_into(">h", head, 21, 1)
    struct.pack_into(">i", head, 8, 49 + len(body))
    import crc32c

    batch = (
        bytes(head[:17]) + struct.pack(">I", crc32c.crc32c(bytes(head[21:]) + body)) + bytes(head[21:]) + body
    )
    ctx = base.Context(max_decompressed_bytes=1 << 20)
    out = Driver(ctx).c2s(produce_request(9, "t", 0, batch, corr=8)).c2s(PRODUCE_V9_REQ).close()
    r0, r1 = out["commands"]
    assert r0["decode_status"] == "decompression_failed" and "cap" in r0["decode_error"]
    assert r1["decode_status"] == "ok"
    assert [m["value"] for m in out["messages"]] == [b"q" * 31]


def test_pending_requests_are_bounded(monkeypatch):
    monkeypatch.setattr(conv, "MAX_PENDING", 5)
    d = Driver()
    for corr in range(20):
        req = bytearray(PRODUCE_V9_REQ)
        struct.pack_into(">i", req, 8, corr)
        d.c2s(bytes(req))
    assert len(d.conv.pending) == 5
    out = d.close()
    assert len(out["latencies"]) == 20 and all(r["response_ts_ns"] is None for r in out["latencies"])


def test_feed_never_raises_on_random_bytes():
    import random

    rnd = random.Random(7)
    for _ in range(200):
        d = Driver(base.Context(max_frame_bytes=1 << 16))
        blob = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 300)))
        if rnd.random() < 0.5:
            blob = PRODUCE_V9_REQ[: rnd.randint(0, len(PRODUCE_V9_REQ))] + blob
        d.c2s(blob, chunk=rnd.randint(1, 50)).s2c(blob[::-1], chunk=rnd.randint(1, 50))
        d.close()


def test_unknown_tagged_fields_are_kept_raw():
    """A flexible request carrying a tagged field the spec does not know (tag 99): decoded, the
    field kept as base64 under _unknown_tagged_fields."""
    from kafka.protocol.metadata import ApiVersionsRequest

    f = frame(ApiVersionsRequest(version=3, client_software_name="x", client_software_version="1"), 12)
    assert f.endswith(b"\x00")  # empty tagged-field section of the body
    tagged = b"\x01" + b"\x63" + b"\x03" + b"abc"  # one field: tag 99, 3 bytes
    body = f[4:-1] + tagged
    out = Driver().c2s(struct.pack(">i", len(body)) + body).close()
    (r,) = out["commands"]
    assert r["decode_status"] == "ok"
    d = json.loads(r["details"])
    assert d["_unknown_tagged_fields"] == {"99": {"base64": "YWJj"}}
    assert d["ClientSoftwareName"] == "x"


def test_capture_starting_inside_a_response():
    """A connection whose capture starts in the middle of a response: the leftover bytes are
    skipped (one malformed row), the next responses are request_missing, then pairing resumes."""
    tail_of_something = PRODUCE_V2_RESP[13:]
    out = Driver().s2c(tail_of_something + PRODUCE_V9_RESP).c2s(PRODUCE_V2_REQ).s2c(PRODUCE_V2_RESP).close()
    # request_missing rows are emitted at the end of the connection (held for inference)
    cmds = sorted(out["commands"], key=lambda c: (c["ts_ns"], c["stream_offset"]))
    st = [(c["direction"], c["decode_status"], c["correlation_id"]) for c in cmds]
    assert st == [
        ("s2c", "malformed", None),
        ("s2c", "request_missing", 47),
        ("c2s", "ok", 1),
        ("s2c", "ok", 1),
    ]
    assert out["commands"][0]["size"] == len(tail_of_something)


def test_gap_inside_a_frame_of_known_size_stays_in_step():
    """A gap that ends inside the frame it started in: the rest of that frame is skipped exactly,
    the request's header survives (so its response still pairs) and nothing is resynchronised."""
    d = Driver().c2s(PRODUCE_V9_REQ[:30]).gap(base.C2S, 50).c2s(PRODUCE_V9_REQ[80:] + PRODUCE_V2_REQ)
    out = d.s2c(PRODUCE_V9_RESP[:20]).gap(base.S2C, 10).s2c(PRODUCE_V9_RESP[30:] + PRODUCE_V2_RESP).close()
    st = [(c["direction"], c["command"], c["decode_status"], c["correlation_id"]) for c in out["commands"]]
    assert st == [
        ("c2s", "Produce", "gap", 47),
        ("c2s", "Produce", "ok", 1),
        ("s2c", "Produce", "gap", 47),
        ("s2c", "Produce", "ok", 1),
    ]
    lat = {r["correlation_id"]: r for r in out["latencies"]}
    assert lat[47]["response_ts_ns"] is not None and lat[47]["latency_us"] > 0
    assert [m["offset"] for m in out["messages"]] == [0]  # v2 request's message, offset from its response


def test_undecodable_response_then_more_bytes_in_the_same_direction():
    """Regression (found by fuzzing): a response that fails to decode under its request's api must
    not leave the stream buffer exported, or the next bytes in that direction raise BufferError."""
    import gc

    req = fetch_request(11, "t", 0, 0, corr=105)
    bad_resp = bytes.fromhex("0000000a0000006900d100000000")  # Fetch v11 response, 6 body bytes
    gc.disable()  # the bug was a reference cycle that only a garbage collection released
    try:
        out = Driver().c2s(req).s2c(bad_resp).s2c(PRODUCE_V9_RESP).close()
    finally:
        gc.enable()
    st = [(r["direction"], r["correlation_id"], r["decode_status"]) for r in out["commands"]]
    assert sorted(st) == [("c2s", 105, "ok"), ("s2c", 47, "request_missing"), ("s2c", 105, "truncated")]


def test_sensitive_config_values_are_redacted():
    """AlterConfigs v0 (hand-built bytes) and IncrementalAlterConfigs v1 (kafka-python's encoder)
    setting a keystore password and a JAAS config next to an ordinary config."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.protocol.admin import IncrementalAlterConfigsRequest as Inc

    from .kit import frame

    def s16(x: str | None) -> bytes:  # classic (nullable) string: int16 length, -1 = null
        return struct.pack(">h", -1) if x is None else struct.pack(">h", len(x)) + x.encode()

    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";'
    entries = [("ssl.keystore.password", "hunter2"), ("retention.ms", "86400000"), ("cleanup.policy", None)]
    body = (
        struct.pack(">i", 1)  # Resources: 1
        + struct.pack(">b", 2)
        + s16("orders")  # ResourceType TOPIC, ResourceName
        + struct.pack(">i", len(entries))
        + b"".join(s16(n) + s16(v) for n, v in entries)
        + b"\x00"  # ValidateOnly
    )
    head = struct.pack(">hhih", 33, 0, 5, 3) + b"cli"  # request header v1
    classic = struct.pack(">i", len(head) + len(body)) + head + body
    Res, Cfg = Inc.AlterConfigsResource, Inc.AlterConfigsResource.AlterableConfig
    inc = Inc(
        version=1,
        resources=[
            Res(
                version=1,
                resource_type=4,  # BROKER
                resource_name="1",
                configs=[
                    Cfg(
                        version=1,
                        name="listener.name.sasl_ssl.plain.sasl.jaas.config",
                        config_operation=0,
                        value=jaas,
                    ),
                    Cfg(version=1, name="log.retention.hours", config_operation=0, value="48"),
                ],
            )
        ],
        validate_only=False,
    )
    rows = Driver().c2s(classic).c2s(frame(inc, 6)).close()
    assert [c["decode_status"] for c in rows["commands"]] == ["ok", "ok"]
    alter = json.loads(rows["commands"][0]["details"])["Resources"][0]["Configs"]
    assert [(c["Name"], c["Value"]) for c in alter] == [
        ("ssl.keystore.password", "<redacted 7 bytes>"),
        ("retention.ms", "86400000"),
        ("cleanup.policy", None),
    ]
    incr = json.loads(rows["commands"][1]["details"])["Resources"][0]["Configs"]
    assert incr[0]["Value"] == f"<redacted {len(jaas)} bytes>" and incr[1]["Value"] == "48"
    assert all("hunter2" not in c["details"] for c in rows["commands"])


def test_a_client_id_and_topic_that_are_not_utf8_keep_their_bytes_visible():
    """A string that is not UTF-8 becomes text with the bad bytes escaped (as in TubeMQ and
    Pulsar), so the original bytes can be read back; U+FFFD would lose them."""
    from .test_kafka_inference import metadata_v2_request

    req = bytearray(metadata_v2_request(7))
    req[12:17] = b"\x00\x03k\xe9t"  # client id b"k\xe9t"
    req[-1:] = b"\xff"  # topic b"\xff"
    # after a first request (a first frame must have a printable client id to be believed)
    out = Driver().c2s(metadata_v2_request(6)).c2s(bytes(req)).close()
    cmd = out["commands"][1]
    assert (cmd["client_id"], cmd["topic"], cmd["decode_status"]) == ("k\\xe9t", "\\xff", "ok")
    assert cmd["anomalies"] is None
