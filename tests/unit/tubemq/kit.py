"""Builders of TubeMQ frames for the unit tests (independent of the decoder's own code)."""

from __future__ import annotations

import struct

from google.protobuf.internal.encoder import _VarintBytes

from brokerscope import tables
from brokerscope.protocols.base import ConnInfo, Context
from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as rpc
from tests.support.drive import Drive

TOKEN = 0xFF7FF4FE
CONN = ConnInfo("c1", "10.0.0.1", 40000, "10.0.0.2", 8123)


def delimited(msg) -> bytes:
    b = msg.SerializeToString()
    return _VarintBytes(len(b)) + b


def frame(serial: int, body: bytes, block: int = 8192) -> bytes:
    """token | serial | list size | [len | data]... with `body` cut into blocks of `block` bytes."""
    blocks = [body[i : i + block] for i in range(0, len(body), block)] or [b""]
    out = struct.pack(">III", TOKEN, serial, len(blocks))
    for b in blocks:
        out += struct.pack(">I", len(b)) + b
    return out


def request(serial: int, service: int, method: int, msg, timeout: int = 10000, version: int = 2) -> bytes:
    body = (
        delimited(rpc.RpcConnHeader(flag=0))
        + delimited(rpc.RequestHeader(serviceType=service, protocolVer=version))
        + delimited(rpc.RequestBody(method=method, timeout=timeout, request=msg.SerializeToString()))
    )
    return frame(serial, body)


def response(serial: int, method: int, msg, version: int = 2) -> bytes:
    body = (
        delimited(rpc.RpcConnHeader(flag=1))
        + delimited(rpc.ResponseHeader(status=0, protocolVer=version))
        + delimited(rpc.RspResponseBody(method=method, data=msg.SerializeToString()))
    )
    return frame(serial, body)


def exception(serial: int, name: str, trace: str, status: int = 1) -> bytes:
    body = (
        delimited(rpc.RpcConnHeader(flag=1))
        + delimited(rpc.ResponseHeader(status=status))
        + delimited(rpc.RspExceptionBody(exceptionName=name, stackTrace=trace))
    )
    return frame(serial, body)


def run(conv, chunks, ts0: int = 1_700_000_000_000_000_000, step: int = 1000, close: bool = True):
    """Feed (direction, bytes) chunks `step` ns apart (("gap", (direction, nbytes)): a capture
    gap); rows grouped by table, checked against the table schemas (tests.support.drive)."""
    d = Drive(conv)
    for i, (direction, data) in enumerate(chunks):
        if direction == "gap":
            d.gap(*data, ts=ts0 + i * step)
        else:
            d.feed(direction, data, ts=ts0 + i * step)
    if close:
        d.close()
    return d.tables(fill=False)


def new_conv(**ctx):
    from brokerscope.protocols.tubemq import PROTOCOL

    return PROTOCOL.conversation(CONN, Context(**ctx))


def flat(rows) -> list[tuple[str, dict]]:
    """(table, row) pairs a conversation returned, its blocks (the rows it gathers across frames:
    rows.Gathered) as dict rows."""
    return [(t, x) for t, r in rows for x in (r.rows() if isinstance(r, tables.Block) else [r])]
