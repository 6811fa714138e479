"""Helpers for the Kafka tests: frames and record sets built with kafka-python's own encoders
(an independent implementation), and a driver that feeds a conversation."""

from __future__ import annotations

import gzip
import struct
import warnings
from dataclasses import astuple

from brokerscope.protocols import base
from brokerscope.protocols.kafka import KafkaConversation, schema
from tests.support.drive import Drive

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import FetchRequest, FetchResponse  # noqa: F401
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse  # noqa: F401
    from kafka.protocol.producer import ProduceRequest, ProduceResponse  # noqa: F401
    from kafka.record.memory_records import MemoryRecordsBuilder

CONN = base.ConnInfo("c1", "10.0.0.1", 50000, "10.0.0.2", 9092)


def records(msgs, magic: int = 2, codec: int = 0, offset: int = 0, **kw) -> bytes:
    """A record set: msgs = [(key, value, headers)], built by kafka-python."""
    b = MemoryRecordsBuilder(magic, codec, 1 << 20, offset=offset, **kw)
    for i, (k, v, h) in enumerate(msgs):
        b.append(1_700_000_000_000 + i, k, v, h if magic >= 2 else None)
    b.close()
    return bytes(b.records().buffer() if hasattr(b.records(), "buffer") else b._buffer)


def frame(msg, corr: int, client_id: str | None = "kit") -> bytes:
    """Size-prefixed request or response, with its header."""
    if msg.is_request():
        msg.with_header(correlation_id=corr, client_id=client_id)
    else:
        msg.with_header(correlation_id=corr)
    return bytes(msg.encode(header=True, framed=True))


def produce_request(
    version: int, topic: str, partition: int, recs: bytes, acks: int = 1, corr: int = 1
) -> bytes:
    P = ProduceRequest
    req = P(
        version=version,
        transactional_id=None,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                version=version,
                name=topic,
                partition_data=[
                    P.TopicProduceData.PartitionProduceData(version=version, index=partition, records=recs)
                ],
            )
        ],
    )
    return frame(req, corr)


def produce_response(
    version: int, topic: str, partition: int, base_offset: int, error: int = 0, corr: int = 1
) -> bytes:
    R = ProduceResponse
    resp = R(
        version=version,
        responses=[
            R.TopicProduceResponse(
                version=version,
                name=topic,
                partition_responses=[
                    R.TopicProduceResponse.PartitionProduceResponse(
                        version=version, index=partition, error_code=error, base_offset=base_offset
                    )
                ],
            )
        ],
        throttle_time_ms=0,
    )
    return frame(resp, corr)


def fetch_request(
    version: int, topic: str, partition: int, offset: int, corr: int, topic_id=None, isolation=0
) -> bytes:
    F = FetchRequest
    t = {"topic": topic} if version < 13 else {"topic_id": topic_id}
    req = F(
        version=version,
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation,
        topics=[
            F.FetchTopic(
                version=version,
                partitions=[
                    F.FetchTopic.FetchPartition(
                        version=version, partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
                **t,
            )
        ],
    )
    return frame(req, corr)


def fetch_response(version: int, topic: str, partition: int, recs: bytes, corr: int, topic_id=None) -> bytes:
    F = FetchResponse
    t = {"topic": topic} if version < 13 else {"topic_id": topic_id}
    resp = F(
        version=version,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            F.FetchableTopicResponse(
                version=version,
                partitions=[
                    F.FetchableTopicResponse.PartitionData(
                        version=version,
                        partition_index=partition,
                        error_code=0,
                        high_watermark=100,
                        records=recs,
                    )
                ],
                **t,
            )
        ],
    )
    return frame(resp, corr)


class Driver(Drive):
    """Feeds byte chunks to one Kafka conversation (tests.support.drive); `close()` returns the
    rows per table, checked against the schemas."""

    def __init__(self, ctx: base.Context | None = None, midstream: bool = False):
        conn = base.ConnInfo(*astuple(CONN)[:5], midstream=midstream)
        super().__init__(KafkaConversation(conn, ctx or base.Context()))

    def send(self, direction: str, data: bytes, chunk: int | None = None) -> Driver:
        return self.feed(direction, data, chunk)

    def close(self) -> dict[str, list[dict]]:
        super().close()
        return self.tables()


def gzip_bomb(size: int) -> bytes:
    return gzip.compress(b"\0" * size, 9)


def v2_batch_header_crc_offset() -> int:
    return 17


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


# -- message bodies of real captures ------------------------------------------------------------
SIZE = struct.Struct(">i")
MAX_BODY_FRAME = 64 << 20  # a size past it ends a direction's frames (not Kafka, or damage)


def _frames(chunks) -> list[bytes]:
    """The whole size-prefixed frames (without their size) of a direction's data events, up to
    its first gap or implausible size."""
    buf = bytearray()
    out = []
    for kind, data in chunks:
        if kind != "data":
            break
        buf += data
        while len(buf) >= 4:
            size = SIZE.unpack_from(buf)[0]
            if not 0 <= size <= MAX_BODY_FRAME:
                return out
            if len(buf) < 4 + size:
                break
            out.append(bytes(buf[4 : 4 + size]))
            del buf[: 4 + size]
    return out


def _requests(frames: list[bytes]) -> list[tuple]:
    """(plan, frame, body offset, (api key, version), correlation id) of frames read as requests,
    each whose header reads and whose api and version have a plan."""
    out = []
    for f in frames:
        try:
            h = schema.read_request_header(f)
        except base.DecodeError:
            continue
        p = schema.plan(h.api_key, h.api_version, "request")
        if p is not None:
            out.append((p, f, h.body_offset, (h.api_key, h.api_version), h.correlation_id))
    return out


def capture_bodies(path) -> list[tuple[schema.Plan, bytes, int]]:
    """(plan, frame, body offset) of every request and response of the Kafka connections of a
    capture, read with the project's capture reader and TCP reassembly (tests.fuzz.seeds), framed
    by size, responses paired with their requests by correlation id. A direction whose frames
    read as requests is the client's; frames after a gap are left out."""
    from pathlib import Path

    from brokerscope.tcp import TcpConnection
    from tests.fuzz.seeds import connections

    out: list[tuple[schema.Plan, bytes, int]] = []
    for _lo, _hi, pkts in connections(Path(path)):
        tcp = TcpConnection(pkts[0])
        events = [ev for p in pkts for ev in tcp.add(p)] + tcp.finish()
        sides = {side: _frames((k, v) for k, fl, v, *_ in events if fl == side) for side in (True, False)}
        reqs = {side: _requests(fr) for side, fr in sides.items()}
        client = max(reqs, key=lambda s: len(reqs[s]) - len(sides[s]))
        asked = {corr: kv for *_, kv, corr in reqs[client]}
        out.extend((p, f, pos) for p, f, pos, *_ in reqs[client])
        for f in sides[not client]:
            kv = asked.get(SIZE.unpack_from(f)[0]) if len(f) >= 4 else None
            p = kv and schema.plan(kv[0], kv[1], "response")
            if p:
                try:
                    pos = schema.read_response_header(f, kv[0], kv[1])[2]
                except base.DecodeError:
                    continue
                out.append((p, f, pos))
    return out
