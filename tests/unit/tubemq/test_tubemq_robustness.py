"""Bad input never raises, every byte is accounted for, memory stays bounded."""

from __future__ import annotations

import json
import random

from brokerscope import tables
from brokerscope.protocols.base import C2S, S2C
from brokerscope.protocols.tubemq import rpc as rpc_mod
from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk

from .kit import flat, new_conv, request, response, run


def _stream(n: int = 40) -> tuple[bytes, bytes]:
    reqs, rsps = [], []
    for i in range(1, n + 1):
        size = (i * 997) % 20000
        data = bytes([i % 251]) * size
        reqs.append(
            request(
                i,
                3,
                13,
                brk.SendMessageRequestP2B(
                    clientId="p", topicName="t", partitionId=i % 3, data=data, flag=0, checkSum=-1, sentAddr=1
                ),
            )
        )
        rsps.append(
            response(
                i,
                13,
                brk.SendMessageResponseB2P(
                    success=True, errCode=200, errMsg="OK", messageId=i, appendOffset=i * 20
                ),
            )
        )
    return b"".join(reqs), b"".join(rsps)


def _chunks(data: bytes, rnd: random.Random, direction: str) -> list[tuple[str, bytes]]:
    out, i = [], 0
    while i < len(data):
        k = rnd.choice((1, 7, 100, 1460, 9000, 65536))
        out.append((direction, data[i : i + k]))
        i += k
    return out


def test_long_stream_in_small_segments_keeps_every_frame():
    c2s, s2c = _stream(60)
    assert len(c2s) > 400_000  # far past the point where the stream buffer compacts
    rnd = random.Random(1)
    out = run(new_conv(), _chunks(c2s, rnd, C2S) + _chunks(s2c, rnd, S2C))
    assert {r["decode_status"] for r in out["commands"]} == {"ok"}
    assert len(out["messages"]) == 60 and len(out["latencies"]) == 60
    assert all(r["response_ts_ns"] is not None for r in out["latencies"])
    assert sum(r["size"] for r in out["commands"] if r["direction"] == C2S) == len(c2s)


def test_fuzzed_streams_never_raise_and_account_for_every_byte():
    c2s, s2c = _stream(12)
    rnd = random.Random(20240101)
    for case in range(150):
        data = bytearray(c2s)
        for _ in range(rnd.randint(1, 6)):
            op = rnd.random()
            pos = rnd.randrange(len(data))
            if op < 0.4:
                data[pos] = rnd.randrange(256)  # flip a byte
            elif op < 0.6:
                del data[pos : pos + rnd.randint(1, 50)]  # lose bytes
            elif op < 0.8:
                data[pos:pos] = rnd.randbytes(rnd.randint(1, 40))  # insert garbage
            else:
                data[pos:pos] = b"\xff\x7f\xf4\xfe" + rnd.randbytes(8)  # a fake token
        if rnd.random() < 0.3:
            data = data[: rnd.randrange(len(data))]  # truncated tail
        conv = new_conv()
        out = run(conv, _chunks(bytes(data), rnd, C2S) + _chunks(s2c, rnd, S2C))
        for t, rows in out.items():
            tables.conform(t, rows)
        got = sum(r["size"] for r in out["commands"] if r["direction"] == C2S)
        assert got == len(data), case
        assert len(conv.pending) == 0  # close() flushed every unanswered request


def test_random_bytes_are_malformed_rows():
    rnd = random.Random(7)
    blob = rnd.randbytes(50_000).replace(b"\xff\x7f\xf4\xfe", b"")
    out = run(new_conv(), _chunks(blob, rnd, C2S))
    (row,) = out["commands"]
    assert row["decode_status"] == "malformed" and row["size"] == len(blob)
    assert row.get("raw") is None  # garbage has no type: its bytes are not kept


def test_internal_error_becomes_a_row_and_decoding_continues(monkeypatch):
    """In the Python path (the compiled _rpc.exchanges takes these frames otherwise: the test of
    its errors is in test_tubemq_exchanges.py)."""
    from brokerscope.protocols.tubemq.conversation import TubeMQConversation

    monkeypatch.setattr(TubeMQConversation, "compiled", False)
    c2s, _ = _stream(3)
    calls = {"n": 0}
    real = rpc_mod.envelope_of  # what each frame's compiled read goes through

    def flaky(data):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(data)

    monkeypatch.setattr(rpc_mod, "envelope_of", flaky)
    out = run(new_conv(), [(C2S, c2s)])
    st = [(r["decode_status"], r.get("decode_error")) for r in out["commands"]]
    assert st[0][0] == "ok" and st[2][0] == "ok"
    assert st[1] == ("malformed", "internal error: RuntimeError('boom')")


def test_pending_requests_are_bounded(monkeypatch):
    from brokerscope.protocols.tubemq import conversation
    from brokerscope.protocols.tubemq import rows as rows_module

    monkeypatch.setattr(conversation, "MAX_PENDING", 5)
    monkeypatch.setattr(rows_module, "BLOCK_ROWS", 1)  # gathered rows handed over after each feed
    c2s, _ = _stream(12)
    conv = new_conv()
    rows = flat(conv.feed(C2S, c2s, 1))
    assert len(conv.pending) == 5
    lats = [r for t, r in rows if t == "latencies"]
    assert len(lats) == 7 and all(r.get("response_ts_ns") is None for r in lats)


def test_gathered_rows_hand_over_after_block_rows_counting_those_put_ended(monkeypatch):
    """Gathered: a table's rows stay in order across blocks; a row given whole (`put`) ends its
    table's stretch first, and those rows count toward BLOCK_ROWS; the per-table appends still
    gather after a hand-over."""
    from brokerscope.protocols.tubemq import rows as rows_module

    monkeypatch.setattr(rows_module, "BLOCK_ROWS", 4)
    g = rows_module.Gathered()
    g.acks((1,) * len(rows_module.ACKS))
    g.acks((2,) * len(rows_module.ACKS))
    g.put("messages", {"ts_ns": 0})
    g.put("acks", {"ts_ns": 3})  # ends the acks' stretch: a block of 2, ahead of this row
    assert [(t, r.n if isinstance(r, tables.Block) else r) for t, r in g.take()] == [
        ("messages", {"ts_ns": 0}),
        ("acks", 2),
        ("acks", {"ts_ns": 3}),
    ]
    g.commands((5,) * len(rows_module.COMMANDS))
    assert g.take() == []  # 3 gathered since the last hand-over of everything: held
    g.add("latencies", (6,) * len(rows_module.LATENCIES))
    got = g.take()  # 4: everything handed over
    assert [(t, r.n, r.column("ts_ns")) for t, r in got] == [("commands", 1, [5]), ("latencies", 1, [6])]
    g.commands((7,) * len(rows_module.COMMANDS))
    assert [(t, r.column("ts_ns")) for t, r in g.take(everything=True)] == [("commands", [7])]


class _Raw:
    """A message given as its wire bytes (for bytes python's protobuf would not write)."""

    def __init__(self, data: bytes):
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802 - protobuf's name
        return self.data


def test_a_string_field_that_is_not_utf8_is_kept_visible_not_an_internal_error():
    """A master's register reply whose brokerInfos entry is not UTF-8 (python's protobuf returns
    such a proto2 string as bytes): the broker list is parsed with the bad bytes escaped, and the
    row decodes; before, this was a caught TypeError (found by fuzzing)."""
    from brokerscope.protocols.tubemq.gen import tubemq_master_pb2 as mst

    good = mst.RegisterResponseM2P(success=True, errCode=200, errMsg="OK").SerializeToString()
    info = b"1:127.0.0.\xff:8123"
    body = good + b"\x2a" + bytes([len(info)]) + info  # field 5 (brokerInfos), length-delimited
    req = mst.RegisterRequestP2M(clientId="p1", hostName="h", brokerCheckSum=0)
    out = run(new_conv(), [(C2S, request(7, 1, 1, req)), (S2C, response(7, 1, _Raw(body)))])
    reply = [r for r in out["commands"] if r["direction"] == S2C]
    assert [(r["command"], r["decode_status"]) for r in reply] == [("producerRegisterP2M", "ok")]
    brokers = json.loads(reply[0]["details"])["brokers"]
    assert brokers == [
        {"info": "1:127.0.0.\\xff:8123", "broker_id": 1, "host": "127.0.0.\\xff", "port": 8123}
    ]


def test_an_exception_and_a_topic_whose_strings_are_not_utf8_are_text():
    """Every proto2 string TubeMQ sends reaches a column as text: an exception response whose name
    and stack trace are not UTF-8 (found by fuzzing: decode_error was bytes), and a commit request
    whose topic and group names are not (before, bytes in a string column: nulls and anomalies)."""
    from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as rpc

    from .kit import delimited, frame

    exc = b"\x0a\x05Ex\xfftn" + b"\x12\x06at \xfeX1"  # exceptionName, stackTrace (fields 1, 2)
    head = delimited(rpc.RpcConnHeader(flag=1)) + delimited(rpc.ResponseHeader(status=1))
    body = head + bytes([len(exc)]) + exc
    commit = brk.CommitOffsetRequestC2B(clientId="c1", topicName="t", partitionId=0, groupName="g")
    wire = (
        commit.SerializeToString()
        .replace(b"\x12\x01t", b"\x12\x02t\xff")
        .replace(b"\x22\x01g", b"\x22\x02\xfeg")
    )
    out = run(new_conv(), [(C2S, request(4, 3, 18, _Raw(wire))), (S2C, frame(4, body))])
    for t, rows in out.items():
        tables.conform(t, rows)  # no anomalies: every value fits its column
        assert all(r.get("anomalies") is None for r in rows), t
    req, rsp = out["commands"]
    assert (req["topic"], req["decode_status"]) == ("t\\xff", "ok")
    assert rsp["decode_error"] == "Ex\\xfftn: at \\xfeX1" and rsp["command"] == "consumerCommitC2B"
