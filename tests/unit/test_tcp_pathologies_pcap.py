"""Each TCP pathology end to end: scapy-built packets -> pcap file -> capture reader -> reassembly
-> a recording decoder. Asserts the exact bytes (and gaps) each direction's decoder received and
the streams row counters."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP, fragment
from scapy.layers.l2 import Ether

from brokerscope.config import Settings
from brokerscope.protocols import base
from brokerscope.streams import decode_files
from brokerscope.tcp.connection import HELD_MAX
from tests.support import synth
from tests.unit.kafka.kit import produce_request, produce_response, records

PORT = 5555
CLI, SRV = "10.0.0.1", "10.0.0.2"
FED: dict[str, dict[str, list]] = {}  # conn_id -> direction -> [bytes | ("gap", n)]


class _Recording(base.Conversation):
    def __init__(self, conn, ctx):
        super().__init__(conn, ctx)
        self.got = FED.setdefault(conn.conn_id, {base.C2S: [], base.S2C: []})

    def feed(self, direction, data, ts_ns):
        self.got[direction].append(bytes(data))
        return ()

    def gap(self, direction, nbytes, ts_ns):
        self.got[direction].append(("gap", nbytes))
        return ()


class _RecordingProtocol(base.Protocol):
    name = "rec"
    default_ports = (PORT,)

    def conversation(self, conn, ctx):
        return _Recording(conn, ctx)


@pytest.fixture(autouse=True)
def recording_protocol():
    base.protocols()  # load the built-ins first so they are not re-imported later
    base.register(_RecordingProtocol())
    FED.clear()
    yield
    base._registry.pop("rec", None)


def _joined(items: list) -> list:
    """Adjacent byte chunks merged; gaps kept as ("gap", n)."""
    out: list = []
    for it in items:
        if isinstance(it, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += it
        else:
            out.append(it)
    return out


def c(seq, flags="PA", payload=b"", ack=1000, sport=40000, **kw):
    return (
        Ether()
        / IP(src=CLI, dst=SRV)
        / TCP(sport=sport, dport=PORT, seq=seq, ack=ack, flags=flags, **kw)
        / payload
    )


def s(seq, flags="PA", payload=b"", ack=1, sport=40000, **kw):
    return (
        Ether()
        / IP(src=SRV, dst=CLI)
        / TCP(sport=PORT, dport=sport, seq=seq, ack=ack, flags=flags, **kw)
        / payload
    )


def handshake(cseq=0, sseq=999, sport=40000):
    return [
        c(cseq, "S", ack=0, sport=sport),
        s(sseq, "SA", ack=cseq + 1, sport=sport),
        c(cseq + 1, "A", ack=sseq + 1, sport=sport),
    ]


def write_pcap(path, pkts, snap: dict[int, int] | None = None) -> None:
    """Little-endian microsecond pcap; `snap` = {packet index: captured length} cuts packets."""
    with open(path, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, p in enumerate(pkts):
            raw = bytes(p)
            cap = (snap or {}).get(i, len(raw))
            ts = 1_700_000_000_000_000 + i * 1000
            fh.write(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, cap, len(raw)))
            fh.write(raw[:cap])


def run(tmp_path, pkts, snap=None, tcp=None) -> tuple[dict, dict]:
    """`tcp`: [tcp] settings to override."""
    path = tmp_path / "t.pcap"
    write_pcap(path, pkts, snap)
    overrides = {"ports": {"rec": [PORT]}} | ({"tcp": tcp} if tcp else {})
    out = decode_files([str(path)], Settings.load(overrides=overrides))
    (row,) = [r for r in out["streams"] if r["protocol"] == "rec"]
    got = FED[row["conn_id"]]
    return row, {d: _joined(v) for d, v in got.items()}


def test_out_of_order(tmp_path):
    pkts = handshake() + [c(1 + 5, payload=b"world"), c(1, payload=b"hello"), s(1000, payload=b"ok", ack=11)]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"helloworld"], "s2c": [b"ok"]}
    assert row["out_of_order"] == 1 and row["gap_count"] == 0 and row["roles_by"] == "syn"


def test_exact_and_partial_retransmissions(tmp_path):
    pkts = handshake() + [
        c(1, payload=b"abcdef"),
        c(1, payload=b"abcdef"),  # exact
        c(4, payload=b"defghi"),  # overlaps 3 delivered bytes, 3 new
        s(1000, payload=b"x", ack=10),
    ]
    row, got = run(tmp_path, pkts)
    assert got["c2s"] == [b"abcdefghi"]
    assert row["retransmitted_bytes"] == 9


def test_keepalive_and_zero_window_probe(tmp_path):
    pkts = handshake() + [
        c(1, payload=b"data"),
        s(1000, "A", ack=5, window=0),
        c(4, "A", payload=b"\x00"),  # keep-alive: seq = next - 1, one garbage byte
        c(5, payload=b"P"),  # zero-window probe: one real byte at next seq
        s(1000, "A", ack=5, window=0),
        c(5, payload=b"PROBE"),  # the probe byte resent inside a bigger segment
        s(1000, payload=b"r", ack=10),
    ]
    row, got = run(tmp_path, pkts)
    assert got["c2s"] == [b"dataPROBE"]


def test_sequence_wrap_around(tmp_path):
    isn = 2**32 - 3
    pkts = handshake(cseq=isn) + [
        c(isn + 1, payload=b"abcd"),  # crosses 2^32
        c((isn + 5) % 2**32, payload=b"efgh"),
        s(1000, payload=b"ok", ack=(isn + 9) % 2**32),
    ]
    row, got = run(tmp_path, pkts)
    assert got["c2s"] == [b"abcdefgh"] and row["gap_count"] == 0


def test_capture_starting_mid_stream(tmp_path):
    pkts = [c(5000, payload=b"tail-of-request"), s(7000, payload=b"reply", ack=5015)]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"tail-of-request"], "s2c": [b"reply"]}
    assert row["midstream"] and not row["syn_seen"] and row["roles_by"] == "port"


def test_data_after_fin_and_rst(tmp_path):
    pkts = handshake() + [
        c(1, "FA", payload=b"last words"),  # client half-closes with data
        s(1000, payload=b"still talking", ack=12),  # server goes on after the client's FIN
        s(1013, "RA", payload=b"!", ack=12),  # and resets, with a last in-sequence byte
    ]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"last words"], "s2c": [b"still talking!"]}
    assert row["fin_seen"] and row["rst_seen"]


def test_missing_segment_is_a_gap_of_known_size(tmp_path):
    pkts = handshake() + [
        c(1, payload=b"AAAA"),
        # 6 bytes at seq 5..10 never captured
        c(11, payload=b"CCCC"),
        s(1000, payload=b"ack", ack=15),  # the server acknowledged past the hole
    ]
    row, got = run(tmp_path, pkts)
    assert got["c2s"] == [b"AAAA", ("gap", 6), b"CCCC"]
    assert row["gap_count"] == 1 and row["gap_bytes"] == 6


def test_data_captured_after_the_ack_for_it_is_data_not_a_gap(tmp_path):
    """Two interfaces (or a NIC's queues) merged out of order: the server's pure ACK of a segment
    is in the file before the segment (found by a user trial: a gap, then the bytes thrown away
    as a retransmission, a Produce lost)."""
    pkts = handshake() + [
        c(1, payload=b"AAAA"),
        s(1000, "A", ack=15),  # acknowledges 10 bytes not captured yet
        c(5, payload=b"BBBBBB"),
        c(11, payload=b"CCCC"),
        s(1000, payload=b"ok", ack=15),
    ]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAABBBBBBCCCC"], "s2c": [b"ok"]}
    assert row["gap_count"] == row["retransmitted_bytes"] == 0
    # two late segments, out of order among themselves too
    FED.clear()
    pkts = handshake() + [
        c(1, payload=b"AAAA"),
        s(1000, "A", ack=15),
        c(5, payload=b"BBB"),
        c(11, payload=b"CCCC"),
        c(8, payload=b"bbb"),
        s(1000, payload=b"ok", ack=15),
    ]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAABBBbbbCCCC"], "s2c": [b"ok"]}
    assert row["gap_count"] == row["retransmitted_bytes"] == 0
    # the answer itself acknowledges the request's last segment, captured after it
    FED.clear()
    pkts = handshake() + [c(1, payload=b"AAAA"), s(1000, payload=b"ok", ack=11), c(5, payload=b"BBBBBB")]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAABBBBBB"], "s2c": [b"ok"]}
    assert row["gap_count"] == row["retransmitted_bytes"] == 0


def _skewed(skew: int) -> tuple[list, bytes]:
    """The client's request AAAA|BBBBBB, its last segment in the file after `skew` packets of the
    server that acknowledge it (two capture points merged with more skew, found by a user trial):
    a pure ACK, then the answer in 3-byte pieces; then the next exchange, in order. Returns the
    packets and the server's bytes."""
    held, seq = [s(1000, "A", ack=11)], 1000
    while len(held) < skew:
        piece = b"%c" % (ord("a") + len(held)) * 3
        held.append(s(seq, payload=piece, ack=11))
        seq += len(piece)
    pkts = handshake() + [c(1, payload=b"AAAA"), *held, c(5, payload=b"BBBBBB", ack=1000)]
    pkts += [c(11, payload=b"CC", ack=seq), s(seq, payload=b"ok", ack=13)]
    return pkts, b"".join(bytes(p["TCP"].payload) for p in held) + b"ok"


@pytest.mark.parametrize("skew", [2, 3])
def test_a_request_end_captured_after_several_packets_acknowledging_it_is_data(tmp_path, skew):
    """The packets acknowledging the late segment wait for it (up to HELD_MAX of them), then come
    after it in capture order: no gap, nothing thrown away as a retransmission."""
    pkts, answer = _skewed(skew)
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAABBBBBBCC"], "s2c": [answer]}
    assert row["gap_count"] == row["retransmitted_bytes"] == 0


def test_a_request_end_captured_beyond_the_bound_is_still_a_gap(tmp_path):
    """HELD_MAX packets acknowledging it wait for it; more than that, and the hole is declared a
    gap before the first of them, as before, and the bytes captured later are a retransmission."""
    pkts, answer = _skewed(HELD_MAX)
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAABBBBBBCC"], "s2c": [answer]}
    assert row["gap_count"] == row["retransmitted_bytes"] == 0
    FED.clear()
    pkts, answer = _skewed(HELD_MAX + 1)
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAA", ("gap", 6), b"CC"], "s2c": [answer]}
    assert (row["gap_count"], row["gap_bytes"], row["retransmitted_bytes"]) == (1, 6, 6)


@pytest.mark.parametrize(
    "tcp, within, beyond",
    [({"reorder_timeout_s": 0.0015}, 2, 3), ({"max_reorder_bytes": 5}, 2, 3)],
    ids=["reorder_timeout_s", "max_reorder_bytes"],
)
def test_packets_held_for_a_late_segment_are_bounded_by_the_reorder_limits(tmp_path, tcp, within, beyond):
    """The held packets are bounded by the reassembly's own limits too: held longer than
    tcp.reorder_timeout_s (packets 1 ms apart here), or holding more than tcp.max_reorder_bytes
    of payload, the hole is a gap; within them it is not."""
    pkts, answer = _skewed(beyond)
    row, got = run(tmp_path, pkts, tcp=tcp)
    assert got == {"c2s": [b"AAAA", ("gap", 6), b"CC"], "s2c": [answer]}
    assert (row["gap_count"], row["gap_bytes"], row["retransmitted_bytes"]) == (1, 6, 6)
    FED.clear()
    pkts, answer = _skewed(within)
    row, got = run(tmp_path, pkts, tcp=tcp)
    assert got == {"c2s": [b"AAAABBBBBBCC"], "s2c": [answer]}
    assert row["gap_count"] == row["retransmitted_bytes"] == 0


@pytest.mark.parametrize("skew", [2, 3])
def test_a_produce_whose_last_segment_is_captured_after_its_response_is_decoded(tmp_path, skew):
    """Kafka end to end: a Produce request in two segments, the second in the file after `skew`
    packets of the broker acknowledging it (a pure ACK, then the response in pieces): every record
    is a produce row with its offset, the request pairs with its response, and no gap row."""
    A, P, S = synth.ACK, synth.PSH, synth.SYN
    recs = records([(b"k%d" % i, b"value %d" % i, []) for i in range(5)])
    req, resp = produce_request(9, "orders", 0, recs, corr=7), produce_response(9, "orders", 0, 40, corr=7)
    cut, k = len(req) // 2, 9092
    cs, ss = 1000, 900_000
    end = cs + len(req)
    pieces = [resp[i * len(resp) // (skew - 1) : (i + 1) * len(resp) // (skew - 1)] for i in range(skew - 1)]
    broker = [(SRV, k, CLI, 40000, ss, end, A)]
    at = ss
    for piece in pieces:
        broker.append((SRV, k, CLI, 40000, at, end, P | A, piece))
        at += len(piece)
    pkts = [
        (CLI, 40000, SRV, k, cs - 1, 0, S),
        (SRV, k, CLI, 40000, ss - 1, cs, S | A),
        (CLI, 40000, SRV, k, cs, ss, A),
        (CLI, 40000, SRV, k, cs, ss, P | A, req[:cut]),
        *broker,
        (CLI, 40000, SRV, k, cs + cut, ss, P | A, req[cut:]),  # captured after the broker's packets
        (CLI, 40000, SRV, k, end, at, A),
    ]
    w = synth.PcapWriter(str(tmp_path / "produce.pcap"))
    for i, p in enumerate(pkts):
        w.write(1_700_000_000_000_000_000 + i * 1_000_000, synth.frame(*p))
    w.close()
    out = decode_files([str(tmp_path / "produce.pcap")])
    (st,) = out["streams"]
    assert (st["protocol"], st["gap_count"], st["retransmitted_bytes"]) == ("kafka", 0, 0)
    assert [r["decode_status"] for r in out["commands"]] == ["ok", "ok"]
    produced = [(m["key"], m["offset"]) for m in out["messages"]]
    assert produced == [(b"k%d" % i, 40 + i) for i in range(5)]
    assert [lat["correlation_id"] for lat in out["latencies"]] == [7]


def test_a_fin_captured_after_its_ack_is_a_fin_not_a_one_byte_gap(tmp_path):
    """Two one-direction captures merged with skew (found by a user trial): the server's FIN in the
    file after the client's ACK of it. The ACK waits for it, and the FIN's sequence number is no
    data byte: no gap, the FIN seen, the history as in capture order without the skew; the same
    where the FIN is the connection's last packet, and where an ACK of the server's pure ACK
    and FIN are both late."""
    close = [c(11, "FA", ack=1003), s(1003, "FA", ack=12), c(12, "A", ack=1004)]
    pkts = handshake() + [c(1, payload=b"request..."), s(1000, payload=b"ok!", ack=11)]
    for order in ([0, 1, 2], [0, 2, 1]):
        FED.clear()
        row, got = run(tmp_path, pkts + [close[i] for i in order])
        assert got == {"c2s": [b"request..."], "s2c": [b"ok!"]}
        assert (row["gap_count"], row["gap_bytes"], row["retransmitted_bytes"]) == (0, 0, 0)
        assert (row["history"], row["conn_state"], row["fin_seen"]) == ("ShADdFf", "SF", True)
    # the response never captured, the FIN after its ACK: a gap of the 3 bytes, not of 4
    FED.clear()
    pkts = handshake() + [c(1, payload=b"request..."), c(11, "FA", ack=1000), c(12, "A", ack=1004)]
    row, got = run(tmp_path, pkts + [s(1003, "FA", ack=12)])
    assert got == {"c2s": [b"request..."], "s2c": [("gap", 3)]}
    assert (row["gap_count"], row["gap_bytes"], row["fin_seen"]) == (1, 3, True)


def test_the_servers_fin_captured_after_the_clients_fin_ack_of_it_is_a_fin(tmp_path):
    """The server closes first; the client's FIN+ACK, acknowledging the server's FIN, is in the
    file before it (two one-direction captures merged with skew: a trial found a 1-byte gap row
    invented). The FIN+ACK waits for the FIN as an ACK does: no gap; the FIN seen."""
    close = [s(1003, "FA", ack=11), c(11, "FA", ack=1004), s(1004, "A", ack=12)]
    pkts = handshake() + [c(1, payload=b"request..."), s(1000, payload=b"ok!", ack=11)]
    for order in ([0, 1, 2], [1, 0, 2]):
        FED.clear()
        row, got = run(tmp_path, pkts + [close[i] for i in order])
        assert got == {"c2s": [b"request..."], "s2c": [b"ok!"]}, order
        assert (row["gap_count"], row["gap_bytes"], row["retransmitted_bytes"]) == (0, 0, 0), order
        assert (row["conn_state"], row["fin_seen"]) == ("SF", True), order
    # the server's FIN never captured, its ACKs by the client and its own last ACK are: no gap
    # (a byte of data lost there is a gap once bytes after it come)
    for tail in ([close[1]], [close[1], close[2]]):
        FED.clear()
        row, got = run(tmp_path, pkts + tail)
        assert got == {"c2s": [b"request..."], "s2c": [b"ok!"]}, tail
        assert (row["gap_count"], row["gap_bytes"], row["retransmitted_bytes"]) == (0, 0, 0), tail
    FED.clear()
    row, got = run(
        tmp_path, pkts + [c(11, "A", ack=1004), s(1004, payload=b"more", ack=11), c(11, "A", ack=1008)]
    )
    assert got == {"c2s": [b"request..."], "s2c": [b"ok!", ("gap", 1), b"more"]}
    assert (row["gap_count"], row["gap_bytes"]) == (1, 1)
    # the 4-tuple used again while the FIN+ACK waits for a FIN never captured: a new connection
    FED.clear()
    path = tmp_path / "again.pcap"
    write_pcap(
        path, pkts + [close[1]] + handshake(cseq=5000, sseq=7000) + [c(5001, payload=b"again", ack=7001)]
    )
    out = decode_files([str(path)], Settings.load(overrides={"ports": {"rec": [PORT]}}))
    first, second = sorted(out["streams"], key=lambda r: r["ts"])
    assert _joined(FED[second["conn_id"]][base.C2S]) == [b"again"]
    assert (first["fin_seen"], second["history"], second["gap_count"]) == (True, "ShAD", 0)


def test_a_pure_ack_at_the_holes_start_does_not_declare_it(tmp_path):
    """The client's ACK of the response, then the server's pure ACK of the request (its sequence
    number the response's first: the response was not sent yet), then the response (found by a
    user trial: the response a 'capture gap', then thrown away as a retransmission). A pure ACK
    past the hole's start shows the bytes before it were sent: it still declares the hole."""
    pkts = handshake() + [
        c(1, payload=b"request..."),
        c(11, "A", ack=1003),  # acknowledges the response, captured after it
        s(1000, "A", ack=11),  # sent before the response
        s(1000, payload=b"ok!", ack=11),
        c(11, payload=b"next", ack=1003),
    ]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"request...next"], "s2c": [b"ok!"]}
    assert (row["gap_count"], row["retransmitted_bytes"], row["history"]) == (0, 0, "ShADad")
    # a keep-alive (one before the hole's start) waits too
    FED.clear()
    pkts[5] = s(999, "A", ack=11)
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"request...next"], "s2c": [b"ok!"]}
    assert (row["gap_count"], row["retransmitted_bytes"]) == (0, 0)
    # past the hole's start: the 3 bytes before it were sent, never captured
    FED.clear()
    pkts[5] = s(1003, "A", ack=11)
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"request...next"], "s2c": [("gap", 3)]}
    assert (row["gap_count"], row["gap_bytes"], row["retransmitted_bytes"]) == (1, 3, 3)


def _kafka_produce_connection() -> tuple[list, list]:
    """A Kafka connection in capture order without skew: handshake, a Produce, its response,
    the client's close. Returns the names and the packets (synth.frame arguments)."""
    A, P, S, F = synth.ACK, synth.PSH, synth.SYN, synth.FIN
    recs = records([(b"k%d" % i, b"value %d" % i, []) for i in range(3)])
    req, resp = produce_request(9, "orders", 0, recs, corr=7), produce_response(9, "orders", 0, 40, corr=7)
    k, cs, ss = 9092, 1000, 900_000
    ce, se = cs + len(req), ss + len(resp)

    def cli(seq, ack, flags, payload=b""):
        return (CLI, 40000, SRV, k, seq, ack, flags, payload)

    def srv(seq, ack, flags, payload=b""):
        return (SRV, k, CLI, 40000, seq, ack, flags, payload)

    named = [
        ("syn", cli(cs - 1, 0, S)),
        ("syn-ack", srv(ss - 1, cs, S | A)),
        ("ack", cli(cs, ss, A)),
        ("request", cli(cs, ss, P | A, req)),
        ("broker ack", srv(ss, ce, A)),
        ("response", srv(ss, ce, P | A, resp)),
        ("client ack", cli(ce, se, A)),
        ("client fin", cli(ce, se, F | A)),
        ("broker fin", srv(se, ce + 1, F | A)),
        ("last ack", cli(ce + 1, se + 1, A)),
    ]
    return [n for n, _ in named], [p for _, p in named]


def _decoded_without_ids(path, names, pkts, moves: dict[str, str]) -> dict[str, list[dict]]:
    """The packets written 1 ms apart, those in `moves` 1 us after the one named (two captures
    merged with skew), decoded; the rows without what the file's bytes and frame order name
    (capture ids, frame numbers) and the connection's end time (a FIN moved last)."""
    at = {n: 1_700_000_000_000_000_000 + i * 1_000_000 for i, n in enumerate(names)}
    at |= {n: at[after] + 1000 for n, after in moves.items()}
    w = synth.PcapWriter(str(path))
    for n, p in sorted(zip(names, pkts), key=lambda np: at[np[0]]):
        w.write(at[n], synth.frame(*p))
    w.close()
    out = decode_files([str(path)])
    drop = {"capture_id", "capture_ids", "first_frame", "last_frame", "last_ts", "duration_us"}
    tables = ("commands", "messages", "latencies", "acks", "streams")
    return {t: [{k: v for k, v in r.items() if k not in drop} for r in out[t]] for t in tables}


@pytest.mark.parametrize(
    "moves",
    [
        {"broker fin": "last ack"},
        {"client ack": "request"},
        {"broker fin": "last ack", "client ack": "request"},
    ],
    ids=["fin-after-its-ack", "pure-ack-before-the-response", "both"],
)
def test_a_kafka_connection_merged_with_skew_has_the_rows_of_the_unskewed_capture(tmp_path, moves):
    """Kafka end to end, a client-side and a broker-side capture merged with a small offset (found
    by a user trial: 'capture gap' rows invented, or the response lost): the broker's FIN after
    the client's ACK of it, or the client's ACK of the response before the broker's pure ACK of
    the request and the response: the same rows as the capture without skew."""
    names, pkts = _kafka_produce_connection()
    want = _decoded_without_ids(tmp_path / "plain.pcap", names, pkts, {})
    assert [r["decode_status"] for r in want["commands"]] == ["ok", "ok"] and len(want["latencies"]) == 1
    assert (want["streams"][0]["gap_count"], want["streams"][0]["history"]) == (0, "ShADadFf")
    assert _decoded_without_ids(tmp_path / "skewed.pcap", names, pkts, moves) == want


def test_a_syn_ack_captured_after_the_clients_ack_loses_nothing(tmp_path):
    """The SYN+ACK captured after the client's ACK of it: the broker's direction starts with that
    SYN+ACK (an ACK of a direction not started yet declares nothing), no gap, the same rows; only
    the history keeps the letters in capture order (passes without today's change: a check, not
    a fix)."""
    names, pkts = _kafka_produce_connection()
    want = _decoded_without_ids(tmp_path / "plain.pcap", names, pkts, {})
    got = _decoded_without_ids(tmp_path / "skewed.pcap", names, pkts, {"ack": "syn"})
    assert got["streams"][0].pop("history") == "SAhDadFf"
    assert got == {**want, "streams": [{k: v for k, v in want["streams"][0].items() if k != "history"}]}


def test_an_ack_past_bytes_never_captured_is_still_a_gap_before_what_follows(tmp_path):
    """The ACK's gap waits only until the client's packets go on past the hole: the decoder sees
    it before the bytes of the packets held with the ACK and of that packet, in either
    direction, as it did when the ACK declared it."""
    pkts = handshake() + [
        c(1, payload=b"AAAA"),
        s(1000, "A", ack=11),  # 6 bytes at 5..10 never captured
        s(1000, payload=b"resp", ack=11),
        c(11, payload=b"CCCC"),
    ]
    row, got = run(tmp_path, pkts)
    assert got == {"c2s": [b"AAAA", ("gap", 6), b"CCCC"], "s2c": [b"resp"]}
    assert row["gap_count"] == 1 and row["gap_bytes"] == 6
    assert FED[row["conn_id"]]["c2s"][1] == ("gap", 6)


def test_snap_length_cut_packet(tmp_path):
    pkts = handshake() + [c(1, payload=b"0123456789"), c(11, payload=b"next"), s(1000, payload=b"k", ack=15)]
    header = len(bytes(pkts[3])) - 10
    row, got = run(tmp_path, pkts, snap={3: header + 4})  # 4 of 10 payload bytes captured
    assert got["c2s"] == [b"0123", ("gap", 6), b"next"]
    assert row["snap_truncated_packets"] == 1 and row["c2s_bytes"] == 14


def test_reused_four_tuple_is_a_new_connection(tmp_path):
    first = handshake() + [c(1, payload=b"one"), c(4, "FA"), s(1000, "FA", ack=5), c(5, "A", ack=1001)]
    second = handshake(cseq=90000, sseq=70000) + [c(90001, payload=b"two", ack=70001)]
    path = tmp_path / "t.pcap"
    write_pcap(path, first + second)
    out = decode_files([str(path)], Settings.load(overrides={"ports": {"rec": [PORT]}}))
    rows = sorted(out["streams"], key=lambda r: r["first_ts"])
    assert len(rows) == 2
    assert [_joined(FED[r["conn_id"]]["c2s"]) for r in rows] == [[b"one"], [b"two"]]


def test_ipv4_fragments_are_reassembled_not_misread(tmp_path):
    seg = c(1, payload=b"F" * 3000)
    frags = [Ether() / f for f in fragment(seg[IP], fragsize=1000)]
    assert len(frags) >= 3
    pkts = handshake() + frags + [s(1000, payload=b"ok", ack=3001)]
    row, got = run(tmp_path, pkts)
    assert got["c2s"] == [b"F" * 3000]
    assert row["c2s_packets"] == 3  # SYN, ACK and the one reassembled datagram


class _Exploding(base.Conversation):
    def feed(self, direction, data, ts_ns):
        if b"boom" in data:
            raise RuntimeError("decoder bug")
        return [("commands", {"ts_ns": ts_ns, "direction": direction, "command": "X", "decode_status": "ok"})]


class _ExplodingProtocol(base.Protocol):
    name = "boom"

    def conversation(self, conn, ctx):
        return _Exploding(conn, ctx)


def test_a_decoder_that_raises_is_retired_for_its_connection_only(tmp_path):
    """A decoder bug becomes a decoder_error row; that connection's other rows so far and every other
    connection are kept, and the run goes on."""
    base.register(_ExplodingProtocol())
    try:
        bad = handshake(sport=40001) + [
            c(1, payload=b"fine", sport=40001),
            c(5, payload=b"boom", sport=40001),
            c(9, payload=b"after", sport=40001),
        ]
        good = handshake(sport=40002) + [c(1, payload=b"ok", sport=40002)]
        path = tmp_path / "t.pcap"
        write_pcap(path, bad + good)
        out = decode_files([str(path)], Settings.load(overrides={"ports": {"boom": [PORT]}}))
    finally:
        base._registry.pop("boom", None)
    by_port = {r["client_port"]: r for r in out["streams"]}
    assert by_port[40001]["frames_ok"] == 1 and by_port[40001]["frames_failed"] == 1
    assert by_port[40002]["frames_ok"] == 1 and by_port[40002]["frames_failed"] == 0
    errors = [r for r in out["commands"] if r["decode_status"] == "decoder_error"]
    assert len(errors) == 1 and "RuntimeError: decoder bug" in errors[0]["decode_error"]
    assert errors[0]["client_port"] == 40001
