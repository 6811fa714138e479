"""The ingest filter (capture/filter.py): parsing its values, and read_split keeping only the
packets of a time window, hosts and ports, on real captures (counts checked with tshark)."""

from __future__ import annotations

import pytest
from capture_kit import pcap_bytes, read_path, total, write
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether

from brokerscope.capture.filter import PacketFilter, format_time, parse_time
from brokerscope.config import Settings
from tests.conftest import ROOT, SAMPLE_DATA

NDPI = str(ROOT / "tests" / "data" / "captures" / "ndpi" / "kafka.pcapng")
NONE_PCAP = str(SAMPLE_DATA / "kafka" / "none.pcap")


# -- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("1700000000", 1_700_000_000_000_000_000),
        ("1700000000.5", 1_700_000_000_500_000_000),
        ("1700000000.000000001", 1_700_000_000_000_000_001),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000_000_000),  # naive: UTC
        ("2023-11-14 22:13:20", 1_700_000_000_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000_000_000),
        ("2023-11-14T22:13:20.123456789Z", 1_700_000_000_123_456_789),
        ("2023-11-14T17:13:20.25-05:00", 1_700_000_000_250_000_000),
        ("2023-11-14", 1_699_920_000_000_000_000),
    ],
)
def test_times_parse_to_nanoseconds_and_print_back_in_utc(text, ns):
    assert parse_time(text) == ns
    assert parse_time(format_time(ns)) == ns


@pytest.mark.parametrize("bad", ["yesterday", "2023-13-01", "2023-11-14T25:00:00", "", "1.2.3", "12:00"])
def test_a_bad_time_is_an_error_naming_it(bad):
    with pytest.raises(ValueError, match="--since: not a time") as e:
        parse_time(bad, "--since")
    assert repr(bad) in str(e.value)


def test_a_filter_is_canonical_text_and_none_when_empty():
    assert PacketFilter.parse() is None
    assert PacketFilter.parse("", "", [], []) is None
    f = PacketFilter.parse(
        "2023-11-14T23:13:20+01:00",
        "1700000600",
        ["10.1.2.3/24", "fd00::1", "10.0.0.5"],
        ["9092", 6650, 9092],
    )
    assert f.text() == (
        "since=2023-11-14T22:13:20Z;until=2023-11-14T22:23:20Z;"
        "host=10.0.0.5/32,10.1.2.0/24,fd00::1/128;port=6650,9092"
    )
    assert f.window() == (1_700_000_000 * 10**9, 1_700_000_600 * 10**9)
    assert PacketFilter.parse(ports=[9092]).text() == "port=9092"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"hosts": ["10.0.0.300"]}, "host: not an IP address or network: '10.0.0.300'"),
        ({"hosts": ["broker-1"]}, "host: not an IP address"),
        ({"ports": ["0"]}, "port: not a TCP port: '0'"),
        ({"ports": ["65536"]}, "port: not a TCP port"),
        ({"ports": ["kafka"]}, "port: not a TCP port"),
        ({"since": "1700000010", "until": "1700000010"}, "until .* must be later than since"),
    ],
)
def test_bad_filter_values_are_errors_naming_them(kw, message):
    with pytest.raises(ValueError, match=message):
        PacketFilter.parse(**kw)


def test_endpoint_matching_either_direction():
    f = PacketFilter.parse(hosts=["10.0.0.0/24", "fd00::/64"], ports=["9092"])
    a, b, c = 0x0A000005, 0x0A000105, 0x0B000001  # 10.0.0.5, 10.0.1.5, 11.0.0.1
    assert f.keep4(a, c, 40000, 9092) and f.keep4(c, a, 9092, 40000)
    assert not f.keep4(b, c, 40000, 9092)  # no host in the networks
    assert not f.keep4(a, c, 40000, 9093)  # no port
    v6 = bytes.fromhex("fd00" + "00" * 12 + "0001")
    other = bytes.fromhex("fe80" + "00" * 13 + "01")
    assert f.keep6(other, v6, 9092, 1) and not f.keep6(other, other, 9092, 1)
    assert not PacketFilter.parse(hosts=["fd00::/64"]).keep4(a, c, 1, 2)  # only IPv6 hosts given
    assert PacketFilter.parse(ports=["9092"]).keep6(other, other, 1, 9092)


def test_config_filter_section_and_its_errors():
    assert Settings.load().packet_filter is None
    s = Settings.load(overrides={"filter": {"since": "1700000000", "hosts": ["10.0.0.5"], "ports": [9092]}})
    assert s.packet_filter.text() == "since=2023-11-14T22:13:20Z;host=10.0.0.5/32;port=9092"
    with pytest.raises(ValueError, match="filter.until: not a time"):
        Settings.load(overrides={"filter": {"until": "soon"}})
    with pytest.raises(ValueError, match="filter.hosts must be a list"):
        Settings.load(overrides={"filter": {"hosts": "10.0.0.5"}})


# -- reading real captures ------------------------------------------------------------------------


def _flows(rows) -> set[tuple]:
    return {(r["lo_ip"], r["lo_port"], r["hi_ip"], r["hi_port"]) for r in rows}


# tests/data/captures/ndpi/kafka.pcapng: 41 TCP packets; 19 on 127.0.0.1 (one connection, port
# 46136), 22 between 172.16.17.101 and 172.30.0.237:9092 (tshark -Y 'ip.addr==127.0.0.1' etc.)
@pytest.mark.parametrize(
    ("kw", "kept"),
    [
        ({"hosts": ["127.0.0.1"]}, 19),
        ({"ports": ["46136"]}, 19),
        ({"hosts": ["172.30.0.237"]}, 22),
        ({"hosts": ["172.16.0.0/12"], "ports": ["9092"]}, 22),
        ({"hosts": ["172.16.0.0/12", "127.0.0.0/8"]}, 41),
        ({"ports": ["9092"]}, 41),
        ({"hosts": ["10.0.0.0/8"]}, 0),
        ({"hosts": ["127.0.0.1"], "ports": ["49280"]}, 0),
        # tshark -Y 'frame.time_epoch >= 1681849806.209304 && frame.time_epoch < 1681878308.076966':
        # 7, two of them at exactly `since`; the one at `until` is not kept
        ({"since": "1681849806.209304", "until": "1681878308.076966"}, 7),
        ({"since": "2023-04-18T20:30:06.209304Z", "until": "2023-04-19T04:25:08.076966+00:00"}, 7),
        ({"since": "2023-12-21T04:25:56"}, 19),
        ({"until": "2023-12-21T04:25:56"}, 22),
    ],
)
@pytest.mark.parametrize("split_size", [0, 700])
def test_read_split_keeps_what_the_filter_says(kw, kept, split_size):
    flt = PacketFilter.parse(**kw)
    whole, _ = read_path(NDPI)
    rows, stats = read_path(NDPI, split_size, flt=flt)
    assert len(rows) == kept == total(stats, "tcp")
    assert total(stats, "records") == 41 and total(stats, "filtered") == 41 - kept
    assert rows == [
        r for r in whole if (r["rec_offset"], r["ts_ns"]) in {(x["rec_offset"], x["ts_ns"]) for x in rows}
    ]
    lo, hi = flt.window()
    assert all(lo <= r["ts_ns"] < hi for r in rows)
    if flt.ports:
        assert all({r["lo_port"], r["hi_port"]} & set(flt.ports) for r in rows)
    if flt.by_endpoint:  # whole connections: each kept flow keeps all its packets
        assert rows == [
            r for r in whole if (r["lo_ip"], r["lo_port"], r["hi_ip"], r["hi_port"]) in _flows(rows)
        ]


def test_pcap_window_to_the_nanosecond_and_counters_without_a_filter():
    # sample_data/kafka/none.pcap, nanosecond pcap: 3 records in [.265258721, .265437454)
    # (tshark -T fields -e frame.time_epoch, compared as text)
    flt = PacketFilter.parse("1795239891.265258721", "1795239891.265437454")
    rows, stats = read_path(NONE_PCAP, flt=flt)
    assert [r["ts_ns"] for r in rows] == [1795239891265258721, 1795239891265339351, 1795239891265346785]
    assert total(stats, "records") == 120 and total(stats, "filtered") == 117
    _, plain = read_path(NONE_PCAP)
    assert all("filtered" not in s for s in plain)  # an unfiltered run's counters are as before
    # port 40796: one connection of 30 packets (tshark -Y tcp.port==40796)
    rows, stats = read_path(NONE_PCAP, flt=PacketFilter.parse(ports=[40796]))
    assert len(rows) == 30 and _flows(rows) == {("127.0.0.1", 36525, "127.0.0.1", 40796)}


def test_ipv6_vlan_and_fragmented_packets_are_filtered_on_their_endpoints(tmp_path):
    """Packets the fast IPv4 path does not take (IPv6, VLAN-tagged, a fragmented datagram
    reassembled) are filtered by their TCP endpoints too."""
    t0 = 1_700_000_000 * 10**9
    big = IP(src="10.0.0.1", dst="10.0.0.2", id=7) / TCP(sport=5000, dport=9092) / (b"x" * 3000)
    frames = [
        Ether() / IPv6(src="fd00::1", dst="fd00::2") / TCP(sport=5000, dport=9092),
        Ether() / IPv6(src="fe80::1", dst="fe80::2") / TCP(sport=5000, dport=9092),
        Ether() / Dot1Q(vlan=5) / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=5000, dport=6650),
        Ether() / Dot1Q(vlan=5) / IP(src="10.0.9.1", dst="10.0.9.2") / TCP(sport=5000, dport=6650),
        *[Ether() / f for f in _fragments(big)],
    ]
    path = write(tmp_path, "mixed.pcap", pcap_bytes([(t0 + i, bytes(f)) for i, f in enumerate(frames)]))
    rows, stats = read_path(path, flt=PacketFilter.parse(hosts=["fd00::/16", "10.0.0.0/24"]))
    assert [(r["lo_ip"], r["hi_port"]) for r in rows] == [
        ("fd00::1", 9092),
        ("10.0.0.1", 6650),
        ("10.0.0.1", 9092),
    ]
    assert total(stats, "fragments_reassembled") == 1 and total(stats, "filtered") == 2
    rows, stats = read_path(path, flt=PacketFilter.parse(ports=["6650"]))
    assert len(rows) == 2 and total(stats, "filtered") == 3


def _fragments(pkt):
    from scapy.layers.inet import fragment

    return fragment(pkt, fragsize=1480)


def test_gzip_captures_are_filtered_alike(tmp_path):
    import gzip

    path = tmp_path / "none.pcap.gz"
    with open(NONE_PCAP, "rb") as src, gzip.open(path, "wb") as dst:
        dst.write(src.read())
    flt = PacketFilter.parse("1795239891.265258721", "1795239894", ports=["40796", "40774"])
    plain, plain_stats = read_path(NONE_PCAP, flt=flt)
    rows, stats = read_path(str(path), flt=flt)
    assert rows == plain and total(stats, "filtered") == total(plain_stats, "filtered")
    # tshark -T fields -e frame.time_epoch -e tcp.port, the window compared as text: 14 + 14
    assert len(rows) == 28 and _flows(rows) == {
        ("127.0.0.1", 36525, "127.0.0.1", 40774),
        ("127.0.0.1", 36525, "127.0.0.1", 40796),
    }
