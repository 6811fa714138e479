"""Record protection: opening one direction's protected records with its keys (`cryptography`).

    TLS 1.2 AES-GCM (RFC 5288 3)      body = explicit_nonce(8) || ciphertext || tag(16)
                                      nonce = salt(4, key block) || explicit_nonce
    TLS 1.2 ChaCha20 (RFC 7905 2)     body = ciphertext || tag(16); nonce = iv(12) XOR seq
    TLS 1.2 AAD (RFC 5246 6.2.3.3)    seq(8) || type(1) || version(2) || plaintext length(2)
    TLS 1.3 (RFC 8446 5.2, 5.3)       body = ciphertext || tag(16); nonce = iv(12) XOR seq;
                                      AAD = the record header; plaintext = content || type || zeros
    TLS 1.2 AES-CBC, MAC-then-encrypt body = IV(16) || E(content || MAC || padding || padding_len)
      (RFC 5246 6.2.3.2)              MAC = HMAC(seq || type || version || length(2) || content)
    TLS 1.2 AES-CBC, encrypt-then-MAC body = IV(16) || E(content || padding || padding_len) || MAC
      (RFC 7366 3)                    MAC = HMAC(seq || type || version || length(2) || IV || E(...))

`open(seq, ctype, version, body)` returns (content type, plaintext) or raises `BadRecord` with a
reason; the keys stay inside and no repr shows them.
"""

from __future__ import annotations

import hmac
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from .suites import AEAD, GCM, MACS, Suite

SEQ = struct.Struct("!Q")
# the MAC/AAD pseudo-header: seq_num(8) type(1) version(2) length(2)
PSEUDO_HEADER = struct.Struct("!QBHH")
RECORD_HEADER = struct.Struct("!BHH")  # type(1) version(2) length(2)
AES_BLOCK = 16
TAG_LEN = 16


class BadRecord(Exception):
    """A record that does not open: its reason (never key or record bytes)."""


class Opener:
    """Opens the protected records of one direction in one key epoch."""

    tls13 = False
    explicit_nonce = False  # TLS 1.2 GCM: the sender's nonce is on the wire (often the seq number)

    def __init__(self, suite: Suite):
        self.suite = suite

    def open(self, seq: int, ctype: int, version: int, body: bytes) -> tuple[int, bytes]:
        raise NotImplementedError

    def overhead(self) -> int:
        """Bytes of a record body that are not plaintext (padding aside)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.suite.name}, keys hidden>"

    __str__ = __repr__


def _aead(suite: Suite, key: bytes):
    return AESGCM(key) if suite.bulk.algorithm == GCM else ChaCha20Poly1305(key)


class Aead12(Opener):
    """TLS 1.2 AES-GCM and ChaCha20-Poly1305."""

    def __init__(self, suite: Suite, key: bytes, iv: bytes):
        super().__init__(suite)
        self._aead = _aead(suite, key)
        self._gcm = suite.bulk.algorithm == GCM
        self.explicit_nonce = self._gcm
        self._salt = iv  # GCM: 4-byte salt; ChaCha20: 12-byte iv
        self._iv = int.from_bytes(iv, "big")

    def overhead(self) -> int:
        return self.suite.bulk.record_iv_len + TAG_LEN

    def open(self, seq: int, ctype: int, version: int, body: bytes) -> tuple[int, bytes]:
        if self._gcm:
            if len(body) < 8 + TAG_LEN:
                raise BadRecord("record shorter than its nonce and tag")
            nonce, ct = self._salt + body[:8], body[8:]
        else:
            if len(body) < TAG_LEN:
                raise BadRecord("record shorter than its tag")
            nonce, ct = (self._iv ^ seq).to_bytes(12, "big"), body
        aad = PSEUDO_HEADER.pack(seq, ctype, version, len(ct) - TAG_LEN)
        try:
            return ctype, self._aead.decrypt(nonce, ct, aad)
        except InvalidTag:
            raise BadRecord("authentication failed (AEAD tag)") from None


class Aead13(Opener):
    """TLS 1.3 records (every 1.3 suite is AEAD)."""

    tls13 = True

    def __init__(self, suite: Suite, key: bytes, iv: bytes):
        super().__init__(suite)
        self._aead = _aead(suite, key)
        self._iv = int.from_bytes(iv, "big")

    def overhead(self) -> int:
        return TAG_LEN + 1  # the tag, and the inner content type byte

    def open(self, seq: int, ctype: int, version: int, body: bytes) -> tuple[int, bytes]:
        if len(body) < TAG_LEN + 1:
            raise BadRecord("record shorter than its tag")
        nonce = (self._iv ^ seq).to_bytes(12, "big")
        try:
            inner = self._aead.decrypt(nonce, body, RECORD_HEADER.pack(ctype, version, len(body)))
        except InvalidTag:
            raise BadRecord("authentication failed (AEAD tag)") from None
        # TLSInnerPlaintext: content || ContentType type || uint8 zeros[length_of_padding]
        end = len(inner.rstrip(b"\0"))
        if end == 0:
            raise BadRecord("no content type in the inner plaintext")
        return inner[end - 1], inner[: end - 1]


class Cbc12(Opener):
    """TLS 1.2 AES-CBC with HMAC, MAC-then-encrypt or (RFC 7366) encrypt-then-MAC."""

    def __init__(self, suite: Suite, key: bytes, mac_key: bytes, encrypt_then_mac: bool):
        super().__init__(suite)
        self._key = algorithms.AES(key)
        self._mac_key = mac_key
        self._hash, self._mac_len = MACS[suite.mac]
        self.encrypt_then_mac = encrypt_then_mac

    def overhead(self) -> int:
        return AES_BLOCK + self._mac_len + 1  # explicit IV, MAC, at least the padding length byte

    def _mac(self, seq: int, ctype: int, version: int, data: bytes) -> bytes:
        return hmac.digest(
            self._mac_key, PSEUDO_HEADER.pack(seq, ctype, version, len(data)) + data, self._hash
        )

    def _decrypt(self, iv: bytes, ct: bytes) -> bytes:
        d = Cipher(self._key, modes.CBC(iv)).decryptor()
        return d.update(ct) + d.finalize()

    def open(self, seq: int, ctype: int, version: int, body: bytes) -> tuple[int, bytes]:
        m = self._mac_len
        if self.encrypt_then_mac:
            enc, tag = body[:-m], body[-m:]
            if len(enc) < 2 * AES_BLOCK or len(enc) % AES_BLOCK:
                raise BadRecord("CBC record of a size no cipher text has")
            if not hmac.compare_digest(self._mac(seq, ctype, version, enc), tag):
                raise BadRecord("authentication failed (record MAC)")
            plain = self._decrypt(enc[:AES_BLOCK], enc[AES_BLOCK:])
            pad = plain[-1]
            if pad + 1 > len(plain) or plain[-pad - 1 :] != bytes((pad,)) * (pad + 1):
                raise BadRecord("bad CBC padding")
            return ctype, plain[: -pad - 1]
        if len(body) < 2 * AES_BLOCK or len(body) % AES_BLOCK:
            raise BadRecord("CBC record of a size no cipher text has")
        plain = self._decrypt(body[:AES_BLOCK], body[AES_BLOCK:])
        pad = plain[-1]
        if pad + 1 + m > len(plain) or plain[-pad - 1 :] != bytes((pad,)) * (pad + 1):
            raise BadRecord("bad CBC padding")  # reported as one with a MAC failure by a TLS stack
        content, tag = plain[: -pad - 1 - m], plain[-pad - 1 - m : -pad - 1]
        if not hmac.compare_digest(self._mac(seq, ctype, version, content), tag):
            raise BadRecord("authentication failed (record MAC)")
        return ctype, content


def opener12(suite: Suite, key: bytes, iv: bytes, mac_key: bytes, encrypt_then_mac: bool) -> Opener:
    if suite.bulk.kind == AEAD:
        return Aead12(suite, key, iv)
    return Cbc12(suite, key, mac_key, encrypt_then_mac)
