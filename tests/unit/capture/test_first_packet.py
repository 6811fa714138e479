"""capture.files.first_packet_ns: the first packet's time from a file's head (the values are
tshark's `frame.time_epoch` of frame 1 of each file)."""

from __future__ import annotations

import gzip

from brokerscope.capture.files import first_packet_ns
from tests.conftest import ROOT, SAMPLE_DATA


def test_pcap_pcapng_and_gzip_heads_give_tsharks_first_time(tmp_path):
    assert first_packet_ns(SAMPLE_DATA / "kafka" / "none.pcap", "pcap") == 1795239891212904091  # ns pcap
    assert first_packet_ns(SAMPLE_DATA / "public" / "00-produce-v9.pcap", "pcap") == 1726216598023065000
    frames = ROOT / "tests" / "data" / "frames"
    assert first_packet_ns(frames / "two_interfaces.pcapng", "pcapng") == 1762848570618584000
    assert first_packet_ns(frames / "other_frames.pcapng", "pcapng") == 1795239909481185429
    gz = tmp_path / "none.pcap.gz"
    gz.write_bytes(gzip.compress((SAMPLE_DATA / "kafka" / "none.pcap").read_bytes()))
    assert first_packet_ns(gz, "pcap.gz") == 1795239891212904091


def test_a_head_without_a_readable_packet_is_none(tmp_path):
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((SAMPLE_DATA / "kafka" / "none.pcap").read_bytes()[:30])  # inside the first record header
    noise = tmp_path / "noise.pcapng"
    noise.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\xff" * 40)
    assert first_packet_ns(cut, "pcap") is None
    assert first_packet_ns(noise, "pcapng") is None
    assert first_packet_ns(tmp_path / "gone.pcap", "pcap") is None
    assert first_packet_ns(cut, "pcap.gz") is None  # not gzip
