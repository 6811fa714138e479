"""Handshake messages: framing within handshake records, and the fields brokerscope reads from
ClientHello, ServerHello and EncryptedExtensions (RFC 5246 7.4, RFC 8446 4).

    Handshake:    HandshakeType msg_type (1) | uint24 length | body[length]
    ClientHello:  legacy_version (2) | random (32) | session_id<0..32> | cipher_suites<2..2^16-2>
                  | compression_methods<1..2^8-1> | extensions<0..2^16-1>
    ServerHello:  legacy_version (2) | random (32) | session_id<0..32> | cipher_suite (2)
                  | compression_method (1) | extensions<0..2^16-1>
    EncryptedExtensions:  extensions<0..2^16-1>
    Extension:    ExtensionType (2) | extension_data<0..2^16-1>
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

# HandshakeType (RFC 8446 4, RFC 5246 7.4)
CLIENT_HELLO = 1
SERVER_HELLO = 2
NEW_SESSION_TICKET = 4
END_OF_EARLY_DATA = 5
ENCRYPTED_EXTENSIONS = 8
CERTIFICATE = 11
SERVER_KEY_EXCHANGE = 12
CERTIFICATE_REQUEST = 13
SERVER_HELLO_DONE = 14
CERTIFICATE_VERIFY = 15
CLIENT_KEY_EXCHANGE = 16
FINISHED = 20
KEY_UPDATE = 24

# ExtensionType (IANA TLS ExtensionType Values)
EXT_SERVER_NAME = 0
EXT_ALPN = 16
EXT_ENCRYPT_THEN_MAC = 22
EXT_EXTENDED_MASTER_SECRET = 23
EXT_SESSION_TICKET = 35
EXT_PRE_SHARED_KEY = 41
EXT_EARLY_DATA = 42
EXT_SUPPORTED_VERSIONS = 43

SNI_HOST_NAME = 0  # NameType host_name

# ProtocolVersion
SSL3, TLS10, TLS11, TLS12, TLS13 = 0x0300, 0x0301, 0x0302, 0x0303, 0x0304
VERSIONS = {SSL3: "SSL 3.0", TLS10: "TLS 1.0", TLS11: "TLS 1.1", TLS12: "TLS 1.2", TLS13: "TLS 1.3"}

# ServerHello.random of a HelloRetryRequest: SHA-256("HelloRetryRequest") (RFC 8446 4.1.3)
HELLO_RETRY_RANDOM = bytes.fromhex("cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")

HEADER_LEN = 4  # msg_type + uint24 length
RANDOM_LEN = 32
# messages brokerscope reads are small; larger ones (certificate chains) are passed over unread
MAX_READ = 1 << 16
U16 = struct.Struct("!H")


def version_name(v: int | None) -> str | None:
    if v is None:
        return None
    return VERSIONS.get(v, f"0x{v:04X}")


class HandshakeError(Exception):
    """A handshake message that does not parse (its reason)."""


class Reader:
    """Bounds-checked reads over one message body."""

    __slots__ = ("b", "i", "end")

    def __init__(self, b: bytes, i: int = 0, end: int | None = None):
        self.b, self.i, self.end = b, i, len(b) if end is None else end

    def take(self, n: int) -> bytes:
        if self.i + n > self.end:
            raise HandshakeError("message ends inside a field")
        v = self.b[self.i : self.i + n]
        self.i += n
        return v

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return U16.unpack(self.take(2))[0]

    def vec(self, len_bytes: int) -> bytes:
        return self.take(int.from_bytes(self.take(len_bytes), "big"))

    def sub(self, len_bytes: int) -> Reader:
        v = self.vec(len_bytes)
        return Reader(v)

    def more(self) -> bool:
        return self.i < self.end


def extensions(r: Reader) -> dict[int, bytes]:
    """extensions<0..2^16-1> (absent at the end of a TLS 1.2 hello: empty)."""
    if not r.more():
        return {}
    ext = r.sub(2)
    out = {}
    while ext.more():
        t = ext.u16()
        out[t] = ext.vec(2)
    return out


def _alpn(data: bytes) -> list[str]:
    r = Reader(data).sub(2)  # ProtocolName protocol_name_list<2..2^16-1>
    names = []
    while r.more():
        names.append(r.vec(1).decode("ascii", "replace"))
    return names


def _sni(data: bytes) -> str | None:
    r = Reader(data).sub(2)  # ServerName server_name_list<1..2^16-1>
    while r.more():
        kind = r.u8()
        name = r.vec(2)
        if kind == SNI_HOST_NAME:
            return name.decode("ascii", "replace")
    return None


@dataclass(slots=True)
class ClientHello:
    random: bytes
    session_id: bytes
    cipher_suites: list[int]
    sni: str | None = None
    alpn: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # supported_versions, empty if not sent
    psk: bool = False  # pre_shared_key offered (TLS 1.3 resumption)
    ticket: bool = False  # a non-empty SessionTicket (TLS 1.2 resumption, RFC 5077)
    early_data: bool = False
    encrypt_then_mac: bool = False
    extended_master_secret: bool = False


@dataclass(slots=True)
class ServerHello:
    random: bytes
    session_id: bytes
    cipher_suite: int
    legacy_version: int
    version: int  # negotiated: supported_versions when present (TLS 1.3), else legacy_version
    alpn: str | None = None
    psk: bool = False  # the server selected a pre-shared key (TLS 1.3 resumption)
    encrypt_then_mac: bool = False
    extended_master_secret: bool = False

    @property
    def retry(self) -> bool:
        """A HelloRetryRequest, not a ServerHello."""
        return self.random == HELLO_RETRY_RANDOM


def client_hello(body: bytes) -> ClientHello:
    r = Reader(body)
    r.u16()  # legacy_version
    random = r.take(RANDOM_LEN)
    session_id = r.vec(1)
    suites_r = r.sub(2)
    suites = [suites_r.u16() for _ in range(len(suites_r.b) // 2)]
    r.vec(1)  # compression_methods
    ext = extensions(r)
    ch = ClientHello(random, session_id, suites)
    if EXT_SERVER_NAME in ext:
        ch.sni = _sni(ext[EXT_SERVER_NAME])
    if EXT_ALPN in ext:
        ch.alpn = _alpn(ext[EXT_ALPN])
    if EXT_SUPPORTED_VERSIONS in ext:
        vr = Reader(ext[EXT_SUPPORTED_VERSIONS]).sub(1)  # ProtocolVersion versions<2..254>
        ch.versions = [vr.u16() for _ in range(len(vr.b) // 2)]
    ch.psk = EXT_PRE_SHARED_KEY in ext
    ch.ticket = bool(ext.get(EXT_SESSION_TICKET))
    ch.early_data = EXT_EARLY_DATA in ext
    ch.encrypt_then_mac = EXT_ENCRYPT_THEN_MAC in ext
    ch.extended_master_secret = EXT_EXTENDED_MASTER_SECRET in ext
    return ch


def server_hello(body: bytes) -> ServerHello:
    r = Reader(body)
    legacy = r.u16()
    random = r.take(RANDOM_LEN)
    session_id = r.vec(1)
    suite = r.u16()
    r.u8()  # compression_method
    ext = extensions(r)
    version = legacy
    if EXT_SUPPORTED_VERSIONS in ext:
        version = Reader(ext[EXT_SUPPORTED_VERSIONS]).u16()  # selected_version
    sh = ServerHello(random, session_id, suite, legacy, version)
    if EXT_ALPN in ext:  # TLS 1.2 (in TLS 1.3 it is in EncryptedExtensions)
        names = _alpn(ext[EXT_ALPN])
        sh.alpn = names[0] if names else None
    sh.psk = EXT_PRE_SHARED_KEY in ext
    sh.encrypt_then_mac = EXT_ENCRYPT_THEN_MAC in ext
    sh.extended_master_secret = EXT_EXTENDED_MASTER_SECRET in ext
    return sh


def encrypted_extensions(body: bytes) -> str | None:
    """The ALPN protocol the server chose, from EncryptedExtensions (TLS 1.3)."""
    ext = extensions(Reader(body))
    if EXT_ALPN in ext:
        names = _alpn(ext[EXT_ALPN])
        return names[0] if names else None
    return None


class Messages:
    """Handshake messages of one direction and key epoch, from the records' fragments: a message
    may span records and a record may hold several. Yields (msg_type, body, length); the body is
    None for a message longer than MAX_READ, which is passed over unread."""

    __slots__ = ("buf", "skip")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.skip = 0  # bytes left of a message passed over

    def feed(self, data: bytes) -> list[tuple[int, bytes | None, int]]:
        out = []
        if self.skip:
            n = min(self.skip, len(data))
            self.skip -= n
            data = data[n:]
        self.buf += data
        buf = self.buf
        pos = 0
        while len(buf) - pos >= HEADER_LEN:
            t = buf[pos]
            length = int.from_bytes(buf[pos + 1 : pos + 4], "big")
            if length > MAX_READ:
                have = len(buf) - pos - HEADER_LEN
                out.append((t, None, length))
                self.skip = max(0, length - have)
                pos = len(buf) if self.skip else pos + HEADER_LEN + length
                continue
            if len(buf) - pos - HEADER_LEN < length:
                break
            out.append((t, bytes(buf[pos + HEADER_LEN : pos + HEADER_LEN + length]), length))
            pos += HEADER_LEN + length
        del buf[:pos]
        return out

    def reset(self) -> None:
        self.buf.clear()
        self.skip = 0
