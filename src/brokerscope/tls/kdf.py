"""Key derivation: the TLS 1.2 PRF and key block (RFC 5246 5, 6.3) and TLS 1.3's
HKDF-Expand-Label, traffic keys and KeyUpdate (RFC 8446 7.1-7.3).

Everything here returns plain bytes; callers keep them inside objects whose repr hides them.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass

from .suites import TLS13_IV_LEN, Suite

KEY_EXPANSION = b"key expansion"
TLS13_LABEL_PREFIX = b"tls13 "
# HkdfLabel (RFC 8446 7.1): uint16 length; opaque label<7..255>; opaque context<0..255>
HKDF_LABEL_HEAD = struct.Struct("!HB")


def p_hash(hash_name: str, secret: bytes, seed: bytes, n: int) -> bytes:
    """P_hash (RFC 5246 5): HMAC(secret, A(i) + seed) for A(i) = HMAC(secret, A(i-1)), A(0) = seed."""
    out = bytearray()
    a = seed
    while len(out) < n:
        a = hmac.digest(secret, a, hash_name)
        out += hmac.digest(secret, a + seed, hash_name)
    return bytes(out[:n])


def prf12(hash_name: str, secret: bytes, label: bytes, seed: bytes, n: int) -> bytes:
    """The TLS 1.2 PRF: P_<hash>(secret, label + seed)."""
    return p_hash(hash_name, secret, label + seed, n)


@dataclass(frozen=True, slots=True, repr=False)
class KeyBlock:
    """One connection's TLS 1.2 write keys (RFC 5246 6.3), client and server."""

    client_mac: bytes
    server_mac: bytes
    client_key: bytes
    server_key: bytes
    client_iv: bytes
    server_iv: bytes

    def __repr__(self) -> str:
        return "<KeyBlock, secrets hidden>"

    __str__ = __repr__


def key_block(suite: Suite, master: bytes, client_random: bytes, server_random: bytes) -> KeyBlock:
    """key_block = PRF(master_secret, "key expansion", server_random + client_random), cut into
    MAC keys, write keys and IVs, client's first."""
    m, k, v = suite.mac_len, suite.bulk.key_len, suite.bulk.fixed_iv_len
    kb = prf12(suite.prf, master, KEY_EXPANSION, server_random + client_random, 2 * (m + k + v))
    parts = []
    at = 0
    for size in (m, m, k, k, v, v):
        parts.append(kb[at : at + size])
        at += size
    return KeyBlock(*parts)


def hkdf_expand(hash_name: str, prk: bytes, info: bytes, n: int) -> bytes:
    """HKDF-Expand (RFC 5869 2.3)."""
    out = bytearray()
    t = b""
    i = 1
    while len(out) < n:
        t = hmac.digest(prk, t + info + bytes((i,)), hash_name)
        out += t
        i += 1
    return bytes(out[:n])


def hkdf_expand_label(hash_name: str, secret: bytes, label: bytes, context: bytes, n: int) -> bytes:
    """HKDF-Expand-Label (RFC 8446 7.1)."""
    full = TLS13_LABEL_PREFIX + label
    info = HKDF_LABEL_HEAD.pack(n, len(full)) + full + bytes((len(context),)) + context
    return hkdf_expand(hash_name, secret, info, n)


def traffic_keys(suite: Suite, secret: bytes) -> tuple[bytes, bytes]:
    """(write key, write iv) of a TLS 1.3 traffic secret (RFC 8446 7.3)."""
    key = hkdf_expand_label(suite.prf, secret, b"key", b"", suite.bulk.key_len)
    iv = hkdf_expand_label(suite.prf, secret, b"iv", b"", TLS13_IV_LEN)
    return key, iv


def next_secret(suite: Suite, secret: bytes) -> bytes:
    """application_traffic_secret_N+1 after a KeyUpdate (RFC 8446 7.2)."""
    return hkdf_expand_label(suite.prf, secret, b"traffic upd", b"", hashlib.new(suite.prf).digest_size)
