"""Framing: both length-prefixed generations, VSR headers, splits, gaps, garbage, oversize,
sniffing, and the public capture rs.pcapng."""

from __future__ import annotations

import json

import pytest

from brokerscope import tables
from brokerscope.protocols.base import Context
from brokerscope.protocols.iggy import PROTOCOL
from tests.conftest import CAPTURES  # noqa: E402

from .kit import (
    CONN,
    login,
    num_id,
    req,
    req2,
    resp,
    resp2,
    run,
    s8,
    s32,
    str_id,
    table,
    u32,
    u64,
    vsr_header,
)

RS = str(CAPTURES / "iggy" / "rs.pcapng")


CONVO = [
    ("c2s", req(38, s8("iggy") + s8("pw") + s32("0.7.0") + s32(""))),
    ("s2c", resp(u32(1))),
    ("c2s", req(1)),
    ("s2c", resp()),
    ("c2s", req(202, u32(1) + s8("s"))),
    ("s2c", resp(u32(1) + u64(5) + u32(0) + u64(0) + u64(0) + s8("s"))),
    ("c2s", req(121, b"\x01" + u32(3) + num_id(1) + str_id("t") + u32(1) + u64(9))),
    ("s2c", resp()),
]


def _key(rows):
    """Rows without times, for comparing splits."""
    return [
        (t, {k: v for k, v in r.items() if "ts" not in k and k not in ("latency_us", "ack_latency_us")})
        for t, r in rows
    ]


def test_classic_fifo_pairing_and_tables_conform():
    rows = run(CONVO)
    for name in ("commands", "latencies", "acks"):
        tables.conform(name, table(rows, name))
    cmds = table(rows, "commands")
    assert [c["command"] for c in cmds] == ["LOGIN_USER"] * 2 + ["PING"] * 2 + ["CREATE_STREAM"] * 2 + [
        "STORE_CONSUMER_OFFSET"
    ] * 2
    assert all(c["decode_status"] == "ok" for c in cmds)
    assert [c["correlation_id"] for c in cmds] == [1, 1, 2, 2, 3, 3, 4, 4]
    assert [c["stream_offset"] for c in cmds if c["direction"] == "c2s"] == [0, 29, 37, 51]
    acks = table(rows, "acks")
    assert len(acks) == 1
    a = acks[0]
    assert (a["ack_type"], a["topic"], a["partition"], a["offset"], a["consumer"]) == (
        "iggy_offset",
        "1/t",
        1,
        9,
        "consumer:3",
    )
    assert a["error_code"] == 0
    assert len(table(rows, "latencies")) == 4


@pytest.mark.parametrize("direction", ["c2s", "s2c"])
def test_every_split_point_gives_the_same_rows(direction):
    whole = _key(run(CONVO))
    stream = b"".join(d for dd, d in CONVO if dd == direction)
    other = [(dd, d) for dd, d in CONVO if dd != direction]
    for cut in range(1, len(stream)):
        parts = [(direction, stream[:cut]), (direction, stream[cut:])]
        chunks = parts + other if direction == "c2s" else other + parts
        got = _key(run(chunks))
        assert sorted(map(repr, got)) == sorted(map(repr, whole)), cut


def test_byte_by_byte():
    chunks = []
    for d, data in CONVO:
        chunks += [(d, data[i : i + 1]) for i in range(len(data))]
    assert sorted(map(repr, _key(run(chunks)))) == sorted(map(repr, _key(run(CONVO))))


def test_request_id_framing_pairs_out_of_order():
    rows = run(
        [
            ("c2s", req2(1, 10)),
            ("c2s", req2(200, 11, num_id(1))),
            ("c2s", req2(10, 12)),
            ("s2c", resp2(11, b"", status=1009)),
            ("s2c", resp2(10)),
            ("s2c", resp2(99)),
        ]
    )
    cmds = table(rows, "commands")
    assert all(json.loads(c["details"])["framing"] == "request_id" for c in cmds)
    s2c = [c for c in cmds if c["direction"] == "s2c"]
    assert [(c["command"], c["correlation_id"], c["error_code"]) for c in s2c[:2]] == [
        ("GET_STREAM", 11, 1009),
        ("PING", 10, 0),
    ]
    assert s2c[2]["decode_status"] == "request_missing" and s2c[2]["correlation_id"] == 99
    lat = table(rows, "latencies")
    assert {(r["request_command"], r.get("response_ts_ns") is None) for r in lat} == {
        ("GET_STREAM", False),
        ("PING", False),
        ("GET_STATS", True),
    }


def test_request_id_framing_detected_from_a_payload_request():
    rows = run([("c2s", req2(38, 1, s8("u") + s8("p") + s32("v") + s32(""))), ("s2c", resp2(1, u32(7)))])
    cmds = table(rows, "commands")
    assert [c["decode_status"] for c in cmds] == ["ok", "ok"]
    assert json.loads(cmds[1]["details"])["user_id"] == 7


def test_vsr_frames_register_non_replicated_and_replicated():
    login = b"\x00\x2c\x00\x00" + s8("rust-sdk") + s8("0.11.0") + s8("iggy") + s8("pw-secret")
    login += u32(0)
    reg_reply = u32(0) + u32(1) + u64(42) + u32(0) + s8("0.0.0")
    rows = run(
        [
            ("c2s", vsr_header(5, 256 + len(login), request=0, operation=1) + login),
            ("s2c", vsr_header(8, 256 + len(reg_reply), request=0, operation=1) + reg_reply),
            ("c2s", vsr_header(5, 256, request=1, operation=2, code=1, session=42)),
            ("s2c", vsr_header(8, 256, request=1, operation=2)),
            ("c2s", vsr_header(5, 256 + 3, request=1, operation=128, session=42) + s8("s1")),
            ("s2c", vsr_header(8, 256, request=1, operation=128, status=1012)),
            ("c2s", vsr_header(5, 256, request=2, operation=99, session=42)),
        ]
    )
    cmds = table(rows, "commands")
    tables.conform("commands", cmds)
    assert [(c["direction"], c["command"], c["decode_status"]) for c in cmds] == [
        ("c2s", "LOGIN_REGISTER", "ok"),
        ("s2c", "LOGIN_REGISTER", "ok"),
        ("c2s", "PING", "ok"),
        ("s2c", "PING", "ok"),
        ("c2s", "CREATE_STREAM", "ok"),
        ("s2c", "CREATE_STREAM", "ok"),
        ("c2s", "VSR_OP_99", "unknown_command"),
    ]
    d = json.loads(cmds[0]["details"])
    assert (d["framing"], d["operation_name"], d["username"], d["password"]) == (
        "vsr",
        "REGISTER",
        "iggy",
        "<redacted 9 bytes>",
    )
    assert b"pw-secret" not in repr(rows).encode()
    assert json.loads(cmds[1]["details"])["session"] == 42
    assert json.loads(cmds[4]["details"])["name"] == "s1"
    assert cmds[5]["error_code"] == 1012
    lat = table(rows, "latencies")
    assert [(r["request_command"], r.get("error_code")) for r in lat] == [
        ("LOGIN_REGISTER", 0),
        ("PING", 0),
        ("CREATE_STREAM", 1012),
        ("VSR_OP_99", None),
    ]


def test_garbage_between_frames_is_recorded_and_skipped():
    junk = b"\xff" * 13
    rows = run(login() + [("c2s", req(1) + junk + req(10)), ("s2c", resp() + resp())])
    cmds = table(rows, "commands")[2:]
    c2s = [c for c in cmds if c["direction"] == "c2s"]
    assert [c.get("command") for c in c2s] == ["PING", None, "GET_STATS"]
    assert c2s[1]["decode_status"] == "malformed" and c2s[1]["size"] == 13
    assert c2s[1].get("raw") is None  # unframed client bytes could be a damaged login
    assert c2s[2]["stream_offset"] == 8 + 13 + len(login()[0][1])


def test_server_garbage_is_one_row_without_raw():
    junk = b"\xff" * 13
    rows = run([("c2s", req(1) + req(10)), ("s2c", resp() + junk + resp())])
    s2c = [c for c in table(rows, "commands") if c["direction"] == "s2c"]
    assert [c["decode_status"] for c in s2c] == ["ok", "malformed", "ok"]
    assert (
        s2c[1]["size"] == len(junk)
        and s2c[1].get("raw") is None
        and [c["command"] for c in s2c if c["decode_status"] == "ok"]
        == [
            "PING",
            "GET_STATS",
        ]
    )


def test_pure_garbage_never_raises():
    import random

    rnd = random.Random(5)
    for _ in range(50):
        blob = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400)))
        rows = run([("c2s", blob), ("s2c", blob[::-1])])
        for name in ("commands", "latencies", "messages", "acks"):
            tables.conform(name, table(rows, name))


def test_truncated_frame_at_close():
    rows = run([("c2s", req(202, u32(1) + s8("stream"))[:-3])])
    cmds = table(rows, "commands")
    assert len(cmds) == 1 and cmds[0]["decode_status"] == "truncated"


def test_oversize_frame_skipped_and_next_frame_decoded():
    ctx = Context(max_frame_bytes=64)
    big = req(202, u32(1) + s8("x" * 100))
    rows = run([("c2s", big[:50]), ("c2s", big[50:] + req(1)), ("s2c", resp() + resp())], ctx=ctx)
    c2s = [c for c in table(rows, "commands") if c["direction"] == "c2s"]
    assert [(c.get("command"), c["decode_status"]) for c in c2s] == [
        ("CREATE_STREAM", "oversize"),
        ("PING", "ok"),
    ]
    assert c2s[0]["size"] == len(big) and c2s[1]["stream_offset"] == len(big)
    s2c = [c for c in table(rows, "commands") if c["direction"] == "s2c"]
    assert [c["command"] for c in s2c] == ["CREATE_STREAM", "PING"]


def test_gap_records_row_and_resyncs():
    conv = PROTOCOL.conversation(CONN, Context())
    rows = list(conv.feed("c2s", req(202, u32(1) + s8("abc"))[:6], 1))
    rows += conv.gap("c2s", 100, 2)
    rows += conv.feed("c2s", b"\x00\x01" + req(1), 3)
    rows += conv.feed("s2c", resp(), 4)
    rows += conv.close()
    cmds = table(rows, "commands")
    assert cmds[0]["decode_status"] == "gap"
    assert [c.get("command") for c in cmds if c["decode_status"] == "ok"] == ["PING", "PING"]


def test_sniff():
    login = req(38, s8("iggy") + s8("iggy") + s32("0.7.0") + s32(""))
    assert PROTOCOL.sniff(login, resp(u32(1))) >= 0.8
    assert PROTOCOL.sniff(req(1), resp()) >= 0.7
    assert PROTOCOL.sniff(vsr_header(5, 256, 1, 2, code=1), b"") >= 0.7
    assert PROTOCOL.sniff(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n") == 0.0
    kafka_api_versions = bytes.fromhex("0000002300120003000000010009636c69656e742d6964")
    assert PROTOCOL.sniff(kafka_api_versions, b"") < 0.5
    assert PROTOCOL.sniff(b"", b"") == 0.0
    assert PROTOCOL.default_ports == (8090,)


def test_public_capture_rs_pcapng():
    from scapy.all import TCP, rdpcap

    conv = PROTOCOL.conversation(CONN, Context())
    rows = []
    for p in rdpcap(RS):
        t = p[TCP]
        pl = bytes(t.payload)
        if pl and 8090 in (t.sport, t.dport):
            rows += conv.feed("c2s" if t.dport == 8090 else "s2c", pl, int(p.time * 1e9))
    rows += conv.close()
    cmds = table(rows, "commands")
    tables.conform("commands", cmds)
    assert [(c["direction"], c["command"], c["decode_status"]) for c in cmds] == [
        (d, n, "ok") for n in ("LOGIN_USER", "PING", "CREATE_STREAM", "CREATE_TOPIC") for d in ("c2s", "s2c")
    ]
    login = json.loads(cmds[0]["details"])
    assert login["username"] == "iggy" and login["password"] == "<redacted 4 bytes>"
    assert login["version"] == "0.7.0"
    assert b"\x04iggy\x05" not in repr(rows).encode()
    assert json.loads(cmds[4]["details"])["name"] == "test_stream"
    topic = json.loads(cmds[7]["details"])
    assert topic["name"] == "test_topic" and len(topic["partitions"]) == 3
    assert cmds[6]["topic"] == "1/test_topic"
    lat = table(rows, "latencies")
    assert [r["request_command"] for r in lat] == ["LOGIN_USER", "PING", "CREATE_STREAM", "CREATE_TOPIC"]
    assert all(r["latency_us"] > 0 and r["error_code"] == 0 for r in lat)
    assert round(lat[1]["latency_us"]) == 215


def test_public_capture_through_decode_files():
    from brokerscope.streams import decode_files

    out = decode_files([RS])
    iggy = [s for s in out["streams"] if s["protocol"] == "iggy"]
    assert len(iggy) == 1 and iggy[0]["server_port"] == 8090
    assert iggy[0]["frames_ok"] == 8 and iggy[0]["frames_failed"] == 0
    others = [s for s in out["streams"] if s["server_port"] != 8090]
    assert others and all(s["protocol"] != "iggy" for s in others)
    cmds = [c for c in out["commands"] if c["protocol"] == "iggy"]
    assert [c["command"] for c in cmds] == [
        n for n in ("LOGIN_USER", "PING", "CREATE_STREAM", "CREATE_TOPIC") for _ in (0, 1)
    ]
    assert all(c["decode_status"] == "ok" for c in cmds)
    assert "<redacted 4 bytes>" in cmds[0]["details"]
    lat = [r for r in out["latencies"] if r["protocol"] == "iggy"]
    assert [r["correlation_id"] for r in lat] == [1, 2, 3, 4]


def test_damaged_logins_never_leak_the_password():
    """Random byte damage to a login conversation: the password is in no row, ever."""
    import random

    secret = b"LongSecretPw123"
    classic = [
        ("c2s", req(38, s8("iggy") + s8(secret) + s32("0.7") + s32(""))),
        ("s2c", resp(u32(1))),
        ("c2s", req(1)),
        ("s2c", resp()),
    ]
    body = b"\0" * 4 + s8("sdk") + s8("1") + s8("u") + s8(secret) + b"\0" * 4
    vsr = [
        ("c2s", vsr_header(5, 256 + len(body), request=0, operation=1) + body),
        ("s2c", vsr_header(8, 256, request=0, operation=1)),
    ]
    rnd = random.Random(11)
    for i in range(400):
        chunks = []
        for d, data in classic if i % 2 else vsr:
            b = bytearray(data)
            for _ in range(rnd.randrange(0, 3)):
                b[rnd.randrange(min(len(b), 300))] = rnd.randrange(256)
            chunks.append((d, bytes(b)))
        rows = run(chunks, allow_anomalies=True)  # damage may pair a reply with a later request
        assert secret not in repr(rows).encode()


# a request header hidden in a stream name: SEND_MESSAGES claiming 1 MiB, read out of payload bytes
FALSE_HEADER = u32(1 << 20) + u32(101)
ABSURD = 2**31 - 1


def _absurd_create_stream(framing_req) -> bytes:
    """A CREATE_STREAM whose length field claims 2^31-1 bytes; its name hides a false header."""
    frame = bytearray(framing_req(202, u32(1) + s8((FALSE_HEADER + b"abc").decode("latin-1"))))
    frame[0:4] = u32(ABSURD)
    return bytes(frame)


@pytest.mark.parametrize("chunk", [7, 97, 100_000])
def test_resync_after_an_absurd_length_finds_the_real_requests(chunk):
    """Classic framing: the absurd length is recorded as oversize and not skipped; the resync
    passes over the false header in the name (its frame can never be confirmed) and takes the
    ten PINGs and the CREATE_STREAM after it, which pair with their responses in order."""
    good = [req(1)] * 10 + [req(202, u32(2) + s8("s2"))]
    c2s = login()[0][1] + _absurd_create_stream(req) + b"".join(good)
    s2c = resp(u32(1)) + resp() * 10 + resp(u32(2) + u64(5) + u32(0) + u64(0) + u64(0) + s8("s2"))
    feeds = [("c2s", c2s[i : i + chunk]) for i in range(0, len(c2s), chunk)] + [("s2c", s2c)]
    rows = run(feeds)
    c2s_rows = [
        (c.get("command"), c["decode_status"]) for c in table(rows, "commands") if c["direction"] == "c2s"
    ]
    assert c2s_rows == [("LOGIN_USER", "ok"), ("CREATE_STREAM", "oversize")] + [("PING", "ok")] * 10 + [
        ("CREATE_STREAM", "ok")
    ]
    # the damaged frame is one row up to the first real request: every byte in exactly one row
    c2s_cmds = [c for c in table(rows, "commands") if c["direction"] == "c2s"]
    assert c2s_cmds[1]["size"] == len(_absurd_create_stream(req)) and sum(c["size"] for c in c2s_cmds) == len(
        c2s
    )
    lat = table(rows, "latencies")
    assert [(r["request_command"], r["response_command"]) for r in lat] == [
        ("LOGIN_USER", "LOGIN_USER"),
        *[("PING", "PING")] * 10,
        ("CREATE_STREAM", "CREATE_STREAM"),
    ]
    assert all(c["decode_status"] == "ok" for c in table(rows, "commands") if c["direction"] == "s2c")


def test_resync_with_request_ids_takes_the_frame_that_continues_the_sequence():
    """Request-id framing: after the absurd length, the first request whose id follows the last
    one is taken at once, even before its frame is all buffered."""
    c2s = req2(1, 1) + _absurd_create_stream(lambda code, p: req2(code, 2, p))
    c2s += b"".join(req2(1, rid) for rid in range(3, 13))
    s2c = b"".join(resp2(rid) for rid in [1, *range(3, 13)])
    rows = run([("c2s", c2s[i : i + 5]) for i in range(0, len(c2s), 5)] + [("s2c", s2c)])
    ok = [
        c["correlation_id"]
        for c in table(rows, "commands")
        if c["direction"] == "c2s" and c["decode_status"] == "ok"
    ]
    assert ok == [1, *range(3, 13)]
    lat = table(rows, "latencies")
    assert sorted(r["correlation_id"] for r in lat if r["response_command"] == "PING") == [1, *range(3, 13)]


def test_absurd_response_length_is_not_skipped():
    """A response whose length claims 2^31-1 bytes: recorded, not skipped; the responses after it
    still pair with their requests."""
    create = req(202, u32(1) + s8("s"))
    created = resp(u32(1) + u64(5) + u32(0) + u64(0) + u64(0) + s8("s"))
    bad = u32(0) + u32(ABSURD) + b"\xee" * 5
    rows = run([("c2s", create * 3), ("s2c", created + bad + created + created)])
    s2c = [(c.get("command"), c["decode_status"]) for c in table(rows, "commands") if c["direction"] == "s2c"]
    assert s2c == [
        ("CREATE_STREAM", "ok"),
        (None, "oversize"),
        ("CREATE_STREAM", "ok"),
        ("CREATE_STREAM", "ok"),
    ]
    assert [r["response_command"] for r in table(rows, "latencies")] == ["CREATE_STREAM"] * 3


def test_a_capture_begun_inside_a_request_finds_the_next_one():
    """A connection captured from the last byte of a request on (found by a user trial: that
    byte and the next request's header read as a 10 KiB frame, the whole client side one
    truncated row, no latencies): the first frame start of a mid-stream capture must be
    credible; the stray byte is one malformed row and every request after it decodes."""
    import dataclasses

    from tests.support.drive import Drive

    d = Drive(PROTOCOL.conversation(dataclasses.replace(CONN, midstream=True), Context()))
    feeds = [
        ("c2s", b"\x00"),  # the last byte of a request whose start the capture missed
        ("s2c", resp()),
        ("c2s", req(37, b"\x01\x04" + u32(7) + s8("old-pass") + s8("new-pass"))),  # CHANGE_PASSWORD
        ("s2c", resp()),
        ("c2s", req(1, b"")),  # PING
        ("s2c", resp()),
    ]
    for i, (direction, data) in enumerate(feeds):
        d.feed(direction, data, ts=1_000_000_000 + i * 1_000_000)
    d.close()
    out = d.tables()
    c2s = [(r["command"], r["decode_status"]) for r in out["commands"] if r["direction"] == "c2s"]
    assert c2s == [(None, "malformed"), ("CHANGE_PASSWORD", "ok"), ("PING", "ok")]
    assert len(out["latencies"]) == 2


def _with_damaged_length(frame: bytes, byte: int) -> bytes:
    """`frame` with bit 4 of its little-endian length's byte `byte` flipped (1: + 4096, 2: + 1 MiB)."""
    out = bytearray(frame)
    out[byte] ^= 0x10
    return bytes(out)


@pytest.mark.parametrize("byte", [1, 2])
@pytest.mark.parametrize("framing", ["classic", "request ids"])
def test_requests_read_again_after_a_damaged_length_pair_with_the_responses_that_came_first(framing, byte):
    """GET_STREAM requests and their responses one after the other, the 11th request's length
    damaged (+4096 mid-stream, or +1 MiB: it runs past the end of the connection). The requests
    after it wait inside it until it is read again, while their responses arrive: they were
    request_missing and 110 requests unanswered (classic: 11 of 121 latencies). Now the
    responses wait for the client's frame under way, the damaged request keeps its place
    (classic pairing is in order) and every latency is its own exchange's 1 ms."""
    names = [str_id(f"stream-{i:04d}" * 4) for i in range(120)]  # 4096 bytes past the 11th: 84 more
    if framing == "classic":
        reqs = [req(200, n) for n in names]
        resps = [resp() for _ in range(120)]
    else:
        reqs = [req2(200, i + 2, n) for i, n in enumerate(names)]
        resps = [resp2(i + 2) for i in range(120)]
    reqs[10] = _with_damaged_length(reqs[10], byte)
    feeds = list(login()) if framing == "classic" else [("c2s", req2(1, 1)), ("s2c", resp2(1))]
    feeds += [f for q, r in zip(reqs, resps) for f in (("c2s", q), ("s2c", r))]
    rows = run(feeds)
    lat = table(rows, "latencies")
    assert len(lat) == 121 and all(r.get("latency_us") == 1000.0 for r in lat)
    cmds = table(rows, "commands")
    assert all(c["decode_status"] == "ok" for c in cmds if c["direction"] == "s2c")
    [bad] = [c for c in cmds if c["decode_status"] != "ok"]
    assert bad["direction"] == "c2s" and "its length damaged" in bad["decode_error"]
    assert bad["size"] == len(reqs[10])


def test_a_response_before_the_capture_does_not_take_the_request_under_way():
    """Classic framing: a response (to a request before the capture) arrives while the first
    captured request is still coming: it waits for that request, which is whole and not read
    again, so it answers none; the request pairs with its own response."""
    big = req(200, str_id("s" * 200))
    feeds = [("c2s", big[:40]), ("s2c", resp(u32(7))), ("c2s", big[40:]), ("s2c", resp())]
    rows = run(feeds)
    [missing, answer] = [c for c in table(rows, "commands") if c["direction"] == "s2c"]
    assert missing["decode_status"] == "request_missing" and answer["decode_status"] == "ok"
    [lat] = table(rows, "latencies")
    assert lat["request_command"] == "GET_STREAM" and lat["latency_us"] == 1000.0


def test_a_held_response_keeps_its_frame_numbers(tmp_path, monkeypatch):
    """The classic exchanges in a capture, decoded by the driver: a held response's rows name the
    packet that carried it, though its direction moved on (the driver prunes a direction's packet
    index below the conversation's low_water every few packets here)."""
    from brokerscope import streams
    from tests.support.synth import write_capture

    monkeypatch.setattr(streams, "PRUNE_AT", 4)
    reqs = [req(200, str_id(f"stream-{i:04d}" * 4)) for i in range(120)]
    reqs[10] = _with_damaged_length(reqs[10], 1)
    pairs = [(login()[0][1], login()[1][1])] + [(q, resp()) for q in reqs]
    path = tmp_path / "iggy.pcap"
    write_capture(
        str(path), n_conns=1, exchanges=len(pairs), server_port=8090, payloads=lambda c, i: pairs[i]
    )
    out = streams.decode_files([str(path)])
    got = sorted((r["first_frame"], r["last_frame"]) for r in out["commands"] if r["direction"] == "s2c")
    # handshake frames 1-3, then request k (the login 0) at frame 4 + 2 k, its response one after
    assert got == [(5 + 2 * k,) * 2 for k in range(121)]
    assert all(r["latency_us"] == 10.0 for r in out["latencies"])  # synth's packets are 10 us apart
