"""The streams table of every public capture equals `tshark -q -z conv,tcp` for the same file.

Expected numbers were produced with TShark 4.0 (Debian 12) and written here; tshark is not needed
to run this test. Each tuple: endpoint A, endpoint B, frames B->A, bytes B->A, frames A->B,
bytes A->B (frame bytes on the wire, as tshark counts them).
"""

from __future__ import annotations

import pytest

from brokerscope.streams import decode_files
from tests.conftest import CAPTURES

TSHARK_CONV = {
    "deepflow/00-produce-v2.pcap": [("127.0.0.1:34128", "127.0.1.1:9092", 1, 116, 1, 187)],
    "deepflow/00-produce-v9.pcap": [("10.50.71.3:51704", "10.50.71.3:36333", 1, 125, 1, 222)],
    "deepflow/01-fetch-v12-ok.pcap": [("10.50.71.3:41972", "10.50.71.3:36333", 1, 87, 1, 186)],
    "deepflow/01-fetch-v12-perf.pcap": [("10.33.33.11:33118", "10.33.33.11:9092", 1, 87, 1, 143)],
    "deepflow/11-join-group-v7.pcap": [("10.50.71.3:30120", "10.50.71.119:36333", 1, 145, 1, 211)],
    "deepflow/13-leave-group-v4.pcap": [("10.50.71.3:54280", "10.50.71.3:36333", 1, 142, 1, 164)],
    "deepflow/14-sync-group-v5.pcap": [("10.50.71.3:30120", "10.50.71.119:36333", 1, 136, 1, 277)],
    "deepflow/18-api-versions-v3.pcap": [("172.16.0.103:32906", "172.16.0.105:9092", 1, 505, 1, 119)],
    "iggy/rs.pcapng": [
        ("127.0.0.1:52100", "127.0.0.1:8090", 12, 945, 12, 798),
        ("127.0.0.1:52127", "127.0.0.1:49363", 4, 290, 4, 319),
        ("127.0.0.1:63342", "127.0.0.1:52054", 2, 112, 2, 124),
    ],
    "ndpi/kafka.pcapng": [
        ("127.0.0.1:46136", "127.0.0.1:9092", 7, 1130, 12, 1107),
        ("172.16.17.101:49280", "172.30.0.237:9092", 3, 788, 2, 201),
        ("172.30.0.237:9092", "172.16.17.101:58052", 1, 110, 4, 974),
        ("172.16.17.101:38176", "172.30.0.237:9092", 2, 254, 3, 1408),
        ("172.16.17.101:40042", "172.30.0.237:9092", 1, 186, 1, 110),
        ("172.16.17.101:56556", "172.30.0.237:9092", 1, 416, 1, 91),
        ("172.16.17.101:53768", "172.30.0.237:9092", 0, 0, 1, 110),
        ("172.16.17.101:58300", "172.30.0.237:9092", 0, 0, 1, 91),
        ("172.16.17.101:53052", "172.30.0.237:9092", 0, 0, 1, 91),
    ],
}


def _sent(rows: list[dict]) -> dict[tuple[str, str], tuple[int, int]]:
    """(sender, receiver) -> (frames, frame bytes) from streams rows."""
    out = {}
    for r in rows:
        c, s = f"{r['client_ip']}:{r['client_port']}", f"{r['server_ip']}:{r['server_port']}"
        out[(c, s)] = (r["c2s_packets"], r["c2s_frame_bytes"])
        out[(s, c)] = (r["s2c_packets"], r["s2c_frame_bytes"])
    return out


@pytest.mark.parametrize("name", sorted(TSHARK_CONV))
def test_streams_match_tshark_conv(name):
    out = decode_files([str(CAPTURES / name)])
    rows = out["streams"]
    assert len(rows) == len(TSHARK_CONV[name])
    sent = _sent(rows)
    for a, b, f_ba, b_ba, f_ab, b_ab in TSHARK_CONV[name]:
        assert sent[(b, a)] == (f_ba, b_ba), (a, b)
        assert sent[(a, b)] == (f_ab, b_ab), (a, b)
    # every TCP packet of the file belongs to exactly one connection
    stats = out["_capture_stats"]
    assert sum(r["c2s_packets"] + r["s2c_packets"] for r in rows) == sum(s["tcp"] for s in stats)
