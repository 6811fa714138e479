"""A small TubeMQ master + broker and producer/consumer clients that talk real TCP on 127.0.0.1.

Written for brokerscope's tests from TubeMQ's protocol guide and its Netty codec: every frame is
`0xFF7FF4FE | serialNo | listSize | listSize x [length | data]` (big-endian int32s), the joined
data cut into blocks of at most 8192 bytes, holding varint-delimited protobuf messages
(RpcConnHeader, RequestHeader, RequestBody / RpcConnHeader, ResponseHeader, RspResponseBody or
RspExceptionBody). The framing code here is deliberately separate from the decoder's.

The conversation `run_scenario` drives (producer and consumer each with their own connections):

  producer -> master: register (the master answers the first call of each connection with a
                      StandbyException when `standby_first`, the client retries), heartbeat
  producer -> broker: sendMessageP2B per message (some need several 8192-byte blocks)
  producer -> master: close
  consumer -> master: register, heartbeat (the answer assigns partitions)
  consumer -> broker: register (opType 31), heartbeat, getMessages until empty (confirming each
                      pack with lastPackConsumed), commit offset, unregister (opType 32)
  consumer -> master: close
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field

from google.protobuf.internal.decoder import _DecodeVarint32
from google.protobuf.internal.encoder import _VarintBytes

from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
from brokerscope.protocols.tubemq.gen import tubemq_master_pb2 as mst
from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as rpc

BEGIN_TOKEN = 0xFF7FF4FE
BLOCK = 8192
MSS = 1460
SUCCESS = 200
SERVICE_MASTER, SERVICE_BROKER_READ, SERVICE_BROKER_WRITE = 1, 2, 3
STANDBY = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"

# method id -> (request class, response class)
MASTER_METHODS = {
    1: (mst.RegisterRequestP2M, mst.RegisterResponseM2P),
    2: (mst.HeartRequestP2M, mst.HeartResponseM2P),
    3: (mst.CloseRequestP2M, mst.CloseResponseM2P),
    4: (mst.RegisterRequestC2M, mst.RegisterResponseM2C),
    5: (mst.HeartRequestC2M, mst.HeartResponseM2C),
    6: (mst.CloseRequestC2M, mst.CloseResponseM2C),
}
BROKER_METHODS = {
    13: (brk.SendMessageRequestP2B, brk.SendMessageResponseB2P),
    15: (brk.RegisterRequestC2B, brk.RegisterResponseB2C),
    16: (brk.HeartBeatRequestC2B, brk.HeartBeatResponseB2C),
    17: (brk.GetMessageRequestC2B, brk.GetMessageResponseB2C),
    18: (brk.CommitOffsetRequestC2B, brk.CommitOffsetResponseB2C),
}


def crc(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


# ---------------------------------------------------------------------------------------------
# wire


def _delim(msg) -> bytes:
    b = msg.SerializeToString()
    return _VarintBytes(len(b)) + b


def pack_frame(serial: int, content: bytes) -> bytes:
    blocks = [content[i : i + BLOCK] for i in range(0, len(content), BLOCK)] or [b""]
    parts = [struct.pack(">IIi", BEGIN_TOKEN, serial, len(blocks))]
    for b in blocks:
        parts.append(struct.pack(">i", len(b)))
        parts.append(b)
    return b"".join(parts)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("peer closed")
        out += chunk
    return bytes(out)


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    token, serial, nblocks = struct.unpack(">IIi", _read_exact(sock, 12))
    if token != BEGIN_TOKEN or not 0 < nblocks <= 4096:
        raise ConnectionError(f"bad frame header {token:#x} {nblocks}")
    data = bytearray()
    for _ in range(nblocks):
        (n,) = struct.unpack(">i", _read_exact(sock, 4))
        if not 0 <= n <= BLOCK:
            raise ConnectionError(f"bad block length {n}")
        data += _read_exact(sock, n)
    return serial, bytes(data)


def _parse_delimited(buf: bytes, pos: int, cls):
    n, pos = _DecodeVarint32(buf, pos)
    m = cls()
    m.ParseFromString(buf[pos : pos + n])
    return m, pos + n


# ---------------------------------------------------------------------------------------------
# servers


class _Server:
    """Accepts connections on 127.0.0.1 and answers each request frame with `handle`."""

    methods: dict = {}

    def __init__(self, port: int = 0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Ethernet-sized segments on loopback, so large frames span many TCP segments
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, MSS)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self.lock = threading.Lock()

    def start(self):
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        try:
            self.sock.close()
        except OSError:
            pass
        for c in self._conns:
            try:
                c.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(2)

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        first = True
        try:
            while not self._stop.is_set():
                serial, content = read_frame(conn)
                head, pos = _parse_delimited(content, 0, rpc.RpcConnHeader)
                rh, pos = _parse_delimited(content, pos, rpc.RequestHeader)
                body, pos = _parse_delimited(content, pos, rpc.RequestBody)
                req_cls, rsp_cls = self.methods[body.method]
                req = req_cls()
                req.ParseFromString(body.request)
                exc = self.exception_for(body.method, req, first)
                first = False
                if exc:
                    out = (
                        _delim(rpc.RpcConnHeader(flag=1))
                        + _delim(
                            rpc.ResponseHeader(status=rpc.ResponseHeader.ERROR, protocolVer=rh.protocolVer)
                        )
                        + _delim(rpc.RspExceptionBody(exceptionName=exc[0], stackTrace=exc[1]))
                    )
                else:
                    rsp = self.handle(body.method, req)
                    out = (
                        _delim(rpc.RpcConnHeader(flag=1))
                        + _delim(
                            rpc.ResponseHeader(status=rpc.ResponseHeader.SUCCESS, protocolVer=rh.protocolVer)
                        )
                        + _delim(rpc.RspResponseBody(method=body.method, data=rsp.SerializeToString()))
                    )
                conn.sendall(pack_frame(serial, out))
        except (ConnectionError, OSError):
            pass
        finally:
            conn.close()

    def exception_for(self, method: int, req, first: bool) -> tuple[str, str] | None:
        return None

    def handle(self, method: int, req):
        raise NotImplementedError


class MasterSim(_Server):
    methods = MASTER_METHODS

    def __init__(
        self, broker_port: int, topic: str, partitions: int = 2, port: int = 0, standby_first: bool = True
    ):
        super().__init__(port)
        self.broker_port = broker_port
        self.topic = topic
        self.partitions = partitions
        self.standby_first = standby_first
        self.broker_info = f"1:127.0.0.1:{broker_port}"

    def exception_for(self, method, req, first):
        if self.standby_first and first and method == 1:
            return STANDBY, "Please send your request to the active master!\n\tat MasterSim.check(sim:1)"
        return None

    def handle(self, method: int, req):
        ok = {"success": True, "errCode": SUCCESS, "errMsg": "OK"}
        if method == 1:
            return mst.RegisterResponseM2P(
                **ok,
                brokerCheckSum=11,
                brokerInfos=[self.broker_info],
                authorizedInfo=mst.MasterAuthorizedInfo(visitAuthorizedToken=987654321),
            )
        if method == 2:
            return mst.HeartResponseM2P(
                **ok,
                brokerCheckSum=11,
                brokerInfos=[self.broker_info],
                topicInfos=[f"{self.topic}#1:{self.partitions}:1"],
            )
        if method in (3, 6):
            return MASTER_METHODS[method][1](**ok)
        if method == 4:
            return mst.RegisterResponseM2C(**ok, notAllocated=True)
        if method == 5:
            subs = [
                f"{req.clientId}@{req.groupName}#{self.broker_info}#{self.topic}:{p}"
                for p in range(self.partitions)
            ]
            return mst.HeartResponseM2C(
                **ok, event=mst.EventProto(rebalanceId=1, opType=1, status=0, subscribeInfo=subs)
            )
        raise KeyError(method)


class BrokerSim(_Server):
    methods = BROKER_METHODS

    def __init__(self, port: int = 0, pack_size: int = 3):
        super().__init__(port)
        self.store: dict[tuple[str, int], list[brk.TransferedMessage]] = {}
        self.read_pos: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) -> next index
        self.committed: dict[tuple[str, str, int], int] = {}
        self.pack_size = pack_size
        self.next_id = 1000

    def handle(self, method: int, req):
        ok = {"success": True, "errCode": SUCCESS, "errMsg": "OK"}
        with self.lock:
            if method == 13:
                if req.checkSum != -1 and req.checkSum != crc(req.data):
                    return brk.SendMessageResponseB2P(
                        success=False, errCode=400, errMsg="Checksum msg data failure"
                    )
                key = (req.topicName, req.partitionId)
                lst = self.store.setdefault(key, [])
                self.next_id += 1
                lst.append(
                    brk.TransferedMessage(
                        messageId=self.next_id,
                        checkSum=crc(req.data),
                        payLoadData=req.data,
                        flag=req.flag,
                        partitionId=req.partitionId,
                        recvTimeInMs=int(time.time() * 1000),
                    )
                )
                return brk.SendMessageResponseB2P(
                    **ok,
                    messageId=self.next_id,
                    appendTime=int(time.time() * 1000),
                    appendOffset=(len(lst) - 1) * 20,
                )
            if method == 15:
                key = (req.groupName, req.topicName, req.partitionId)
                cur = self.committed.get(key, 0)
                if req.opType == 31:  # a (re-)registered consumer reads on from the committed offset
                    self.read_pos.pop(key, None)
                return brk.RegisterResponseB2C(
                    **ok,
                    currOffset=cur * 20,
                    maxOffset=len(self.store.get((req.topicName, req.partitionId), [])) * 20,
                )
            if method == 16:
                return brk.HeartBeatResponseB2C(**ok, hasPartFailure=False)
            if method == 17:
                key = (req.groupName, req.topicName, req.partitionId)
                msgs = self.store.get((req.topicName, req.partitionId), [])
                start = self.read_pos.get(key, self.committed.get(key, 0))
                if req.lastPackConsumed:
                    self.committed[key] = start
                pack = msgs[start : start + self.pack_size]
                if not pack:
                    return brk.GetMessageResponseB2C(
                        success=False,
                        errCode=404,
                        errMsg="no messages",
                        currOffset=start * 20,
                        maxOffset=len(msgs) * 20,
                    )
                self.read_pos[key] = start + len(pack)
                return brk.GetMessageResponseB2C(
                    **ok, messages=pack, currOffset=(start + len(pack)) * 20, maxOffset=len(msgs) * 20
                )
            if method == 18:
                key = (req.groupName, req.topicName, req.partitionId)
                self.committed[key] = self.read_pos.get(key, 0)
                return brk.CommitOffsetResponseB2C(
                    **ok,
                    currOffset=self.committed[key] * 20,
                    maxOffset=len(self.store.get((req.topicName, req.partitionId), [])) * 20,
                )
        raise KeyError(method)


# ---------------------------------------------------------------------------------------------
# clients


class RpcClient:
    """One TCP connection; `call` sends a request frame and waits for the frame with its serialNo."""

    def __init__(self, port: int, service: int, context: ssl.SSLContext | None = None, host: str = ""):
        """With `context`, over TLS (the server name `host` sent and verified as it says)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, MSS)
        self.sock.settimeout(5)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is not None:
            self.sock = context.wrap_socket(self.sock, server_hostname=host or None)
        self.service = service
        self.serial = 0
        self.calls: list[tuple[int, int, bool]] = []  # (serial, method, got exception)

    def call(self, method: int, req, rsp_cls):
        self.serial += 1
        content = (
            _delim(rpc.RpcConnHeader(flag=0))
            + _delim(rpc.RequestHeader(serviceType=self.service, protocolVer=2))
            + _delim(rpc.RequestBody(method=method, timeout=10000, request=req.SerializeToString()))
        )
        self.sock.sendall(pack_frame(self.serial, content))
        serial, data = read_frame(self.sock)
        assert serial == self.serial, (serial, self.serial)
        _, pos = _parse_delimited(data, 0, rpc.RpcConnHeader)
        rh, pos = _parse_delimited(data, pos, rpc.ResponseHeader)
        if rh.status != rpc.ResponseHeader.SUCCESS:
            ex, _ = _parse_delimited(data, pos, rpc.RspExceptionBody)
            self.calls.append((serial, method, True))
            raise RemoteError(ex.exceptionName, ex.stackTrace)
        body, _ = _parse_delimited(data, pos, rpc.RspResponseBody)
        rsp = rsp_cls()
        rsp.ParseFromString(body.data)
        self.calls.append((serial, method, False))
        return rsp

    def close(self) -> None:
        self.sock.close()


class RemoteError(Exception):
    def __init__(self, name: str, trace: str):
        super().__init__(f"{name}: {trace.splitlines()[0] if trace else ''}")
        self.name = name


@dataclass
class SentMessage:
    topic: str
    partition: int
    payload: bytes
    attribute: str


@dataclass
class ScenarioResult:
    sent: list[SentMessage] = field(default_factory=list)
    received: list[tuple[int, bytes]] = field(default_factory=list)  # (messageId, payload with attributes)
    requests: int = 0  # request frames the clients sent
    exceptions: int = 0
    commits: int = 0  # consumerCommitC2B calls
    confirms: int = 0  # getMessagesC2B calls with lastPackConsumed
    master_port: int = 0
    broker_port: int = 0


def encode_payload(payload: bytes, attribute: str) -> bytes:
    if not attribute:
        return payload
    a = attribute.encode("utf-8")
    return struct.pack(">i", len(a)) + a + payload


def run_scenario(
    master_port: int = 0,
    broker_port: int = 0,
    topic: str = "demo",
    messages: list[tuple[bytes, str]] | None = None,
    partitions: int = 2,
    on_ports=None,
    front=None,
    context: ssl.SSLContext | None = None,
    host: str = "",
) -> ScenarioResult:
    """Start a broker and a master, run a producer then a consumer against them, stop everything.

    `messages`: (payload, attribute text) pairs; default: 7 messages, two of them over 8192 bytes.
    `on_ports(master_port, broker_port)` is called once the servers listen (e.g. to add capture ports).
    `front(master_port, broker_port) -> (master_port, broker_port)`: the ports the clients connect
    to instead (proxies in front of the servers; the master names the broker by its front port),
    with `context` over TLS (server name `host`).
    """
    if messages is None:
        messages = [
            (b"hello tubemq", "k=v"),
            (b"second message", ""),
            (bytes(range(256)) * 40, "size=10240"),  # 10,240 bytes: two blocks
            (b"\x00\x01binary\xff", "bin=1,$msgType$=raw"),
            (b"B" * 20000, "big=yes"),  # three blocks
            (b"sixth", ""),
            (b"last one", "$msgTime$=202401020304"),
        ]
    res = ScenarioResult()
    broker = BrokerSim(broker_port).start()
    master = MasterSim(broker.port, topic, partitions, port=master_port).start()
    res.master_port, res.broker_port = master.port, broker.port
    if on_ports:
        on_ports(master.port, broker.port)
    mport, bport = front(master.port, broker.port) if front else (master.port, broker.port)
    master.broker_port, master.broker_info = bport, f"1:127.0.0.1:{bport}"
    clients: list[RpcClient] = []
    try:
        # ---- producer
        pm = RpcClient(mport, SERVICE_MASTER, context, host)
        clients.append(pm)
        reg = mst.RegisterRequestP2M(
            clientId="prod-1", topicList=[topic], brokerCheckSum=-1, hostName="127.0.0.1", jdkVersion="sim"
        )
        try:
            pm.call(1, reg, mst.RegisterResponseM2P)
        except RemoteError:
            res.exceptions += 1
            pm.call(1, reg, mst.RegisterResponseM2P)
        hb = pm.call(
            2,
            mst.HeartRequestP2M(
                clientId="prod-1", brokerCheckSum=11, hostName="127.0.0.1", topicList=[topic]
            ),
            mst.HeartResponseM2P,
        )
        assert hb.topicInfos
        pb = RpcClient(bport, SERVICE_BROKER_WRITE, context, host)
        clients.append(pb)
        for i, (payload, attr) in enumerate(messages):
            part = i % partitions
            data = encode_payload(payload, attr)
            send = brk.SendMessageRequestP2B(
                clientId="prod-1",
                topicName=topic,
                partitionId=part,
                data=data,
                flag=1 if attr else 0,
                checkSum=crc(data) if i % 2 else -1,
                sentAddr=0x7F000001,
                msgTime="202401020304",
                authInfo=brk.AuthorizedInfo(visitAuthorizedToken=987654321),
            )
            r = pb.call(13, send, brk.SendMessageResponseB2P)
            assert r.success, r.errMsg
            res.sent.append(SentMessage(topic, part, payload, attr))
        pm.call(3, mst.CloseRequestP2M(clientId="prod-1"), mst.CloseResponseM2P)
        # ---- consumer
        cm = RpcClient(mport, SERVICE_MASTER, context, host)
        clients.append(cm)
        cm.call(
            4,
            mst.RegisterRequestC2M(
                clientId="cons-1",
                groupName="grp",
                hostName="127.0.0.1",
                topicList=[topic],
                requireBound=False,
            ),
            mst.RegisterResponseM2C,
        )
        hb = cm.call(
            5,
            mst.HeartRequestC2M(clientId="cons-1", groupName="grp", reportSubscribeInfo=False),
            mst.HeartResponseM2C,
        )
        parts = sorted(int(s.rsplit(":", 1)[1]) for s in hb.event.subscribeInfo)
        cb = RpcClient(bport, SERVICE_BROKER_READ, context, host)
        clients.append(cb)
        for p in parts:
            cb.call(
                15,
                brk.RegisterRequestC2B(
                    opType=31,
                    clientId="cons-1",
                    groupName="grp",
                    topicName=topic,
                    partitionId=p,
                    readStatus=0,
                ),
                brk.RegisterResponseB2C,
            )
        cb.call(
            16,
            brk.HeartBeatRequestC2B(
                clientId="cons-1",
                groupName="grp",
                readStatus=0,
                partitionInfo=[f"1:127.0.0.1:{bport}:{topic}:{p}:0" for p in parts],
            ),
            brk.HeartBeatResponseB2C,
        )
        for p in parts:
            confirm = False
            while True:
                g = cb.call(
                    17,
                    brk.GetMessageRequestC2B(
                        clientId="cons-1",
                        partitionId=p,
                        groupName="grp",
                        topicName=topic,
                        lastPackConsumed=confirm,
                    ),
                    brk.GetMessageResponseB2C,
                )
                if confirm:
                    res.confirms += 1
                if not g.success:
                    break
                res.received.extend((m.messageId, m.payLoadData) for m in g.messages)
                confirm = True
            cb.call(
                18,
                brk.CommitOffsetRequestC2B(
                    clientId="cons-1", topicName=topic, partitionId=p, groupName="grp", lastPackConsumed=True
                ),
                brk.CommitOffsetResponseB2C,
            )
            res.commits += 1
        for p in parts:
            cb.call(
                15,
                brk.RegisterRequestC2B(
                    opType=32,
                    clientId="cons-1",
                    groupName="grp",
                    topicName=topic,
                    partitionId=p,
                    readStatus=0,
                ),
                brk.RegisterResponseB2C,
            )
        cm.call(6, mst.CloseRequestC2M(clientId="cons-1", groupName="grp"), mst.CloseResponseM2C)
    finally:
        for c in clients:
            res.requests += len(c.calls)
            c.close()
        time.sleep(0.05)
        master.stop()
        broker.stop()
    return res
