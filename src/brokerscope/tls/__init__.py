"""TLS: reading the handshake and decrypting records with the keys of NSS key log files, so the
protocol decoders can see the plaintext of Kafka, Pulsar, Iggy and TubeMQ over TLS.

Parts: keylog.py (key log files, `Secret`), suites.py (cipher suites), record.py (the record
layer of one direction, streaming, with gaps), handshake.py (ClientHello, ServerHello,
EncryptedExtensions), kdf.py (TLS 1.2 PRF and key block, TLS 1.3 HKDF key schedule), protect.py
(opening AEAD and CBC records), session.py (`TlsSession`: one connection, both directions),
layer.py (`TlsLayer`: the stream driver's wiring between TCP reassembly and a conversation).
See docs/protocols/tls.md.
"""

from .keylog import KeyLog, KeyLogError, KeyLogPermissionError, Secret, load, with_texts
from .session import FAILED, NO_KEY, YES, TlsSession, sniff

__all__ = [
    "FAILED",
    "NO_KEY",
    "YES",
    "KeyLog",
    "KeyLogError",
    "KeyLogPermissionError",
    "Secret",
    "TlsSession",
    "load",
    "sniff",
    "with_texts",
]
