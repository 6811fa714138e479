"""Real TLS connections in memory: Python's `ssl` (OpenSSL) on both ends, no sockets.

A client and a server SSLObject talk through memory BIOs; every byte each one writes is kept in
order as the connection's transcript, `[("c2s" | "s2c", bytes), ...]`, which is exactly the TCP
byte stream of each direction (each item is one flight, as one send would give it), and the
stack itself writes the NSS key log (`SSLContext.keylog_filename`).

    conn = run(tmp_path, version="1.3", suite="TLS_CHACHA20_POLY1305_SHA256",
               exchange=[("c2s", b"ping"), ("s2c", b"pong")])
    conn.transcript, conn.keylog (path), conn.sent  # {"c2s": b"ping", "s2c": b"pong"}

Three things Python's ssl module does not offer are reached through OpenSSL's own functions
(ctypes, on the objects' pointers after checking the layout): the TLS 1.3 cipher suite
(SSL_CTX_set_ciphersuites), the key exchange groups (SSL_CTX_set1_groups_list, for a
HelloRetryRequest) and KeyUpdate (SSL_key_update). `openssl_hooks()` says whether they
work here.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import datetime
import functools
import ipaddress
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HOST = "broker.test"
LOOPBACK = "127.0.0.1"
OP_NO_ENCRYPT_THEN_MAC = 1 << 19  # SSL_OP_NO_ENCRYPT_THEN_MAC (OpenSSL 1.1.1+)
SSL_KEY_UPDATE_NOT_REQUESTED, SSL_KEY_UPDATE_REQUESTED = 0, 1
KEY_UPDATE = ("key_update", None)  # an exchange step: the client sends a KeyUpdate (requested)


@functools.cache
def certificate(kind: str = "rsa") -> str:
    """A self-signed certificate and key for HOST (PEM file, made once per process: the
    certificate, then the key; a client's CA file may be the same file): RSA 2048,
    or with kind "ec" ECDSA P-256 (for the ECDHE-ECDSA suites of TLS 1.2)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    if kind == "ec":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(  # and 127.0.0.1: clients that verify it connect to a loopback proxy
            x509.SubjectAlternativeName([x509.DNSName(HOST), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    folder = tempfile.mkdtemp(prefix="brokerscope-tls-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / f"server-{kind}.pem"
    path.write_bytes(
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)
    return str(path)


# -- OpenSSL functions Python's ssl does not expose ---------------------------------------------
def _pointer_at(obj, offset: int) -> int | None:
    return ctypes.c_void_p.from_address(id(obj) + offset).value


# CPython's PySSLContext is {PyObject_HEAD; SSL_CTX *ctx; ...} and PySSLSocket is
# {PyObject_HEAD; PyObject *Socket; SSL *ssl; PySSLContext *ctx; ...}
_HEAD = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
_PTR = ctypes.sizeof(ctypes.c_void_p)


@functools.cache
def _libssl():
    name = ctypes.util.find_library("ssl")
    if not name:
        return None
    lib = ctypes.CDLL(name)
    lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    lib.SSL_CTX_get_options.restype = ctypes.c_uint64
    lib.SSL_key_update.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.SSL_get_SSL_CTX.argtypes = [ctypes.c_void_p]
    lib.SSL_get_SSL_CTX.restype = ctypes.c_void_p
    lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
    lib.SSL_CTX_ctrl.restype = ctypes.c_long
    return lib


def _ssl_ctx(ctx: ssl.SSLContext) -> int:
    lib = _libssl()
    ptr = _pointer_at(ctx, _HEAD)
    if lib is None or not ptr or lib.SSL_CTX_get_options(ptr) != int(ctx.options):
        raise RuntimeError("cannot reach OpenSSL's SSL_CTX from Python here")
    return ptr


def _ssl(obj: ssl.SSLObject) -> int:
    raw = obj._sslobj
    if _pointer_at(raw, _HEAD + 2 * _PTR) != id(obj.context):
        raise RuntimeError("cannot reach OpenSSL's SSL from Python here")
    ptr = _pointer_at(raw, _HEAD + _PTR)
    if _libssl().SSL_get_SSL_CTX(ptr) != _ssl_ctx(obj.context):
        raise RuntimeError("cannot reach OpenSSL's SSL from Python here")
    return ptr


def set_tls13_suites(ctx: ssl.SSLContext, suites: str) -> None:
    if _libssl().SSL_CTX_set_ciphersuites(_ssl_ctx(ctx), suites.encode()) != 1:
        raise ValueError(f"OpenSSL refused TLS 1.3 suites {suites}")


SSL_CTRL_SET_GROUPS_LIST = 92  # SSL_CTX_set1_groups_list is a macro over SSL_CTX_ctrl


def set_groups(ctx: ssl.SSLContext, groups: str) -> None:
    """The key exchange groups, e.g. a server on "P-256" makes a client whose first key share
    is X25519 (OpenSSL's default) go through a HelloRetryRequest."""
    if (
        _libssl().SSL_CTX_ctrl(_ssl_ctx(ctx), SSL_CTRL_SET_GROUPS_LIST, 0, ctypes.c_char_p(groups.encode()))
        != 1
    ):
        raise ValueError(f"OpenSSL refused groups {groups}")


def key_update(obj: ssl.SSLObject, requested: bool = True) -> None:
    kind = SSL_KEY_UPDATE_REQUESTED if requested else SSL_KEY_UPDATE_NOT_REQUESTED
    if _libssl().SSL_key_update(_ssl(obj), kind) != 1:
        raise RuntimeError("SSL_key_update failed")


@functools.cache
def openssl_hooks() -> str | None:
    """None when the TLS 1.3 suite and KeyUpdate hooks work here, else why not."""
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        set_tls13_suites(ctx, "TLS_AES_128_GCM_SHA256")
        obj = ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname=HOST)
        _ssl(obj)
    except (RuntimeError, ValueError, OSError, AttributeError) as e:
        return str(e)
    return None


# -- one connection ------------------------------------------------------------------------------
@dataclass
class Conn:
    transcript: list[tuple[str, bytes]]
    keylog: str
    sent: dict[str, bytes]
    version: str
    cipher: str
    session: ssl.SSLSession | None = None
    contexts: tuple[ssl.SSLContext, ssl.SSLContext] | None = field(default=None, repr=False)

    def stream(self, direction: str) -> bytes:
        return b"".join(b for d, b in self.transcript if d == direction)


def contexts(
    version: str,
    ciphers: str | None,
    suite: str | None,
    etm: bool,
    keylog: str,
    alpn: list[str],
    cert: str = "rsa",
) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    v = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
    srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    srv.load_cert_chain(certificate(cert))
    cli = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cli.check_hostname = False
    cli.verify_mode = ssl.CERT_NONE
    for c in (srv, cli):
        c.minimum_version = c.maximum_version = v
        if ciphers:
            c.set_ciphers(ciphers)
        if suite:
            set_tls13_suites(c, suite)
        if not etm:
            c.options |= OP_NO_ENCRYPT_THEN_MAC
    srv.set_alpn_protocols(alpn[-1:])
    cli.set_alpn_protocols(alpn)
    cli.keylog_filename = keylog
    return cli, srv


def run(
    tmp: Path | str,
    version: str = "1.3",
    ciphers: str | None = None,
    suite: str | None = None,
    exchange: list[tuple[str, bytes | None]] = (),
    etm: bool = True,
    alpn: list[str] = ("h2", "kafka"),
    session: ssl.SSLSession | None = None,
    keylog: str | None = None,
    contexts_: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
    cert: str = "rsa",
) -> Conn:
    """One connection: handshake, then `exchange` (("c2s" | "s2c", data) writes, and
    KEY_UPDATE steps), then close_notify from the client. Pass `session` (and the same
    `contexts_`) to resume an earlier connection's session; `cert` "ec" for an ECDSA server."""
    if contexts_ is not None:
        keylog = contexts_[0].keylog_filename
    keylog = keylog or str(Path(tmp) / "keys.log")
    cli_ctx, srv_ctx = contexts_ or contexts(version, ciphers, suite, etm, keylog, list(alpn), cert)
    bios = {n: ssl.MemoryBIO() for n in ("c_in", "c_out", "s_in", "s_out")}
    c = cli_ctx.wrap_bio(bios["c_in"], bios["c_out"], server_hostname=HOST, session=session)
    s = srv_ctx.wrap_bio(bios["s_in"], bios["s_out"], server_side=True)
    transcript: list[tuple[str, bytes]] = []
    got = {"c2s": bytearray(), "s2c": bytearray()}

    def pump() -> None:
        for _ in range(8):
            moved = False
            for src, dst, d in (("c_out", "s_in", "c2s"), ("s_out", "c_in", "s2c")):
                data = bios[src].read()
                if data:
                    transcript.append((d, data))
                    bios[dst].write(data)
                    moved = True
            for obj, d in ((s, "c2s"), (c, "s2c")):
                while True:
                    try:
                        chunk = obj.read(1 << 20)
                    except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                        break
                    if not chunk:
                        break
                    got[d] += chunk
            if not moved:
                return

    for _ in range(10):
        done = True
        for obj in (c, s):
            try:
                obj.do_handshake()
            except ssl.SSLWantReadError:
                done = False
        pump()
        if done:
            break
    sent = {"c2s": bytearray(), "s2c": bytearray()}
    for d, data in exchange:
        if (d, data) == KEY_UPDATE:
            key_update(c, requested=True)
            c.do_handshake()  # sends the KeyUpdate now (SSL_key_update only schedules it)
            pump()
            continue
        (c if d == "c2s" else s).write(data)
        sent[d] += data
        pump()
    try:
        c.unwrap()
    except ssl.SSLWantReadError:
        pass
    pump()
    assert bytes(got["c2s"]) == bytes(sent["c2s"]) and bytes(got["s2c"]) == bytes(sent["s2c"])
    return Conn(
        transcript,
        keylog,
        {k: bytes(v) for k, v in sent.items()},
        c.version(),
        c.cipher()[0],
        c.session,
        (cli_ctx, srv_ctx),
    )
