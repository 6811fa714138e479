"""The compiled sendMessageP2B path (_rpc.exchanges) against the Python one: the same rows, in the
same order, for every frame of the real TubeMQ captures, fed as captured, in other chunkings, cut
at every packet and damaged; and for the odd cases it leaves to Python (an error response, a
serial pending twice, the pending bound, an unknown service, a failing helper)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from brokerscope.protocols.base import C2S, S2C, ConnInfo, Context, PayloadPolicy
from brokerscope.protocols.tubemq import conversation as conv_mod
from brokerscope.protocols.tubemq import rows as rows_mod
from brokerscope.protocols.tubemq.conversation import TubeMQConversation
from brokerscope.protocols.tubemq.framing import _rpc
from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
from tests.fuzz.seeds import connections
from tests.support.damage import damage

from .kit import CONN, exception, flat, request, response

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = [
    ROOT / "sample_data/tubemq/tubemq_default_ports.pcap",
    ROOT / "sample_data/tubemq/tubemq_other_ports.pcap",
    ROOT / "tests/data/tls/tubemq_tls12_clear.pcap",
]


def _chunks(path: Path) -> list[tuple[ConnInfo, list[tuple[str, bytes, int]]]]:
    """Each TubeMQ connection of a capture as the driver feeds it: (direction, data, ts) chunks
    from the project's TCP reassembly."""
    from brokerscope.tcp import TcpConnection

    out = []
    for lo, hi, pkts in connections(path):
        tcp = TcpConnection(pkts[0])
        events = [ev for p in pkts for ev in tcp.add(p)] + tcp.finish()
        cil = tcp.client_is_lo if tcp.client_is_lo is not None else lo[1] > hi[1]
        client, server = (lo, hi) if cil else (hi, lo)
        info = ConnInfo("x", client[0], client[1], server[0], server[1], tcp.midstream)
        feed = [(C2S if ev[1] == cil else S2C, ev[2], ev[3]) for ev in events if ev[0] == "data" and ev[2]]
        if feed:
            out.append((info, feed))
    return out


CONNS = [(p.name, i, info, feed) for p in CAPTURES for i, (info, feed) in enumerate(_chunks(p))]


def _normal(rows) -> dict[str, list[dict]]:
    """A conversation's rows per table, in order, dict rows and blocks alike (None values left out)."""
    out: dict[str, list[dict]] = {}
    for t, r in flat(rows):
        out.setdefault(t, []).append({k: v for k, v in r.items() if v is not None})
    return out


def _run(info: ConnInfo, feed, compiled: bool, frames=None, **ctx) -> tuple[dict, int]:
    """The rows of one conversation fed `feed`, and how many frames the Python path read;
    `frames`: ConnInfo.frames, or a (c2s, s2c) pair of streams._Frames (the compiled path reads
    them as its frame_index, the Python path asks their span)."""
    if isinstance(frames, tuple):
        index = frames
        frames = lambda d, off, n: index[d != C2S].span(off, off + n - 1 if n else off)  # noqa: E731
        info = ConnInfo(info.conn_id, info.client_ip, info.client_port, info.server_ip, info.server_port,
                        info.midstream, frames, index if compiled else None)  # fmt: skip
    elif frames is not None:
        info = ConnInfo(info.conn_id, info.client_ip, info.client_port, info.server_ip, info.server_port,
                        info.midstream, frames)  # fmt: skip
    conv = TubeMQConversation(info, Context(**ctx), compiled=compiled)
    read = {"n": 0}
    python_read = conv._read

    def counted(*args, **kw):
        read["n"] += kw.get("hold", True)  # a held response is read once, when released
        return python_read(*args, **kw)

    conv._read = counted
    rows = []
    for item in feed:
        if item[0] == "gap":
            rows += conv.gap(item[1], item[2], item[3])
        else:
            rows += conv.feed(*item)
    rows += conv.close()
    return _normal(rows), read["n"]


def _both(info, feed, frames=None, **ctx) -> tuple[int, int]:
    """Rows equal both ways; the frames the Python path read with and without exchanges."""
    fast, n_fast = _run(info, feed, True, frames, **ctx)
    slow, n_slow = _run(info, feed, False, frames, **ctx)
    assert fast == slow
    return n_fast, n_slow


def _numbers(direction: str, offset: int, size: int) -> tuple[int, int]:
    """Frame numbers as a pure function of the bytes (the driver's lookup stands in)."""
    return offset // 100 + (direction == S2C), (offset + size) // 100 + 7


def _indexed(feed, rng: random.Random, prune: bool = False) -> tuple:
    """(c2s, s2c) streams._Frames as the driver fills them for `feed` (a packet per chunk, some
    chunks sharing a packet's number, some numbered 0), pruned at a random offset if `prune`."""
    from brokerscope.streams import _Frames

    index, number = (_Frames(), _Frames()), 0
    for item in feed:
        if item[0] == "gap":
            index[item[1] != C2S].end += item[2]
            continue
        d, data, _ts = item
        fr = index[d != C2S]
        number += rng.random() < 0.8
        n = 0 if rng.random() < 0.05 else number
        if n != fr.last:
            fr.starts.append(fr.end)
            fr.frames.append(n)
            fr.last = n
        fr.end += len(data)
    if prune:
        for fr in index:
            fr.prune(rng.randrange(fr.end + 1))
    return index


@pytest.mark.parametrize(("name", "i", "info", "feed"), CONNS, ids=[f"{c[0]}-{c[1]}" for c in CONNS])
def test_captured_connections_give_the_same_rows(name, i, info, feed):
    n_fast, n_slow = _both(info, feed, _numbers)
    assert n_fast <= n_slow
    _both(info, feed, _indexed(feed, random.Random(i)))


@pytest.mark.parametrize("seed", range(200))
def test_frame_span_reads_the_index_as_span_does(seed):
    rng = random.Random(seed)
    feed = [(rng.choice((C2S, S2C)), b"x" * rng.randrange(1, 300), 0) for _ in range(rng.randrange(0, 40))]
    for fr in _indexed(feed, rng, prune=rng.random() < 0.5):
        for _ in range(30):
            off = rng.randrange(-5, fr.end + 50)
            size = rng.choice((0, 1, rng.randrange(1, 500)))
            want = fr.span(off, off + size - 1 if size else off)
            assert _rpc.frame_span(fr, off, size) == want


def test_the_captures_hold_exchanges_it_takes():
    """Not a vacuous comparison: the compiled path takes most frames of the producer connections."""
    taken = 0
    for _name, _i, info, feed in CONNS:
        n_fast, n_slow = _both(info, feed)
        taken += n_slow - n_fast
    assert taken >= 10


def _regrouped(feed, rng: random.Random):
    """The same bytes per direction in other chunks: consecutive chunks of a direction joined (many
    frames in one chunk) or split at random points (frames across chunks)."""
    out = []
    for d, data, ts in feed:
        if out and out[-1][0] == d and rng.random() < 0.5:
            out[-1] = (d, out[-1][1] + data, out[-1][2])
            continue
        while len(data) > 1 and rng.random() < 0.3:
            cut = rng.randrange(1, len(data))
            out.append((d, data[:cut], ts))
            data, ts = data[cut:], ts + 1
        out.append((d, data, ts))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_other_chunkings_give_the_same_rows(seed):
    rng = random.Random(seed)
    for _name, _i, info, feed in CONNS:
        regrouped = _regrouped(feed, rng)
        _both(info, regrouped, _numbers)
        _both(info, regrouped, _indexed(regrouped, rng))


@pytest.mark.parametrize("seed", range(30))
def test_cut_and_damaged_connections_give_the_same_rows(seed):
    """A capture starting at chunk k, a chunk lost (a gap), damaged chunks."""
    rng = random.Random(seed)
    for _name, _i, info, feed in CONNS:
        k = rng.randrange(len(feed))
        variant = list(feed[k:]) if rng.random() < 0.3 else list(feed)
        if variant and rng.random() < 0.5:
            j = rng.randrange(len(variant))
            d, data, ts = variant[j]
            variant[j] = ("gap", d, len(data), ts)
        for j in range(len(variant)):
            if variant[j][0] != "gap" and rng.random() < 0.1:
                d, data, ts = variant[j]
                variant[j] = (d, damage(rng, data) or data, ts)
        mid = ConnInfo("x", info.client_ip, info.client_port, info.server_ip, info.server_port, True)
        _both(mid, variant, _numbers)
        _both(mid, variant, _indexed(variant, rng, prune=rng.random() < 0.3))


def _send(serial: int, **kw) -> bytes:
    fields = {"clientId": "p", "topicName": "t", "partitionId": 1, "data": b"\x00\x00\x00\x03a=1xyz", "flag": 1,
              "checkSum": -1, "sentAddr": 1, "msgTime": "202401020304"}  # fmt: skip
    fields.update(kw)
    return request(serial, 3, 13, brk.SendMessageRequestP2B(**fields))


def _ok(serial: int, **kw) -> bytes:
    fields = {"success": True, "errCode": 200, "errMsg": "OK", "messageId": serial, "appendOffset": serial * 20,
              "appendTime": 1_700_000_000_123}  # fmt: skip
    fields.update(kw)
    return response(serial, 13, brk.SendMessageResponseB2P(**fields))


ODD = {
    "plain": [(C2S, _send(1)), (S2C, _ok(1))],
    "error response": [(C2S, _send(1)), (S2C, exception(1, "E", "at x"))],
    "failed send": [(C2S, _send(1)), (S2C, _ok(1, success=False, errCode=500, errMsg='no\n"way"'))],
    "no success field": [(C2S, _send(1)), (S2C, _ok(1, success=None, errCode=404, errMsg=""))],
    "same serial twice": [(C2S, _send(1) + _send(1)), (S2C, _ok(1) + _ok(1))],
    "response first": [(S2C, _ok(1)), (C2S, _send(1))],
    "unknown service": [(C2S, request(1, 9, 13, brk.SendMessageRequestP2B(clientId="p", topicName="t")))],
    "wrong service": [(C2S, request(1, 1, 13, brk.SendMessageRequestP2B(clientId="p", topicName="t")))],
    "no client id": [(C2S, _send(1, clientId="")), (S2C, _ok(1))],
    "no msgTime": [
        (C2S, _send(1, msgTime="", data=b"\x00\x00\x00\x13$msgTime$=2024010203xyz")),
        (S2C, _ok(1)),
    ],
    "bad attributes": [(C2S, _send(1, data=b"\x00\x00\x00\x99ab")), (S2C, _ok(1))],
    "checksum": [(C2S, _send(1, checkSum=123)), (S2C, _ok(1))],
    "escapes": [(C2S, _send(1, topicName='t"\\\x01é', clientId="\u2028")), (S2C, _ok(1))],
    "response of another method": [(C2S, _send(1)), (S2C, response(1, 17, brk.GetMessageResponseB2C()))],
    "many in one chunk": [
        (C2S, b"".join(_send(i) for i in range(1, 30))),
        (S2C, b"".join(_ok(i) for i in range(29, 0, -1))),
    ],  # fmt: skip
    "request from the server": [(S2C, _send(1)), (C2S, _ok(1))],
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_exchanges_give_the_same_rows(case):
    feed = [(d, data, 1_000 + 10 * i) for i, (d, data) in enumerate(ODD[case])]
    _both(CONN, feed, _numbers)
    _both(CONN, feed)


def test_the_pending_bound_is_kept(monkeypatch):
    monkeypatch.setattr(conv_mod, "MAX_PENDING", 5)
    feed = [(C2S, _send(i), i) for i in range(1, 12)] + [(S2C, _ok(i), 100 + i) for i in range(1, 12)]
    _both(CONN, feed)


def test_other_payload_policies_take_the_python_path():
    for mode in ("truncate", "hash", "drop"):
        conv = TubeMQConversation(CONN, Context(payload=PayloadPolicy(mode, 2)), compiled=True)
        assert conv.fast is None
        _both(CONN, [(C2S, _send(1), 1), (S2C, _ok(1), 2)], payload=PayloadPolicy(mode, 2))
    assert TubeMQConversation(CONN, Context(), compiled=True).fast is not None


@pytest.mark.parametrize("fails", ["the compiled call", "every call"])
def test_a_failing_helper_leaves_the_frame_to_the_python_path(monkeypatch, fails):
    """An error inside the compiled path (here the msgTime helper it calls) is not raised: the
    Python path reads that frame again, and gives it its rows (its internal error row when the
    helper fails there too); the frames after it go on."""
    real = rows_mod.produced_time
    calls = {"n": 0}

    def flaky(when, headers):
        calls["n"] += 1
        if fails == "every call" or calls["n"] == 1:
            raise RuntimeError("boom")
        return real(when, headers)

    monkeypatch.setattr(rows_mod, "produced_time", flaky)
    when = f"2099010101{len(fails):02d}"  # not yet remembered: the helper is called
    feed = [
        (C2S, _send(1, msgTime=when), 1),
        (C2S, _send(2, msgTime=when), 2),
        (S2C, _ok(2), 3),
        (S2C, _ok(1), 4),
    ]
    fast, n_fast = _run(CONN, feed, True)
    # the compiled call, then Python's, for the first frame (and for the second when it fails
    # too: nothing remembered its msgTime)
    assert (calls["n"], n_fast) == ((2, 1) if fails == "the compiled call" else (4, 2))
    calls["n"] = 1  # the Python path alone: its one call as it was in the compiled run
    slow, _ = _run(CONN, feed, False)
    assert fast == slow
    errors = [r.get("decode_error") for r in fast["commands"] if r["decode_status"] != "ok"]
    assert errors == ([] if fails == "the compiled call" else ["internal error: RuntimeError('boom')"] * 2)
    assert len(fast["latencies"]) == 2


# -- the gathered rows as Arrow columns (rows.columns, _rpc.transpose) ---------------------------

ODD_VALUES = {
    "i": [0, -1, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, True, 1.5, "7", None],
    "n": [0, -1, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 2**63, True, 1.5, None],
    "f": [0.0, -1.25, 1e300, float("inf"), 3, None],
    "s": ["", "x", "é\u2028\x00", "\ud800", b"bytes", 5, None],
    "b": [b"", b"\x00\xff", bytearray(b"ba"), "str", None],
    "?": [True, False, 1, 0, None],
    "h": [
        [],
        [{"key": "k", "value": b"v"}, {"key": "", "value": b""}],
        [{"key": "k"}],
        [{"value": b"v", "key": "k"}],
        [{"key": "k", "value": "str"}],
        [{"key": "\ud800", "value": b""}],
        [{"key": "k", "value": b"v", "x": 1}],
        None,
        ["x"],
    ],  # fmt: skip
    "o": [[], ["a"], [{"key": "k", "value": b"v"}], None],
}


def _as_lists(table: str, rows: list[tuple]) -> rows_mod.Block:
    return rows_mod.Block(len(rows), dict(zip(rows_mod.COLUMNS[table], map(list, zip(*rows)))))


@pytest.mark.parametrize("table", sorted(rows_mod.COLUMNS))
@pytest.mark.parametrize("seed", range(40))
def test_gathered_columns_conform_as_their_values_do(table, seed):
    """Arrow columns from _rpc.transpose give the rows (values, nulls and anomalies) the same
    values as lists give; a column holding a value its kind does not take is handed over as the
    list."""
    from brokerscope import tables

    rng = random.Random(seed)
    kinds = rows_mod.kinds(table, rows_mod.COLUMNS[table]).decode()
    odd = rng.random() < 0.5  # else only values of each column's kind
    plain = {
        "i": [0, 7, 2**40, -3],
        "n": [0, 9, -(2**31)],
        "f": [0.5, 2.0],
        "s": ["a", "bé"],
        "b": [b"", b"x"],
        "?": [True, False],
    }
    plain["o"] = ODD_VALUES["o"]
    plain["h"] = [[], [{"key": "k", "value": b"v"}], [{"key": "é", "value": b"\x00"}] * 3]
    rows = [
        tuple(
            rng.choice(
                ODD_VALUES[k] if odd and rng.random() < 0.2 else [*plain[k], *((None,) if k != "h" else ())]
            )
            for k in kinds
        )
        for _ in range(rng.randrange(1, 30))
    ]
    cols = rows_mod.columns(table, rows)
    for k, col, values in zip(kinds, cols, zip(*rows)):
        if isinstance(col, list):
            assert col == list(values)
        else:
            assert k != "o" and col.to_pylist() == [
                v if v.__class__ is not bytearray else bytes(v) for v in values
            ]
    got = tables.conform(table, [rows_mod.Block(len(rows), dict(zip(rows_mod.COLUMNS[table], cols)))])
    want = tables.conform(table, [_as_lists(table, rows)])
    assert got.to_pylist() == want.to_pylist()
    if not odd:
        assert all(not isinstance(c, list) for k, c in zip(kinds, cols) if k != "o")
