"""One bad value costs that value, not the run: captures whose decoded values do not fit their
columns are ingested next to good ones through the CLI."""

from __future__ import annotations

import warnings

import pytest

from brokerscope import cli, report
from brokerscope.capture import capture_id
from brokerscope.protocols.tubemq.gen import tubemq_master_pb2 as mst
from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows, normalized
from tests.support.synth import write_capture
from tests.unit.kafka.kit import produce_request, produce_response
from tests.unit.tubemq.kit import request, response

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecordsBuilder

pytestmark = pytest.mark.spark

CREATE_TIME_US = 1_700_000_000_123_456  # a producer that wrote microseconds where Kafka wants ms


def _kafka_microsecond_timestamps(path) -> None:
    def payloads(conn: int, i: int) -> tuple[bytes, bytes]:
        b = MemoryRecordsBuilder(2, 0, 1 << 20, offset=0)
        b.append(CREATE_TIME_US + i, b"k%d" % i, b"value %d" % i, [])
        b.close()
        recs = bytes(b.records().buffer() if hasattr(b.records(), "buffer") else b._buffer)
        return produce_request(9, "orders", 0, recs, corr=i + 1), produce_response(
            9, "orders", 0, 40 + i, corr=i + 1
        )

    write_capture(str(path), n_conns=1, exchanges=3, payloads=payloads, server_port=9092)


class _Patched:
    """A protobuf message whose serialized bytes get a string field that is not UTF-8."""

    def __init__(self, msg, old: bytes, new: bytes):
        self.data = msg.SerializeToString().replace(old, new)

    def SerializeToString(self) -> bytes:  # noqa: N802 - the protobuf method name
        return self.data


def _tubemq_latin1_client_id(path) -> None:
    def payloads(conn: int, i: int) -> tuple[bytes, bytes]:
        reg = _Patched(
            mst.RegisterRequestP2M(clientId="prodXclient", topicList=["demo"]),
            b"prodXclient",
            b"prod\xe9client",
        )
        return request(i + 1, 1, 1, reg), response(
            i + 1, 1, mst.RegisterResponseM2P(success=True, errCode=200)
        )

    write_capture(str(path), n_conns=1, exchanges=2, payloads=payloads, server_port=8715)


def test_bad_values_become_nulls_with_the_anomaly_and_every_good_row_lands(spark, tmp_path, capsys):
    good = SAMPLE_DATA / "kafka" / "lz4.pcap"
    us, latin1 = tmp_path / "kafka_us.pcap", tmp_path / "tubemq_latin1.pcap"
    _kafka_microsecond_timestamps(us)
    _tubemq_latin1_client_id(latin1)
    lake = tmp_path / "lake"
    rc = cli.main(["ingest", str(good), str(us), str(latin1), "--lake", str(lake), "-q"])
    out = capsys.readouterr().out
    assert rc == report.EXIT_OK, out  # the inputs were read cleanly: values are not damage
    rows = {t: delta_rs_rows(str(lake / t)) for t in ("commands", "messages")}
    # every row of the good capture, exactly as alone
    alone = decode_files([str(good)])
    for t, got in rows.items():
        mine = [r for r in got if r["capture_id"] == capture_id(good)]
        assert normalized(mine, drop=("anomalies",)) == normalized(alone[t], drop=("anomalies",)), t
        assert all(r["anomalies"] is None for r in mine)
    # the microsecond CreateTime: three produced messages, timestamps null, the raw value recorded
    produced = [
        r for r in rows["messages"] if r["capture_id"] == capture_id(us) and r["direction"] == "produce"
    ]
    assert [r["value"] for r in sorted(produced, key=lambda r: r["offset"])] == [
        b"value 0",
        b"value 1",
        b"value 2",
    ]
    for r in produced:
        assert r["message_ts"] is None and r["topic"] == "orders" and r["offset"] in (40, 41, 42)
        # the value as found (ms taken for µs, times 10^6 for ns), not reinterpreted
        assert r["anomalies"] == [
            f"message_ts: {(CREATE_TIME_US + r['offset'] - 40) * 10**6} ns since 1970 (out of range for int64)"
        ]
    # the client id that is not UTF-8: text with its bytes visible, as every decoder makes a
    # protocol's string (tables.conform's null-and-anomaly, shown by the timestamps above, is the
    # net for a decoder that hands over bytes); the rest of the row decoded
    regs = [r for r in rows["commands"] if r["capture_id"] == capture_id(latin1) and r["direction"] == "c2s"]
    assert len(regs) == 2 and all(
        r["command"] == "producerRegisterP2M" and r["topics"] == ["demo"] for r in regs
    )
    assert all(r["client_id"] == "prod\\xe9client" and r["anomalies"] is None for r in regs)
