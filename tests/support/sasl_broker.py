"""A small Kafka broker with SASL authentication for tests (127.0.0.1 only, threads + sockets).

Written from the Kafka protocol guide and message specs, independently of the decoder under test,
so that real clients (kafka-python, librdkafka) authenticate against it and list topics. It answers:

- ApiVersions v0-v2 (a higher version gets the v0-encoded UNSUPPORTED_VERSION answer of KIP-511,
  which lists the ApiVersions range only, as Kafka's does, so the client retries lower);
- SaslHandshake v0-v1: v1 is followed by SaslAuthenticate requests; v0 by raw SASL tokens, each a
  4-byte length and the token, without any Kafka request header, answered the same way;
- SaslAuthenticate v0-v2 (v2 flexible; advertised up to `sasl_authenticate_max`, default 1);
- Metadata v0-v4 (advertised up to `metadata_max`, default 1): this broker is the only broker,
  at `advertised_port` (set it to a relay's port so the client stays on the relay), leading one
  partition of every topic; a topic asked for by name is created.

SASL mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677; salt and
4096 iterations per user, client proof verified, server signature sent). A failed authentication
is answered with SASL_AUTHENTICATION_FAILED (58), then the connection is closed, as Kafka does; any
other request before authentication closes the connection.

    with SaslBroker({"alice": "secret"}) as broker:
        ...connect to 127.0.0.1:broker.port...
    broker.auths  # one Auth per authentication: mechanism, user, ok, the SCRAM proof / signature
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import struct
import threading
from dataclasses import dataclass, field

API_METADATA, API_SASL_HANDSHAKE, API_API_VERSIONS, API_SASL_AUTHENTICATE = 3, 17, 18, 36
NONE, UNSUPPORTED_SASL_MECHANISM, UNSUPPORTED_VERSION, SASL_AUTHENTICATION_FAILED = 0, 33, 35, 58
ILLEGAL_SASL_STATE = 34
SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MECHANISMS = ("PLAIN", *SCRAM_HASHES)


# --- primitive encodings (big-endian) -----------------------------------------------------------


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    """STRING / NULLABLE_STRING: int16 length (-1 = null) then UTF-8."""
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def array(items: list[bytes] | None) -> bytes:
    """ARRAY: int32 count (-1 = null) then the items."""
    return i32(-1) if items is None else i32(len(items)) + b"".join(items)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_bytes(b: bytes | None) -> bytes:
    """COMPACT_(NULLABLE_)BYTES / STRING: uvarint length+1 (0 = null) then the bytes."""
    return uvarint(0) if b is None else uvarint(len(b) + 1) + b


NO_TAGS = uvarint(0)  # an empty tagged-fields section


class Reader:
    """Reads the primitive types off a request body."""

    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated request")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i8(self) -> int:
        return self.take(1)[0]

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        v = shift = 0
        while True:
            b = self.i8()
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7

    def string(self) -> str | None:
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n < 0 else self.take(n)

    def compact_bytes(self) -> bytes | None:
        n = self.uvarint()
        return None if n == 0 else self.take(n - 1)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


# --- SASL mechanisms (server side) ---------------------------------------------------------------


class AuthFailed(Exception):
    pass


@dataclass
class Auth:
    """One authentication attempt as the broker saw it."""

    conn: int
    mechanism: str
    handshake_version: int
    user: str | None = None
    ok: bool = False
    client_proof: str | None = None  # SCRAM: the p= value (base64 text) of client-final
    server_signature: str | None = None  # SCRAM: the v= value (base64 text) of server-final
    tokens: list[tuple[str, bytes]] = field(default_factory=list)  # ("c2s" | "s2c", SASL token)


class Plain:
    """PLAIN: one token `authzid NUL authcid NUL passwd`; the answer is an empty token."""

    def __init__(self, users: dict[str, str], auth: Auth):
        self.users, self.auth, self.done = users, auth, False

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthFailed("Invalid PLAIN token")
        authzid, user, password = (p.decode() for p in parts)
        self.auth.user = user
        if authzid not in ("", user) or self.users.get(user) != password:
            raise AuthFailed("Invalid username or password")
        self.done = True
        return b""


class Scram:
    """SCRAM-SHA-256/512 (RFC 5802), two rounds:

    client-first  "n,[a=authzid],n=<user>,r=<cnonce>[,ext]"   (gs2 header, then client-first-bare)
    server-first  "r=<cnonce><snonce>,s=<base64 salt>,i=<iterations>"
    client-final  "c=<base64 gs2 header>,r=<nonce>,p=<base64 ClientProof>"
    server-final  "v=<base64 ServerSignature>"
    """

    def __init__(self, users: dict[str, str], auth: Auth, iterations: int = 4096):
        self.users, self.auth, self.iterations = users, auth, iterations
        self.h = SCRAM_HASHES[auth.mechanism]
        self.round, self.done = 0, False

    def hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self.h).digest()

    def step(self, token: bytes) -> bytes:
        msg = token.decode()
        if self.round == 0:
            return self.first(msg)
        if self.round == 1:
            return self.final(msg)
        raise AuthFailed("Unexpected SCRAM message")

    def first(self, msg: str) -> bytes:
        try:
            cbind, _authzid, bare = msg.split(",", 2)
            attrs = dict(a.split("=", 1) for a in bare.split(","))
            user, cnonce = attrs["n"], attrs["r"]
        except (ValueError, KeyError) as e:
            raise AuthFailed("Invalid SCRAM client-first message") from e
        if cbind not in ("n", "y"):
            raise AuthFailed("Channel binding not supported")
        user = user.replace("=2C", ",").replace("=3D", "=")
        self.auth.user, self.gs2 = user, msg[: len(msg) - len(bare)]
        self.bare, self.nonce = bare, cnonce + base64.b64encode(os.urandom(18)).decode()
        self.salt = hashlib.sha256(b"salt:" + user.encode()).digest()[:16]  # fixed per user
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
        self.round = 1
        return self.server_first.encode()

    def final(self, msg: str) -> bytes:
        without_proof, sep, proof_b64 = msg.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        self.auth.client_proof = proof_b64
        if not sep or attrs.get("r") != self.nonce:
            raise AuthFailed("Invalid SCRAM client-final message")
        if base64.b64decode(attrs.get("c", "")) != self.gs2.encode():
            raise AuthFailed("Invalid channel binding")
        password = self.users.get(self.auth.user or "")
        if password is None:
            raise AuthFailed("Invalid username or password")
        salted = hashlib.pbkdf2_hmac(self.h().name, password.encode(), self.salt, self.iterations)
        auth_message = f"{self.bare},{self.server_first},{without_proof}".encode()
        stored_key = self.h(self.hmac(salted, b"Client Key")).digest()
        client_signature = self.hmac(stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof_b64), client_signature, strict=False))
        if len(client_key) != len(stored_key) or self.h(client_key).digest() != stored_key:
            raise AuthFailed("Invalid username or password")
        signature = self.hmac(self.hmac(salted, b"Server Key"), auth_message)
        self.auth.server_signature = base64.b64encode(signature).decode()
        self.round, self.done = 2, True
        return f"v={self.auth.server_signature}".encode()


# --- the broker ---------------------------------------------------------------------------------


class Conn:
    """Per-connection state."""

    def __init__(self, cid: int, sock: socket.socket):
        self.id, self.sock = cid, sock
        self.buf = b""
        self.mechanism: Plain | Scram | None = None  # after SaslHandshake
        self.raw_sasl = False  # SaslHandshake v0 done: raw tokens follow
        self.authenticated = False

    def read_frame(self) -> bytes | None:
        """One size-delimited frame (int32 size, then size bytes), or None at end of stream."""
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack(">i", self.buf[:4])
                if len(self.buf) >= 4 + size:
                    frame, self.buf = self.buf[4 : 4 + size], self.buf[4 + size :]
                    return frame
            data = self.sock.recv(65536)
            if not data:
                return None
            self.buf += data

    def send(self, body: bytes) -> None:
        self.sock.sendall(i32(len(body)) + body)


class SaslBroker:
    def __init__(
        self,
        users: dict[str, str],
        mechanisms: tuple[str, ...] = MECHANISMS,
        topics: tuple[str, ...] = ("events",),
        handshake_max: int = 1,
        sasl_authenticate_max: int = 1,
        metadata_max: int = 1,
        iterations: int = 4096,
        node_id: int = 1,
    ):
        self.users, self.mechanisms, self.topics = users, mechanisms, list(topics)
        self.iterations, self.node_id = iterations, node_id
        # api key -> (min, max) advertised in ApiVersions
        self.api_versions = {
            API_METADATA: (0, metadata_max),
            API_SASL_HANDSHAKE: (0, handshake_max),
            API_API_VERSIONS: (0, 2),
            API_SASL_AUTHENTICATE: (0, sasl_authenticate_max),
        }
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = "127.0.0.1", self.listener.getsockname()[1]
        self.advertised_port = self.port
        self.auths: list[Auth] = []
        self.requests: list[tuple[int, int, int]] = []  # (conn, api key, api version) received
        self.errors: list[str] = []  # why a connection was closed by the broker
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()

    def __enter__(self) -> SaslBroker:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        for s in list(self._socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(5)

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        n = 0
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks.append(sock)
            t = threading.Thread(target=self._serve, args=(Conn(n, sock),), daemon=True)
            t.start()
            self._threads.append(t)
            n += 1

    def _serve(self, conn: Conn) -> None:
        try:
            while not self._stop.is_set():
                frame = conn.read_frame()
                if frame is None:
                    break
                if conn.raw_sasl:
                    ok = self._raw_token(conn, frame)
                else:
                    ok = self._request(conn, frame)
                if not ok:
                    break
        except (OSError, ValueError) as e:
            self.errors.append(f"conn {conn.id}: {e!r}")
        finally:
            conn.sock.close()

    # Request header: api_key int16, api_version int16, correlation_id int32, client_id
    # NULLABLE_STRING; in v2 (the request's flexible versions) then tagged fields.
    # Response header: correlation_id int32; in v1 (flexible responses) then tagged fields,
    # except ApiVersions, whose response header is always v0.
    def _request(self, conn: Conn, frame: bytes) -> bool:
        r = Reader(frame)
        key, version, corr = r.i16(), r.i16(), r.i32()
        r.string()  # client_id
        with self._lock:
            self.requests.append((conn.id, key, version))
        lo, hi = self.api_versions.get(key, (0, -1))
        if key == API_API_VERSIONS:
            if version > hi:  # KIP-511: answer in v0, listing only the ApiVersions range
                conn.send(i32(corr) + i16(UNSUPPORTED_VERSION) + array([i16(key) + i16(lo) + i16(hi)]))
                return True
            conn.send(i32(corr) + self._api_versions_body(version, NONE))
            return True
        if not lo <= version <= hi:
            self.errors.append(f"conn {conn.id}: unsupported api {key} v{version}")
            return False
        flexible = key == API_SASL_AUTHENTICATE and version >= 2
        if flexible:
            r.skip_tags()
        if key == API_SASL_HANDSHAKE:
            return self._handshake(conn, r, corr, version)
        if key == API_SASL_AUTHENTICATE:
            return self._authenticate(conn, r, corr, version)
        if not conn.authenticated:
            self.errors.append(f"conn {conn.id}: api {key} before authentication")
            return False
        if key == API_METADATA:
            conn.send(i32(corr) + self._metadata(r, version))
            return True
        return False

    def _api_versions_body(self, version: int, error: int) -> bytes:
        """ErrorCode int16, ApiKeys [ApiKey int16, MinVersion int16, MaxVersion int16],
        ThrottleTimeMs int32 (v1+)."""
        keys = [i16(k) + i16(lo) + i16(hi) for k, (lo, hi) in sorted(self.api_versions.items())]
        return i16(error) + array(keys) + (i32(0) if version >= 1 else b"")

    def _handshake(self, conn: Conn, r: Reader, corr: int, version: int) -> bool:
        """Request: Mechanism STRING. Response: ErrorCode int16, Mechanisms [STRING]."""
        mechanism = r.string() or ""
        ok = mechanism in self.mechanisms and not conn.authenticated and conn.mechanism is None
        error = (
            NONE
            if ok
            else UNSUPPORTED_SASL_MECHANISM
            if mechanism not in self.mechanisms
            else ILLEGAL_SASL_STATE
        )
        conn.send(i32(corr) + i16(error) + array([string(m) for m in self.mechanisms]))
        if not ok:
            return False
        auth = Auth(conn.id, mechanism, version)
        with self._lock:
            self.auths.append(auth)
        conn.mechanism = (
            Scram(self.users, auth, self.iterations) if mechanism in SCRAM_HASHES else Plain(self.users, auth)
        )
        conn.raw_sasl = version == 0
        return True

    def _step(self, conn: Conn, token: bytes) -> tuple[bytes | None, str | None]:
        """Run one SASL round: (answer token, None) or (None, error message)."""
        mech = conn.mechanism
        assert mech is not None
        mech.auth.tokens.append(("c2s", token))
        try:
            answer = mech.step(token)
        except (AuthFailed, ValueError, UnicodeDecodeError) as e:
            return None, f"Authentication failed: {e}" if isinstance(
                e, AuthFailed
            ) else "Authentication failed"
        mech.auth.tokens.append(("s2c", answer))
        if mech.done:
            mech.auth.ok = conn.authenticated = True
            conn.mechanism = None
        return answer, None

    def _raw_token(self, conn: Conn, token: bytes) -> bool:
        """After SaslHandshake v0: int32 size + token each way, no Kafka header; failure closes."""
        answer, error = self._step(conn, token)
        if answer is None:
            self.errors.append(f"conn {conn.id}: {error}")
            return False
        conn.send(answer)
        conn.raw_sasl = not conn.authenticated
        return True

    def _authenticate(self, conn: Conn, r: Reader, corr: int, version: int) -> bool:
        """Request: AuthBytes BYTES (v2: COMPACT_BYTES, then tagged fields).
        Response: ErrorCode int16, ErrorMessage NULLABLE_STRING, AuthBytes BYTES,
        SessionLifetimeMs int64 (v1+); v2 uses compact encodings and tagged fields."""
        if conn.mechanism is None or conn.raw_sasl:
            self.errors.append(f"conn {conn.id}: SaslAuthenticate without handshake")
            return False
        token = (r.compact_bytes() if version >= 2 else r.bytes_()) or b""
        answer, error = self._step(conn, token)
        code = NONE if error is None else SASL_AUTHENTICATION_FAILED
        if version >= 2:
            msg = None if error is None else error.encode()
            body = i16(code) + compact_bytes(msg) + compact_bytes(answer or b"") + i64(0) + NO_TAGS
            conn.send(i32(corr) + NO_TAGS + body)
        else:
            body = i16(code) + string(error) + i32(len(answer or b"")) + (answer or b"")
            conn.send(i32(corr) + body + (i64(0) if version >= 1 else b""))
        if error is not None:
            self.errors.append(f"conn {conn.id}: {error}")
        return error is None

    def _metadata(self, r: Reader, version: int) -> bytes:
        """Request: Topics [Name STRING] (v1+: null = all topics; v0: empty = all),
        AllowAutoTopicCreation bool (v4+).
        Response: ThrottleTimeMs int32 (v3+), Brokers [NodeId int32, Host STRING, Port int32,
        Rack NULLABLE_STRING (v1+)], ClusterId NULLABLE_STRING (v2+), ControllerId int32 (v1+),
        Topics [ErrorCode int16, Name STRING, IsInternal bool (v1+), Partitions [ErrorCode int16,
        PartitionIndex int32, LeaderId int32, ReplicaNodes [int32], IsrNodes [int32]]]."""
        n = r.i32()
        asked = None if n < 0 else [r.string() or "" for _ in range(n)]
        if version == 0 and not asked:
            asked = None
        with self._lock:
            for t in asked or []:
                if t not in self.topics:
                    self.topics.append(t)
            names = list(self.topics) if asked is None else asked
        me = i32(self.node_id)
        broker = me + string(self.host) + i32(self.advertised_port) + (string(None) if version >= 1 else b"")
        out = i32(0) if version >= 3 else b""
        out += array([broker])
        out += string("brokerscope-sasl-test") if version >= 2 else b""
        out += me if version >= 1 else b""
        partition = i16(NONE) + i32(0) + me + array([me]) + array([me])
        topics = [
            i16(NONE) + string(t) + (b"\0" if version >= 1 else b"") + array([partition]) for t in names
        ]
        return out + array(topics)
