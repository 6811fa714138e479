"""Captures hold secrets: the credentials the sample traffic carries never reach a table, in any
column, in clear or encoded (tests/support/cuts.py `leaks`: hex, base64, UTF-16, JSON opened)."""

from __future__ import annotations

from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA
from tests.support import cuts

# what the sample generators send (sample_data/iggy/make_iggy_samples.py,
# tests/support/tubemq_sim.py)
SECRETS = [b"s3cret-sample-pw", b"987654321"]


def test_sample_credentials_are_redacted_everywhere():
    out = decode_files([str(SAMPLE_DATA / "iggy"), str(SAMPLE_DATA / "tubemq")])
    logins = [
        r
        for r in out["commands"]
        if r["command"] in ("LOGIN_USER", "LOGIN_REGISTER") and r["direction"] == "c2s"
    ]
    assert logins and all("redacted" in r["details"] for r in logins)  # the login was decoded
    tabs = {t: out[t] for t in ("commands", "messages", "latencies", "acks", "streams")}
    assert cuts.leaks(tabs, {s.decode(): s for s in SECRETS}) == []


def test_no_hash_of_a_login_body_reaches_a_table(tmp_path):
    """apache-iggy 0.9's VSR request header carries request_checksum, XXH3-64 of the body: for a
    login (REGISTER) an unkeyed hash of the password, which a guess can be checked against (found
    by a review: it was in commands.details)."""
    import struct

    import xxhash
    from scapy.all import TCP, rdpcap

    cap = SAMPLE_DATA / "iggy" / "client_vsr.pcap"
    sums = {}
    for p in rdpcap(str(cap)):
        data = bytes(p[TCP].payload) if TCP in p else b""
        # VSR header: size u32 @48, command u8 @60 (5 request), request_checksum @144, operation
        # u8 @176 (1 REGISTER); the body follows the 256-byte header
        if len(data) >= 256 and data[60] == 5 and data[176] == 1:
            size = struct.unpack_from("<I", data, 48)[0]
            value = int.from_bytes(data[144:160], "little")
            assert value == xxhash.xxh3_64_intdigest(data[256:size])
            sums[f"xxh3 {value:x}"] = value
    assert sums  # the sample logs in
    forms = {
        f"{label} {k}": s.encode()
        for label, v in sums.items()
        for k, s in (("hex", f"{v:x}"), ("dec", str(v)))
    }
    forms |= {f"{label} bytes": v.to_bytes(8, "little") for label, v in sums.items()}
    out = decode_files([str(cap)])
    tabs = {t: out[t] for t in ("commands", "messages", "latencies", "acks", "streams")}
    assert cuts.leaks(tabs, forms) == []
    # the login's reply repeats the checksum @128 of its header: a reply damaged so that it keeps
    # `raw` (found by a user trial: one flipped bit of its server version string) keeps none of it
    from scapy.all import wrpcap

    pkts = rdpcap(str(cap))
    damaged = 0
    for p in pkts:
        data = bytes(p[TCP].payload) if TCP in p else b""
        if (
            len(data) > 283
            and data[60] == 8
            and data[128:136] in {v.to_bytes(8, "little") for v in sums.values()}
        ):
            body = bytearray(data)
            body[283] ^= 0x80  # inside the reply's server version string: not UTF-8 any more
            p[TCP].remove_payload()
            p[TCP].add_payload(bytes(body))
            del p[TCP].chksum
            damaged += 1
    assert damaged
    bad = tmp_path / "reply_damaged.pcap"
    wrpcap(str(bad), pkts)
    out = decode_files([str(bad)])
    assert any(r["decode_status"] != "ok" and r["direction"] == "s2c" for r in out["commands"])
    tabs = {t: out[t] for t in ("commands", "messages", "latencies", "acks", "streams")}
    assert cuts.leaks(tabs, forms) == []
