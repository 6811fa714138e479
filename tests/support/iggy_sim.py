"""A small Iggy server simulator speaking the VSR framing of apache-iggy 0.9 clients.

Enough of the server for the real client (PyPI `apache-iggy` 0.9.0, Rust SDK 0.11) to log in,
ping, fetch cluster metadata, create a stream and a topic, send, poll and store offsets, every
step answered with the reply the real server builds. Wire facts, from apache/iggy sources:

- consensus headers (core/binary_protocol/src/consensus/header.rs, the client-wire version
  without `namespace`): 256 bytes; size u32 @48, command u8 @60 (5 request, 8 reply).
  Request: client u128 @128, request_checksum u128 @144, timestamp u64 @160, request u64 @168,
  operation u8 @176, session u64 @184, user_id u32 @192, reserved @196 (a non-replicated
  request's command code is its first u32). Reply: request_checksum u128 @128, context u128
  @144, client u128 @160, op u64 @176, commit u64 @184, timestamp u64 @192, request u64 @200,
  operation u8 @208, status u32 @216. The server's reply_header() echoes cluster, view,
  release, replica, request_checksum, timestamp, request and operation, and sets op = session.
- result section (consensus/reply_result.rs): replies to REGISTER, to every metadata operation
  (create stream/topic, ...) and to the consumer-offset writes lead with [count u32]; success
  is count 0 followed by the typed payload.
- payloads: LoginRegisterResponse (user id u32, session u64, protocol version u32, server
  version u8-len string); CREATE_STREAM answers the new stream as a GetStreamResponse,
  CREATE_TOPIC as a GetTopicResponse (responses/streams/get_stream.rs, topics/get_topic.rs;
  partitions are the 40-byte records apache-iggy 0.9 decodes); SEND_MESSAGES answers
  SendMessagesResponse (count u32, then stream_id u32, topic_id u32, partition_id u32,
  base_offset u64); POLL_MESSAGES answers [partition_id u32][current_offset u64][count u32]
  then the stored batch records as they are (server build_polled_messages_reply), each batch
  stamped with partition_id, base_offset, base_timestamp and a recomputed batch checksum
  (core/binary_protocol/src/batch.rs).
Left out: the real server would also answer a sliced poll (a batch cut at `count`) from its
indexes; here whole stored batches are served from the first one holding the start offset.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time

import xxhash

HEADER = 256
SESSION = 42
USER_ID = 1
PROTOCOL_VERSION = 1
SERVER_VERSION = b"0.0.0-sim"
BATCH = 256


def now_us() -> int:
    return time.time_ns() // 1000


def reply(req: bytes, body: bytes = b"", status: int = 0, commit: int = 0) -> bytes:
    """A Reply header answering `req` (echoing what the server's reply_header() echoes)."""
    h = bytearray(HEADER)
    h[32:48] = req[32:48]  # cluster
    struct.pack_into("<IIIBB", h, 48, HEADER + len(body), *struct.unpack_from("<II", req, 52), 8, req[61])
    h[128:144] = req[144:160]  # request_checksum
    h[160:176] = req[128:144]  # client
    session = struct.unpack_from("<Q", req, 184)[0]
    struct.pack_into("<QQQQ", h, 176, session, commit, *struct.unpack_from("<QQ", req, 160))
    h[208] = req[176]  # operation
    struct.pack_into("<I", h, 216, status)
    return bytes(h) + body


def ok_section(payload: bytes = b"") -> bytes:
    """A result section reporting success (count 0), then the payload."""
    return struct.pack("<I", 0) + payload


def rejection(code: int) -> bytes:
    """A result section with one rejected entry: [count 1][index 0][result code]."""
    return struct.pack("<III", 1, 0, code)


def register_body(version: bytes = SERVER_VERSION) -> bytes:
    return ok_section(struct.pack("<IQIB", USER_ID, SESSION, PROTOCOL_VERSION, len(version)) + version)


def metadata_body(port: int) -> bytes:
    """Cluster metadata: name (u32 len), node count u32, per node name (u32 len), ip (u32 len),
    tcp/quic/http/websocket ports u16, role u8, status u8 (leader, healthy)."""
    name, node, ip = b"sim", b"sim-node", b"127.0.0.1"
    out = struct.pack("<I", len(name)) + name + struct.pack("<I", 1)
    out += struct.pack("<I", len(node)) + node + struct.pack("<I", len(ip)) + ip
    out += struct.pack("<HHHH", port, 0, 0, 0) + b"\0\0"
    return out


def _options_block(raw: bytes) -> bytes:
    return struct.pack("<I", len(raw)) + raw


def stream_response(sid: int, name: bytes, created: int, topics: int, size: int, msgs: int) -> bytes:
    """StreamResponse: id u32, created_at u64, topics_count u32, size u64, messages_count u64,
    name (u8 len), options (u32-prefixed block)."""
    return struct.pack("<IQIQQB", sid, created, topics, size, msgs, len(name)) + name + _options_block(b"")


def topic_header(t: dict) -> bytes:
    """TopicHeader: id u32, created_at u64, partitions_count u32, message_expiry u64,
    compression u8, max_topic_size u64, size u64, messages_count u64, name (u8 len), explicit
    options and derived options (u32-prefixed blocks)."""
    out = struct.pack(
        "<IQIQBQQQB", t["id"], t["created"], t["partitions"], 0, 1, 0, 0, t["messages"], len(t["name"])
    )
    return out + t["name"] + _options_block(t["options"]) + _options_block(b"")


def partition_record(pid: int, created: int, current: int, msgs: int) -> bytes:
    """Partition: id u32, created_at u64, segments_count u32, current_offset u64, size u64,
    messages_count u64 (40 bytes, the record apache-iggy 0.9 decodes)."""
    return struct.pack("<IQIQQQ", pid, created, 1, current, 0, msgs)


def _ident(buf: bytes, pos: int) -> tuple[str, int]:
    kind, length = buf[pos], buf[pos + 1]
    raw = buf[pos + 2 : pos + 2 + length]
    val = str(struct.unpack("<I", raw)[0]) if kind == 1 else raw.decode()
    return val, pos + 2 + length


def stamp_batch(batch: bytes, partition_id: int, base_offset: int, base_ts: int) -> bytes:
    """What the server does at persistence: stamp partition_id, base_offset and base_timestamp
    into the 256-byte batch header and recompute the batch checksum (XXH3-64 over partition_id,
    base_offset, base_timestamp, origin_timestamp, batch_length, message_count, then every
    message's 8-byte checksum field)."""
    b = bytearray(batch)
    struct.pack_into("<QQQ", b, 0, partition_id, base_offset, base_ts)
    origin, length = struct.unpack_from("<QQ", b, 24)
    count = struct.unpack_from("<I", b, 48)[0]
    h = xxhash.xxh3_64()
    h.update(struct.pack("<QQQQQI", partition_id, base_offset, base_ts, origin, length, count))
    pos = BATCH
    while pos < len(b):
        h.update(bytes(b[pos : pos + 8]))
        hlen, plen = struct.unpack_from("<II", b, pos + 32)
        pos += 48 + hlen + plen
    struct.pack_into("<Q", b, 40, h.intdigest())
    return bytes(b)


class IggySim:
    """Run with `with IggySim() as sim: ... sim.port`; state is kept per (stream, topic)."""

    def __init__(self, port: int = 0, lose_reply_of_send: int | None = None):
        self.port = port
        # the n-th SEND_MESSAGES (from 1): stored, its reply lost with the connection
        self.lose_reply_of_send = lose_reply_of_send
        self.sends = 0
        self.streams: dict[str, dict] = {}  # name -> {id, created, topics: {name: topic}}
        self.batches: dict[tuple[str, str], list[bytes]] = {}  # stamped batch records
        self.offsets: dict[tuple, int] = {}
        self.requests: list[tuple[int, int]] = []  # (operation, code) seen
        self.commit = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    # ------------------------------------------------------------------ server plumbing

    def __enter__(self) -> IggySim:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("simulator did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(5)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                hdr = await r.readexactly(HEADER)
                size = struct.unpack_from("<I", hdr, 48)[0]
                body = await r.readexactly(size - HEADER) if size > HEADER else b""
                out = self.answer(hdr, body)
                if out is None:  # the reply is lost with the connection
                    break
                w.write(out)
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    # ------------------------------------------------------------------ behaviour

    def answer(self, hdr: bytes, body: bytes) -> bytes | None:
        op = hdr[176]
        code = struct.unpack_from("<I", hdr, 196)[0] if op == 2 else 0
        self.requests.append((op, code))
        if op != 2:
            self.commit += 1  # replicated operations commit
        if op == 1:  # register = login
            return reply(hdr, register_body(), commit=self.commit)
        if op == 2:
            if code == 12:
                return reply(hdr, metadata_body(self.port))
            if code == 100:
                return reply(hdr, self._poll(body))
            if code == 120:
                return reply(hdr, self._get_offset(body))
            if code == 200:  # GET_STREAM: the GetStreamResponse, no result section (a read)
                return reply(hdr, self._stream_details(_ident(body, 0)[0]))
            if code == 300:  # GET_TOPIC: the GetTopicResponse
                stream, pos = _ident(body, 0)
                return reply(hdr, self._topic_details(stream, _ident(body, pos)[0]))
            return reply(hdr)  # ping and the rest: ok, empty
        if op == 128:
            return reply(hdr, self._create_stream(body), commit=self.commit)
        if op == 132:
            return reply(hdr, self._create_topic(body), commit=self.commit)
        if op == 160:
            self.sends += 1
            out = reply(hdr, self._store_messages(body), commit=self.commit)
            return None if self.sends == self.lose_reply_of_send else out
        if op == 161:
            self._store_offset(body)
            return reply(hdr, ok_section(), commit=self.commit)
        return reply(hdr, ok_section(), commit=self.commit)

    def _find_stream(self, ident: str) -> tuple[str, dict] | None:
        for name, s in self.streams.items():
            if ident in (name, str(s["id"])):
                return name, s
        return None

    def _stream_details(self, ident: str) -> bytes:
        found = self._find_stream(ident)
        if found is None:
            return b""  # not found: an empty reply
        name, s = found
        topics = list(s["topics"].values())
        msgs = sum(self._count(name, t["name"].decode()) for t in topics)
        for t in topics:
            t["messages"] = self._count(name, t["name"].decode())
        out = stream_response(s["id"], name.encode(), s["created"], len(topics), 0, msgs)
        return out + b"".join(topic_header(t) for t in topics)

    def _topic_details(self, stream: str, topic: str) -> bytes:
        found = self._find_stream(stream)
        t = found and next((t for n, t in found[1]["topics"].items() if topic in (n, str(t["id"]))), None)
        if not t:
            return b""
        n = self._count(found[0], t["name"].decode())
        t["messages"] = n
        parts = b"".join(
            partition_record(i + 1, t["created"], max(n - 1, 0) if i == 0 else 0, n if i == 0 else 0)
            for i in range(t["partitions"])
        )
        return topic_header(t) + parts

    def _count(self, stream: str, topic: str) -> int:
        return sum(struct.unpack_from("<I", b, 48)[0] for b in self.batches.get((stream, topic), []))

    def _create_stream(self, body: bytes) -> bytes:
        name = body[1 : 1 + body[0]]
        if name.decode() in self.streams:
            return rejection(1012)  # stream name already exists
        s = {"id": len(self.streams) + 1, "created": now_us(), "topics": {}}
        self.streams[name.decode()] = s
        return ok_section(stream_response(s["id"], name, s["created"], 0, 0, 0))

    def _create_topic(self, body: bytes) -> bytes:
        stream, pos = _ident(body, 0)
        partitions = struct.unpack_from("<I", body, pos)[0]
        pos += 4
        name = body[pos + 1 : pos + 1 + body[pos]]
        options = body[pos + 1 + body[pos] :]  # the client's pinned options, to the end
        s = self.streams.get(stream) or next(
            (v for v in self.streams.values() if str(v["id"]) == stream), None
        )
        if s is None:
            return rejection(1009)  # stream not found
        t = {
            "id": len(s["topics"]) + 1,
            "created": now_us(),
            "partitions": partitions,
            "messages": 0,
            "name": name,
            "options": options,
        }
        s["topics"][name.decode()] = t
        parts = b"".join(partition_record(i + 1, t["created"], 0, 0) for i in range(partitions))
        return ok_section(topic_header(t) + parts)

    def _store_messages(self, body: bytes) -> bytes:
        """Stamp and keep the batch; answer one confirmation (SendMessagesResponse)."""
        meta = struct.unpack_from("<I", body, 0)[0]
        stream, pos = _ident(body, 4)
        topic, pos = _ident(body, pos)
        kind = body[pos]
        pid = struct.unpack_from("<I", body, pos + 2)[0] if kind == 2 else 1
        batch = body[4 + meta :]
        stored = self.batches.setdefault((stream, topic), [])
        base = sum(struct.unpack_from("<I", b, 48)[0] for b in stored)
        stored.append(stamp_batch(batch, pid, base, now_us()))
        s = self.streams.get(stream, {"id": 0, "topics": {}})
        tid = s["topics"].get(topic, {"id": 0})["id"]
        return struct.pack("<IIIIQ", 1, s["id"], tid, pid, base)

    def _poll_request(self, body: bytes) -> tuple[str, str, int, int, int, bool, tuple]:
        pos = 1
        consumer, pos = _ident(body, pos)
        stream, pos = _ident(body, pos)
        topic, pos = _ident(body, pos)
        present, pid = body[pos], struct.unpack_from("<I", body, pos + 1)[0]
        pos += 5
        kind, value = body[pos], struct.unpack_from("<Q", body, pos + 1)[0]
        count = struct.unpack_from("<I", body, pos + 9)[0]
        auto_commit = bool(body[pos + 13])
        start = value if kind == 1 else 0
        return stream, topic, pid if present else 1, start, count, auto_commit, (body[0], consumer)

    def _poll(self, body: bytes) -> bytes:
        stream, topic, pid, start, count, auto_commit, consumer = self._poll_request(body)
        stored = self.batches.get((stream, topic), [])
        out, n, total = b"", 0, 0
        for b in stored:
            base = struct.unpack_from("<Q", b, 8)[0]
            bn = struct.unpack_from("<I", b, 48)[0]
            total += bn
            if base + bn > start and n < count:
                out += b
                n += bn
        if auto_commit and n:
            self.offsets[(consumer, stream, topic, pid)] = start + n - 1
        return struct.pack("<IQI", pid, max(total - 1, 0), n) + out

    def _get_offset(self, body: bytes) -> bytes:
        return struct.pack("<IQQ", 1, 0, max(self.offsets.values(), default=0))

    def _store_offset(self, body: bytes) -> None:
        """StoreConsumerOffset of the 0.9 era (requests/consumer_offsets/store_consumer_offset.rs):
        consumer kind u8 + identifier, stream, topic, partition flag u8 + id u32, offset u64, then
        the AckLevel u8 (0 no_ack, 1 quorum) as the last byte, which this server requires."""
        _consumer, pos = _ident(body, 1)
        _stream, pos = _ident(body, pos)
        _topic, pos = _ident(body, pos)
        pos += 5  # partition flag + id
        if len(body) != pos + 9 or body[pos + 8] not in (0, 1):
            raise ValueError("STORE_CONSUMER_OFFSET without its ack level")
        self.offsets[("store",)] = struct.unpack_from("<Q", body, pos)[0]
