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


def keys_without(tmp_path: Path, run: str, drop: set[int]) -> tuple[str, set[int], set[int]]:
    """<run>'s key log without the lines of its TLS connections ranked `drop` (from 0, in the
    order of their SYNs): (that key log, a private copy; the client ports of the connections left
    without keys; the client ports of the clear leg's connections that carried the others, the
    proxy's connections being made in the order it accepted the clients')."""
    from tests.support.tlsreplay import client_random, connections

    tls = connections(DATA / f"{run}_tls.pcap")
    clear = connections(DATA / f"{run}_clear.pcap")
    assert len(tls) == len(clear) and drop < set(range(len(tls)))
    gone = {client_random(tls[i]).hex() for i in drop}
    lines = (DATA / f"{run}_keys.log").read_text().splitlines(keepends=True)
    kept_lines = [ln for ln in lines if not (len(ln.split()) == 3 and ln.split()[1].lower() in gone)]
    assert len(kept_lines) < len(lines)
    path = tmp_path / f"{run}_some_keys.log"
    path.write_text("".join(kept_lines))
    path.chmod(0o600)
    return (
        str(path),
        {tls[i].client_port for i in drop},
        {c.client_port for i, c in enumerate(clear) if i not in drop},
    )
