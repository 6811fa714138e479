"""The TLS captures of tests/data/tls/ and how the tests read them: tls.pcap's connections, and
the real client runs captured on both legs of tests/support/tlsproxy.py (client <-> proxy over
TLS, proxy <-> server in clear: the same application bytes), decoded through
`streams.decode_files` and compared apart from what differs between the legs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from brokerscope import tables
from brokerscope.config import Settings
from brokerscope.streams import decode_files

DATA = Path(__file__).resolve().parents[2] / "data" / "tls"

# tls.pcap: client port -> (version, cipher, application bytes sent c2s, s2c), as
# tests/support/make_tls_capture.py ran them
SENT = {
    20000: ("TLS 1.3", "TLS_CHACHA20_POLY1305_SHA256", 2054, 27717),
    20001: ("TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 3588, 23731),
    20002: ("TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 3978, 26326),
    20003: ("TLS 1.2", "TLS_RSA_WITH_AES_256_CBC_SHA", 3484, 27279),
    20004: ("TLS 1.3", "TLS_AES_128_GCM_SHA256", 2340, 29515),  # not in the key log
}
NO_KEY_PORT = 20004

# <run>_tls.pcap, <run>_clear.pcap, <run>_keys.log -> (protocol, version and cipher the proxy
# negotiated, connections)
RUNS = {
    "kafka_tls13": ("kafka", "TLS 1.3", "TLS_AES_256_GCM_SHA384", 5),
    "kafka_tls12cbc": ("kafka", "TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 5),
    "kafka_librdkafka": ("kafka", "TLS 1.3", "TLS_AES_256_GCM_SHA384", 5),  # librdkafka, the proxy's keys
    "pulsar_tls13": ("pulsar", "TLS 1.3", "TLS_AES_256_GCM_SHA384", 1),
    "iggy_tls13": ("iggy", "TLS 1.3", "TLS_AES_256_GCM_SHA384", 1),
    "tubemq_tls12": ("tubemq", "TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 4),
}
COMPARED = ("commands", "messages", "latencies", "acks")
# what differs between the two legs of one exchange: ports, times (and what is made of them)
DIFFERS = ("port", "ts", "time", "latency", "_us", "conn_id", "capture_id", "_frame")  # _frame: other files
TLS_COLUMNS = tuple(f.name for f in tables.STREAMS if f.name.startswith("tls_"))  # null in clear


def private_copy(tmp_path: Path, name: str, src: Path = DATA) -> str:
    """A key log as its owner keeps it (git does not keep the 0600 mode)."""
    p = tmp_path / name
    shutil.copy(src / name, p)
    p.chmod(0o600)
    return str(p)


def decode(pcap: str | Path, keylogs: list[str], **over) -> dict[str, list[dict]]:
    """decode_files of one capture (a name under DATA, or a path) with these key logs."""
    return decode_files(
        [str(DATA / pcap)], Settings.load(overrides={"tls": {"keylog_files": keylogs}, **over})
    )


def without_leg(rows: list[dict]) -> list[str]:
    """The rows as sorted JSON lines without the columns that differ between the legs."""
    return sorted(
        json.dumps(
            {k: v for k, v in r.items() if not any(d in k for d in DIFFERS)}, sort_keys=True, default=repr
        )
        for r in rows
    )


def assert_same_exchange(tls: dict[str, list[dict]], clear: dict[str, list[dict]]) -> None:
    """The TLS leg decoded with its keys gives the clear leg's rows, apart from ports and times,
    and every plaintext byte is one the clear leg carried."""
    assert clear["commands"] and clear["latencies"]
    for t in COMPARED:
        assert without_leg(tls[t]) == without_leg(clear[t]), t
    assert all(r["decode_status"] == "ok" for r in tls["commands"])
    assert sorted((r["tls_c2s_bytes"], r["tls_s2c_bytes"]) for r in tls["streams"]) == sorted(
        (r["c2s_bytes"], r["s2c_bytes"]) for r in clear["streams"]
    )
    assert sorted(r["frames_ok"] for r in tls["streams"]) == sorted(r["frames_ok"] for r in clear["streams"])
    for r in clear["streams"]:
        assert all(r[c] is None for c in TLS_COLUMNS)
