"""Write tests/data/tls/: a capture of real TLS connections and the key log their stack wrote.

    .venv/bin/python -m tests.support.make_tls_capture

Each connection is run by tests/support/tlspair.py (OpenSSL through Python's ssl, in memory) and
its transcript written as a TCP connection with tests/support/cuts.py (segments of at most
1,400 bytes, handshake and FIN, server port 9093): TLS 1.3 with ChaCha20-Poly1305, TLS 1.2
ECDHE-RSA-AES256-GCM-SHA384, TLS 1.2 ECDHE-RSA-AES128-SHA256 (encrypt-then-MAC), TLS 1.2
AES256-SHA (MAC-then-encrypt), and a TLS 1.3 connection whose lines are then removed from the
key log (no key). tests/unit/tls/test_tls_tshark.py compares the decrypted application-data
bytes per connection with tshark's (`-o tls.keylog_file:`), recorded in the test.
"""

from __future__ import annotations

import os
import random
import tempfile

from tests.support import cuts, tlspair

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "tls")
PORT = 9093
SEG = 1400

CONNECTIONS = [
    dict(version="1.3", suite="TLS_CHACHA20_POLY1305_SHA256"),
    dict(version="1.2", ciphers="ECDHE-RSA-AES256-GCM-SHA384"),
    dict(version="1.2", ciphers="ECDHE-RSA-AES128-SHA256", etm=True),
    dict(version="1.2", ciphers="AES256-SHA", etm=False),
    dict(version="1.3", suite="TLS_AES_128_GCM_SHA256", keyless=True),
]


def exchange(i: int) -> list[tuple[str, bytes]]:
    rnd = random.Random(i)
    out = []
    for k in range(6):
        out.append(("c2s", f"request {k} of connection {i} ".encode() * rnd.randint(1, 40)))
        size = 20000 if k == 2 else rnd.randint(10, 3000)  # one message of several records
        out.append(("s2c", bytes(rnd.getrandbits(8) for _ in range(size))))
    return out


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp()
    lines: list[str] = []
    conns = []
    for i, spec in enumerate(CONNECTIONS):
        spec = dict(spec)
        keyless = spec.pop("keyless", False)
        log = os.path.join(tmp, f"{i}.log")
        conn = tlspair.run(tmp, exchange=exchange(i), keylog=log, **spec)
        if not keyless:
            lines += [ln for ln in open(log).read().splitlines() if ln and not ln.startswith("#")]
        conns.append((cuts.packets(conn.transcript, SEG), True, True))
        print(i, conn.version, conn.cipher, {d: len(b) for d, b in conn.sent.items()})
    cuts.write(os.path.join(OUT, "tls.pcap"), conns, PORT)
    path = os.path.join(OUT, "keys.log")
    with open(path, "w") as fh:
        fh.write(
            "# NSS key log written by OpenSSL through Python's ssl (tests/support/make_tls_capture.py)\n"
        )
        fh.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)


if __name__ == "__main__":
    main()
