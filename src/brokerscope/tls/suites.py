"""Cipher suites brokerscope decrypts: IANA code -> name, bulk cipher, record MAC, PRF hash.

Codes and names from the IANA TLS Cipher Suites registry (RFC 5246, 5288, 5289, 7905, 8446).
Key-exchange algorithms do not matter here: the key log gives the master secret (TLS 1.2) or
the traffic secrets (TLS 1.3), so every key exchange of a supported bulk cipher is listed.
"""

from __future__ import annotations

from dataclasses import dataclass

# bulk ciphers: how a record is protected
AEAD = "aead"
CBC = "cbc"

GCM = "gcm"
CHACHA = "chacha20-poly1305"
AES_CBC = "aes-cbc"


@dataclass(frozen=True, slots=True)
class Bulk:
    """A bulk cipher's sizes (RFC 5246 6.3, RFC 5288 3, RFC 7905 2, RFC 8446 5.3)."""

    name: str
    kind: str  # AEAD or CBC
    algorithm: str  # GCM, CHACHA, AES_CBC
    key_len: int
    fixed_iv_len: int  # TLS 1.2 key block IV bytes (GCM: 4-byte salt; ChaCha20: 12; CBC: unused)
    record_iv_len: int  # explicit per-record bytes before the ciphertext (GCM 8, CBC block 16)
    tag_len: int  # AEAD tag, 0 for CBC (its MAC is the suite's)


#        name           kind  algorithm key fixed explicit tag
AES_128_GCM = Bulk("AES_128_GCM", AEAD, GCM, 16, 4, 8, 16)
AES_256_GCM = Bulk("AES_256_GCM", AEAD, GCM, 32, 4, 8, 16)
CHACHA20_POLY1305 = Bulk("CHACHA20_POLY1305", AEAD, CHACHA, 32, 12, 0, 16)
AES_128_CBC = Bulk("AES_128_CBC", CBC, AES_CBC, 16, 16, 16, 0)
AES_256_CBC = Bulk("AES_256_CBC", CBC, AES_CBC, 32, 16, 16, 0)

# record MACs of the CBC suites: name -> (hashlib name, MAC key and output length)
MACS = {"SHA": ("sha1", 20), "SHA256": ("sha256", 32), "SHA384": ("sha384", 48)}

TLS13_IV_LEN = 12  # RFC 8446 5.3: per-record nonce length, iv_length = max(8, N_MIN) = 12


@dataclass(frozen=True, slots=True)
class Suite:
    code: int
    name: str  # IANA name, as tshark prints it
    bulk: Bulk
    mac: str | None  # key of MACS for CBC suites, None for AEAD
    prf: str  # hashlib name of the TLS 1.2 PRF / TLS 1.3 HKDF hash
    tls13: bool = False

    @property
    def mac_len(self) -> int:
        return MACS[self.mac][1] if self.mac else 0


# code, IANA name, bulk cipher, MAC (CBC), PRF hash
_TABLE = [
    # TLS 1.3 (RFC 8446 B.4)
    (0x1301, "TLS_AES_128_GCM_SHA256", AES_128_GCM, None, "sha256"),
    (0x1302, "TLS_AES_256_GCM_SHA384", AES_256_GCM, None, "sha384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, None, "sha256"),
    # TLS 1.2 AES-GCM (RFC 5288, 5289)
    (0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256", AES_128_GCM, None, "sha256"),
    (0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384", AES_256_GCM, None, "sha384"),
    (0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", AES_128_GCM, None, "sha256"),
    (0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", AES_256_GCM, None, "sha384"),
    (0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", AES_128_GCM, None, "sha256"),
    (0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", AES_256_GCM, None, "sha384"),
    (0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", AES_128_GCM, None, "sha256"),
    (0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", AES_256_GCM, None, "sha384"),
    # TLS 1.2 ChaCha20-Poly1305 (RFC 7905)
    (0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, None, "sha256"),
    (0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, None, "sha256"),
    (0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", CHACHA20_POLY1305, None, "sha256"),
    # TLS 1.2 AES-CBC + HMAC (RFC 5246 A.5, RFC 4492, RFC 5289); the PRF is SHA-256 unless SHA-384
    (0x002F, "TLS_RSA_WITH_AES_128_CBC_SHA", AES_128_CBC, "SHA", "sha256"),
    (0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA", AES_256_CBC, "SHA", "sha256"),
    (0x003C, "TLS_RSA_WITH_AES_128_CBC_SHA256", AES_128_CBC, "SHA256", "sha256"),
    (0x003D, "TLS_RSA_WITH_AES_256_CBC_SHA256", AES_256_CBC, "SHA256", "sha256"),
    (0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA", AES_128_CBC, "SHA", "sha256"),
    (0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA", AES_256_CBC, "SHA", "sha256"),
    (0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256", AES_128_CBC, "SHA256", "sha256"),
    (0x006B, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256", AES_256_CBC, "SHA256", "sha256"),
    (0xC009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", AES_128_CBC, "SHA", "sha256"),
    (0xC00A, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", AES_256_CBC, "SHA", "sha256"),
    (0xC013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", AES_128_CBC, "SHA", "sha256"),
    (0xC014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", AES_256_CBC, "SHA", "sha256"),
    (0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", AES_128_CBC, "SHA256", "sha256"),
    (0xC024, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384", AES_256_CBC, "SHA384", "sha384"),
    (0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", AES_128_CBC, "SHA256", "sha256"),
    (0xC028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", AES_256_CBC, "SHA384", "sha384"),
]

SUITES: dict[int, Suite] = {
    code: Suite(code, name, bulk, mac, prf, tls13=code >> 8 == 0x13) for code, name, bulk, mac, prf in _TABLE
}


def name_of(code: int) -> str:
    """The suite's IANA name, or its code in hex when brokerscope does not know it."""
    s = SUITES.get(code)
    return s.name if s else f"0x{code:04X}"
