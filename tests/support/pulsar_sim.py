"""A small Apache Pulsar broker simulator for tests and sample captures (127.0.0.1 only).

It speaks enough of the binary protocol for the real pulsar-client library (C++ core) to create
producers and consumers: CONNECT, PARTITIONED_METADATA, LOOKUP, PRODUCER, SEND (receipts assign
ledger/entry ids), SUBSCRIBE, FLOW (MESSAGE frames re-deliver what was produced, the metadata and
the payload exactly as the producer sent them, so batches arrive as batches and chunks as
chunks), ACK (ACK_RESPONSE when the ack asks for one), PING/PONG, CLOSE_PRODUCER/CLOSE_CONSUMER,
UNSUBSCRIBE, GET_LAST_MESSAGE_ID, REDELIVER_UNACKNOWLEDGED_MESSAGES (the named entries, or every
unacknowledged one the consumer was sent, again with their redelivery count), CONSUMER_STATS (the
subscription's backlog: the topic's messages no consumer of the subscription acknowledged,
logged in `log["stats"]`; ConsumerNotFound for an id not subscribed). The broker also
pings each client once after CONNECTED.

Framing is implemented here independently of the decoder under test (only the generated protobuf
classes are shared), so the real client validates every frame the simulator builds.

    with PulsarSim() as sim:
        client = pulsar.Client(sim.url)
        ...
    sim.log  # what was produced, delivered and acknowledged
"""

from __future__ import annotations

import socket
import struct
import threading
import traceback
from dataclasses import dataclass, field

import crc32c

from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

T = pb.BaseCommand
_BODY = {f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"}


def _frame(
    cmd: pb.BaseCommand, metadata: bytes | None = None, payload: bytes = b"", bem: bytes | None = None
) -> bytes:
    """[total][cmd size][cmd] then, for payload commands, [0x0e02 bem]? [0x0e01][crc32c][md size][md][payload]."""
    c = cmd.SerializeToString()
    parts = [struct.pack(">I", len(c)), c]
    if metadata is not None:
        if bem is not None:
            parts += [b"\x0e\x02", struct.pack(">I", len(bem)), bem]
        tail = struct.pack(">I", len(metadata)) + metadata + payload
        parts += [b"\x0e\x01", struct.pack(">I", crc32c.crc32c(tail)), tail]
    body = b"".join(parts)
    return struct.pack(">I", len(body)) + body


def _cmd(t: int, **fields) -> pb.BaseCommand:
    c = pb.BaseCommand(type=t)
    body = getattr(c, _BODY[t])
    body.SetInParent()
    for k, v in fields.items():
        if isinstance(v, dict):
            getattr(body, k).SetInParent()
            for kk, vv in v.items():
                setattr(getattr(body, k), kk, vv)
        else:
            setattr(body, k, v)
    return c


@dataclass
class Entry:
    ledger: int
    entry: int
    metadata: bytes  # MessageMetadata exactly as sent
    payload: bytes  # as sent (compressed / batched / a chunk)
    num_messages: int
    producer_id: int
    sequence_id: int


@dataclass
class Topic:
    name: str
    ledger: int
    entries: list[Entry] = field(default_factory=list)


@dataclass
class Consumer:
    conn: _Conn
    consumer_id: int
    topic: str
    subscription: str
    cursor: int = 0
    permits: int = 0
    acked: set = field(default_factory=set)  # (ledger, entry) acknowledged by this consumer
    sent: dict = field(default_factory=dict)  # entry index -> times delivered to this consumer


class _Conn(threading.Thread):
    def __init__(self, sim: PulsarSim, sock: socket.socket):
        super().__init__(daemon=True)
        self.sim, self.sock = sim, sock
        self.wlock = threading.Lock()
        self.producers: dict[int, str] = {}
        self.consumers: dict[int, Consumer] = {}
        self.client_bem = False

    def send(self, data: bytes) -> None:
        with self.wlock:
            try:
                self.sock.sendall(data)
            except OSError:
                pass

    def reply(self, t: int, **fields) -> None:
        self.send(_frame(_cmd(t, **fields)))

    def run(self) -> None:
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = self.sock.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4:
                    (total,) = struct.unpack_from(">I", buf, 0)
                    if len(buf) < 4 + total:
                        break
                    frame = bytes(buf[4 : 4 + total])
                    del buf[: 4 + total]
                    try:
                        self.handle(frame)
                    except Exception:  # a simulator bug must be visible, not a hung client
                        traceback.print_exc()
        finally:
            with self.sim.lock:
                for c in self.consumers.values():
                    if c in self.sim.consumers:
                        self.sim.consumers.remove(c)
            try:
                self.sock.close()
            except OSError:
                pass

    def handle(self, frame: bytes) -> None:
        (csize,) = struct.unpack_from(">I", frame, 0)
        cmd = pb.BaseCommand()
        cmd.ParseFromString(frame[4 : 4 + csize])
        rest = frame[4 + csize :]
        t = cmd.type
        sim = self.sim
        sim.log["commands"].append(pb.BaseCommand.Type.Name(t))
        if t == T.CONNECT:
            c = cmd.connect
            self.client_bem = c.feature_flags.supports_broker_entry_metadata
            self.reply(
                T.CONNECTED,
                server_version="brokerscope-pulsar-sim",
                protocol_version=min(c.protocol_version, 21),
                max_message_size=sim.max_message_size,
            )
            self.reply(T.PING)
        elif t == T.PING:
            self.reply(T.PONG)
        elif t == T.PONG:
            pass
        elif t == T.PARTITIONED_METADATA:
            b = cmd.partitioned_metadata
            n = sim.partitions.get(b.topic.split("://")[-1], sim.partitions.get(b.topic, 0))
            self.reply(T.PARTITIONED_METADATA_RESPONSE, request_id=b.request_id, partitions=n, response=0)
        elif t == T.LOOKUP:
            b = cmd.lookup
            self.reply(
                T.LOOKUP_RESPONSE,
                request_id=b.request_id,
                response=pb.CommandLookupTopicResponse.Connect,
                broker_service_url=sim.url,
                **({"broker_service_url_tls": sim.tls_url} if sim.tls_url else {}),
                authoritative=True,
                proxy_through_service_url=False,
            )
        elif t == T.PRODUCER:
            b = cmd.producer
            self.producers[b.producer_id] = b.topic
            sim.topic(b.topic)
            name = b.producer_name if b.HasField("producer_name") else f"sim-producer-{b.producer_id}"
            self.reply(T.PRODUCER_SUCCESS, request_id=b.request_id, producer_name=name, last_sequence_id=-1)
        elif t == T.SEND:
            self.on_send(cmd.send, rest)
        elif t == T.SUBSCRIBE:
            b = cmd.subscribe
            c = Consumer(self, b.consumer_id, b.topic, b.subscription)
            self.consumers[b.consumer_id] = c
            with sim.lock:
                sim.topic(b.topic)
                sim.consumers.append(c)
            self.reply(T.SUCCESS, request_id=b.request_id)
        elif t == T.FLOW:
            c = self.consumers.get(cmd.flow.consumer_id)
            if c is not None:
                with sim.lock:
                    c.permits += cmd.flow.message_permits
                sim.dispatch(c.topic)
        elif t == T.ACK:
            b = cmd.ack
            c = self.consumers.get(b.consumer_id)
            if c is not None:
                with sim.lock:
                    tp = sim.topics.get(c.topic)
                    for m in b.message_id:
                        if b.ack_type == pb.CommandAck.Cumulative and tp is not None:
                            c.acked |= {(e.ledger, e.entry) for e in tp.entries if e.entry <= m.entry_id}
                        else:
                            c.acked.add((m.ledger_id, m.entry_id))
                    sim.sub_acked.setdefault((c.topic, c.subscription), set()).update(c.acked)
            sim.log["acks"].append(
                {
                    "consumer_id": b.consumer_id,
                    "cumulative": b.ack_type == pb.CommandAck.Cumulative,
                    "ids": [
                        {
                            "ledger": m.ledger_id,
                            "entry": m.entry_id,
                            "batch_index": m.batch_index,
                            "ack_set": list(m.ack_set),
                            "batch_size": m.batch_size,
                        }
                        for m in b.message_id
                    ],
                }
            )
            if b.HasField("request_id"):
                self.reply(T.ACK_RESPONSE, consumer_id=b.consumer_id, request_id=b.request_id)
        elif t in (T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.UNSUBSCRIBE):
            b = getattr(cmd, _BODY[t])
            if t != T.CLOSE_PRODUCER:
                c = self.consumers.pop(b.consumer_id, None)
                with sim.lock:
                    if c in sim.consumers:
                        sim.consumers.remove(c)
            self.reply(T.SUCCESS, request_id=b.request_id)
        elif t == T.GET_LAST_MESSAGE_ID:
            b = cmd.get_last_message_id
            c = self.consumers.get(b.consumer_id)
            tp = sim.topics.get(c.topic) if c else None
            last = tp.entries[-1] if tp and tp.entries else None
            self.reply(
                T.GET_LAST_MESSAGE_ID_RESPONSE,
                request_id=b.request_id,
                last_message_id={
                    "ledger_id": last.ledger if last else 0,
                    "entry_id": last.entry if last else 0,
                },
            )
        elif t == T.CONSUMER_STATS:
            self.on_consumer_stats(cmd.consumer_stats)
        elif t == T.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            b = cmd.redeliver_unacknowledged_messages
            c = self.consumers.get(b.consumer_id)
            if c is not None:
                sim.redeliver(c, {(m.ledger_id, m.entry_id) for m in b.message_ids})
        else:
            body = getattr(cmd, _BODY.get(t, "type"), None)
            rid = getattr(body, "request_id", None)
            if rid is not None:
                self.reply(
                    T.ERROR,
                    request_id=rid,
                    error=pb.NotAllowedError,
                    message=f"{pb.BaseCommand.Type.Name(t)} not simulated",
                )

    def on_consumer_stats(self, b: pb.CommandConsumerStats) -> None:
        """The consumer's stats: its subscription's backlog (sim.backlog), its unacknowledged
        deliveries and permits; ConsumerNotFound for a consumer id not subscribed here."""
        c = self.consumers.get(b.consumer_id)
        if c is None:
            self.reply(T.CONSUMER_STATS_RESPONSE, request_id=b.request_id, error_code=pb.ConsumerNotFound,
                       error_message=f"consumer {b.consumer_id} not found")  # fmt: skip
            return
        with self.sim.lock:
            backlog = self.sim.backlog(c.topic, c.subscription)
            tp = self.sim.topics.get(c.topic)
            unacked = sum(
                1 for i in c.sent if tp and (tp.entries[i].ledger, tp.entries[i].entry) not in c.acked
            )
            self.sim.log["stats"].append({"topic": c.topic, "subscription": c.subscription,
                                          "consumer_id": c.consumer_id, "backlog": backlog})  # fmt: skip
        self.reply(T.CONSUMER_STATS_RESPONSE, request_id=b.request_id, consumer_name=f"sim-consumer-{c.consumer_id}",
                   available_permits=max(c.permits, 0), unacked_messages=unacked, msg_backlog=backlog,
                   type="Shared")  # fmt: skip

    def on_send(self, send: pb.CommandSend, rest: bytes) -> None:
        sim = self.sim
        pos = 0
        if rest[:2] == b"\x0e\x01":
            (crc,) = struct.unpack_from(">I", rest, 2)
            pos = 6
            if crc32c.crc32c(rest[pos:]) != crc:
                self.reply(T.SEND_ERROR, producer_id=send.producer_id, sequence_id=send.sequence_id,
                           error=pb.ChecksumError, message="bad checksum")  # fmt: skip
                return
        (msize,) = struct.unpack_from(">I", rest, pos)
        metadata = rest[pos + 4 : pos + 4 + msize]
        payload = rest[pos + 4 + msize :]
        topic = self.producers.get(send.producer_id)
        with sim.lock:
            tp = sim.topic(topic)
            e = Entry(
                tp.ledger,
                len(tp.entries),
                metadata,
                payload,
                send.num_messages,
                send.producer_id,
                send.sequence_id,
            )
            tp.entries.append(e)
            sim.log["sends"].append({"topic": topic, "ledger": e.ledger, "entry": e.entry, "sequence_id": send.sequence_id,
                                     "num_messages": send.num_messages, "is_chunk": send.is_chunk})  # fmt: skip
        if sim.lose_receipt_of is not None and sim.lose_receipt_of == (topic, send.sequence_id):
            # stored, but the receipt is lost with the connection: the client resends the SEND
            # (same producer, sequence id and metadata) on its next connection
            sim.lose_receipt_of = None
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        rcpt = {"producer_id": send.producer_id, "sequence_id": send.sequence_id,
                "message_id": {"ledger_id": e.ledger, "entry_id": e.entry}}  # fmt: skip
        if send.HasField("highest_sequence_id"):
            rcpt["highest_sequence_id"] = send.highest_sequence_id
        self.reply(T.SEND_RECEIPT, **rcpt)
        sim.dispatch(topic)


class PulsarSim:
    """The broker: a listening socket on 127.0.0.1 and one thread per connection."""

    def __init__(
        self,
        port: int = 0,
        partitions: dict[str, int] | None = None,
        max_message_size: int = 5 * 1024 * 1024,
        broker_entry_metadata: bool = True,
        lose_receipt_of: tuple[str, int] | None = None,
    ):
        self.lock = threading.RLock()
        self.partitions = partitions or {}
        self.max_message_size = max_message_size
        self.broker_entry_metadata = broker_entry_metadata
        # (topic, sequence id) of a SEND stored without its receipt, its connection then closed
        self.lose_receipt_of = lose_receipt_of
        self.topics: dict[str, Topic] = {}
        self.consumers: list[Consumer] = []
        self.log: dict[str, list] = {"commands": [], "sends": [], "acks": [], "deliveries": [], "stats": []}
        # (topic, subscription) -> (ledger, entry) acknowledged by any consumer of the subscription
        self.sub_acked: dict[tuple[str, str], set] = {}
        self.index = 0  # broker entry metadata index (messages so far)
        self._srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._srv.bind(("127.0.0.1", port))
        self._srv.listen(16)
        self.port = self._srv.getsockname()[1]
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.tls_url: str | None = None  # set to a TLS proxy's pulsar+ssl:// URL: lookups name it
        self._conns: list[_Conn] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def topic(self, name: str | None) -> Topic:
        name = name or "unknown"
        if name not in self.topics:
            self.topics[name] = Topic(name, ledger=100 + len(self.topics))
        return self.topics[name]

    def backlog(self, topic: str, subscription: str) -> int:
        """The subscription's backlog: messages of the topic's entries (a batch counts its
        messages) no consumer of the subscription acknowledged."""
        tp = self.topics.get(topic)
        acked = self.sub_acked.get((topic, subscription), set())
        return sum(
            max(1, e.num_messages) for e in (tp.entries if tp else ()) if (e.ledger, e.entry) not in acked
        )

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._srv.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = _Conn(self, sock)
            self._conns.append(c)
            c.start()

    def dispatch(self, topic: str) -> None:
        """Push entries to the topic's consumers while they have permits."""
        out: list[tuple[_Conn, bytes]] = []
        with self.lock:
            tp = self.topics.get(topic)
            if tp is None:
                return
            for c in self.consumers:
                if c.topic != topic:
                    continue
                while c.permits > 0 and c.cursor < len(tp.entries):
                    c.cursor += 1
                    out.append(self._message(c, tp, c.cursor - 1))
        for conn, data in out:
            conn.send(data)

    def redeliver(self, c: Consumer, ids: set[tuple[int, int]]) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: the entries named (none named: every entry
        delivered to the consumer and not acknowledged) sent again, with their redelivery count."""
        with self.lock:
            tp = self.topics.get(c.topic)
            if tp is None:
                return
            again = [
                i
                for i in sorted(c.sent)
                if (tp.entries[i].ledger, tp.entries[i].entry) not in c.acked
                and (not ids or (tp.entries[i].ledger, tp.entries[i].entry) in ids)
            ]
            out = [self._message(c, tp, i) for i in again]
        for conn, data in out:
            conn.send(data)

    def _message(self, c: Consumer, tp: Topic, i: int) -> tuple[_Conn, bytes]:
        """The MESSAGE frame delivering entry `i` of `tp` to `c` (counted and logged)."""
        e = tp.entries[i]
        c.permits -= max(1, e.num_messages)
        mid = {"ledger_id": e.ledger, "entry_id": e.entry}
        if "-partition-" in tp.name:
            mid["partition"] = int(tp.name.rsplit("-partition-", 1)[1])
        bem = None
        if self.broker_entry_metadata and c.conn.client_bem:
            self.index += max(1, e.num_messages)
            bem = pb.BrokerEntryMetadata(
                broker_timestamp=1_700_000_000_000 + self.index, index=self.index - 1
            ).SerializeToString()
        redelivery = c.sent.get(i, 0)
        c.sent[i] = redelivery + 1
        extra = {"redelivery_count": redelivery} if redelivery else {}
        cmd = _cmd(T.MESSAGE, consumer_id=c.consumer_id, message_id=mid, **extra)
        self.log["deliveries"].append(
            {"topic": tp.name, "consumer_id": c.consumer_id, "ledger": e.ledger, "entry": e.entry,
             "redelivery_count": redelivery}
        )  # fmt: skip
        return c.conn, _frame(cmd, e.metadata, e.payload, bem)

    def start(self) -> PulsarSim:
        self._thread.start()
        return self

    def stop(self) -> None:
        try:
            self._srv.close()
        except OSError:
            pass
        for c in self._conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for c in self._conns:
            c.join(2)
        self._thread.join(2)

    def __enter__(self) -> PulsarSim:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class StatsClient:
    """The simulator's own client, for what pulsar-client cannot send: a connection (CONNECT)
    that subscribes consumers without asking for messages (no FLOW) and asks the broker for a
    consumer's stats (CONSUMER_STATS, whose answer holds its subscription's backlog). Frames are
    built with this module's own framing; answers are read back as BaseCommands.

        with StatsClient(sim.port) as sc:
            cid = sc.subscribe(topic, "slow")
            sc.stats(cid).msg_backlog
    """

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.next_id = 1
        self.sock.sendall(_frame(_cmd(T.CONNECT, client_version="brokerscope-stats", protocol_version=21)))
        self._until(T.CONNECTED)

    def _read(self) -> pb.BaseCommand:
        """The next frame's command (the simulator's frames here carry no payload)."""
        while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack_from(">I", self.buf)[0]:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the simulator closed the connection")
            self.buf += chunk
        (total,) = struct.unpack_from(">I", self.buf)
        (csize,) = struct.unpack_from(">I", self.buf, 4)
        cmd = pb.BaseCommand()
        cmd.ParseFromString(self.buf[8 : 8 + csize])
        self.buf = self.buf[4 + total :]
        return cmd

    def _until(self, t: int) -> pb.BaseCommand:
        """Read up to the first frame of type `t`, answering the broker's pings on the way."""
        while (cmd := self._read()).type != t:
            if cmd.type == T.PING:
                self.sock.sendall(_frame(_cmd(T.PONG)))
        return cmd

    def _request_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def subscribe(self, topic: str, subscription: str) -> int:
        """A Shared consumer of `subscription` on `topic` that asks for no messages: its id."""
        cid, rid = self._request_id(), self._request_id()
        sub = _cmd(T.SUBSCRIBE, topic=topic, subscription=subscription, sub_type=pb.CommandSubscribe.Shared,
                   consumer_id=cid, request_id=rid)  # fmt: skip
        self.sock.sendall(_frame(sub))
        self._until(T.SUCCESS)
        return cid

    def stats(self, consumer_id: int) -> pb.CommandConsumerStatsResponse:
        """The broker's CONSUMER_STATS answer for the consumer."""
        self.sock.sendall(
            _frame(_cmd(T.CONSUMER_STATS, request_id=self._request_id(), consumer_id=consumer_id))
        )
        return self._until(T.CONSUMER_STATS_RESPONSE).consumer_stats_response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> StatsClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
