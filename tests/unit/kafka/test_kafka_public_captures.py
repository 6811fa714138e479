"""The public Kafka captures in tests/data/captures (deepflow, nDPI test data) decode to the API
names, versions and correlation ids that the other projects' own decoders report: deepflow's
`.result` files and, for nDPI's capture, tshark 4.0's per-frame view (written out below; tshark
also marks three responses "Request Missing" and fails on the flexible-version frames, which
decode here)."""

from __future__ import annotations

import json

import pytest

from brokerscope.streams import decode_files
from tests.conftest import CAPTURES  # noqa: E402

# deepflow: (request, response) as in the .result files:
# (api, version, correlation id, client id, topic, partition, response status code, rrt in us)
DEEPFLOW = {
    "00-produce-v2": ("Produce", 2, 1, "console-producer", "topic2", 0, 0, 16107),
    "00-produce-v9": ("Produce", 9, 47, "console-producer", "zqy-test", 0, 0, 1619),
    "01-fetch-v12-ok": ("Fetch", 12, 15603, "consumer-console-consumer-8919-1", "zqy-test", 0, 0, 499610),
    "01-fetch-v12-perf": ("Fetch", 12, 20, "consumer-console-consumer-84107-1", None, None, 0, 504829),
    "11-join-group-v7": ("JoinGroup", 7, 120, "consumer-zzzz12-1", None, None, -1, 2956),
    "13-leave-group-v4": ("LeaveGroup", 4, 201, "consumer-zzzz12-1", None, None, 0, 2739),
    "14-sync-group-v5": ("SyncGroup", 5, 120, "consumer-zzzz12-1", None, None, -1, 2922),
    "18-api-versions-v3": ("ApiVersions", 3, 2, "adminclient-1", None, None, 0, 4941),
}


@pytest.mark.parametrize("name", sorted(DEEPFLOW))
def test_deepflow(name):
    api, ver, corr, client, topic, part, status, rrt = DEEPFLOW[name]
    out = decode_files([str(CAPTURES / "deepflow" / f"{name}.pcap")])
    req, resp = out["commands"]
    assert (
        req["direction"],
        req["command"],
        req["api_version"],
        req["correlation_id"],
        req["client_id"],
    ) == ("c2s", api, ver, corr, client)
    assert (resp["direction"], resp["command"], resp["api_version"], resp["correlation_id"]) == (
        "s2c",
        api,
        ver,
        corr,
    )
    assert (req["topic"], req["partition"]) == (topic, part)
    assert resp["error_code"] == status
    assert req["decode_status"] == resp["decode_status"] == "ok"
    if name in _SIZES:  # the perf capture has no .result file
        assert (req["size"], resp["size"]) == _SIZES[name]
    (lat,) = out["latencies"]
    assert lat["latency_us"] == rrt
    assert out["streams"][0]["protocol"] == "kafka"


# captured_request_byte / captured_response_byte from the .result files (frame bytes on the wire)
_SIZES = {
    "00-produce-v2": (121, 50),
    "00-produce-v9": (156, 59),
    "01-fetch-v12-ok": (120, 21),
    "11-join-group-v7": (145, 79),
    "13-leave-group-v4": (98, 76),
    "14-sync-group-v5": (211, 70),
    "18-api-versions-v3": (53, 439),
}


def test_deepflow_produce_v9_record():
    out = decode_files([str(CAPTURES / "deepflow" / "00-produce-v9.pcap")])
    (m,) = out["messages"]
    assert (m["topic"], m["partition"], m["offset"], m["message_id"]) == ("zqy-test", 0, 35, "zqy-test-0@35")
    (a,) = out["acks"]
    assert (a["ack_type"], a["offset"], a["error_code"]) == ("kafka_produce", 35, 0)


# nDPI kafka.pcapng, in capture order: (client port, direction, api, version, correlation id,
# decode_status), matching tshark 4.0.17's frames 1-37 (api key, version, correlation id)
NDPI = [
    (49280, "c2s", "ApiVersions", 0, 129, "ok"),
    (49280, "s2c", "ApiVersions", 0, 129, "ok"),
    (49280, "c2s", "Metadata", 2, 130, "ok"),
    # the 44 bytes of request 131, never captured: at the time of frame 3, the packet before them
    # that its first_frame names (was: frame 5's, which revealed the gap; a user trial)
    (49280, "c2s", None, None, None, "gap"),
    (49280, "s2c", "Metadata", 2, 130, "ok"),
    (49280, "s2c", "Metadata", 2, 131, "request_missing"),  # inferred: neighbour 130 is Metadata v2
    (58052, "s2c", None, None, 140, "request_missing"),  # no captured neighbour: not inferred
    (58052, "s2c", "Metadata", 2, 141, "request_missing"),  # inferred: neighbour 142 is Metadata v2
    (58052, "c2s", "Metadata", 2, 142, "ok"),
    (58052, "s2c", "Metadata", 2, 142, "ok"),
    (40042, "c2s", "Metadata", 2, 164, "ok"),
    (40042, "s2c", "Metadata", 2, 164, "ok"),
    (56556, "c2s", "ApiVersions", 0, 168, "ok"),
    (56556, "s2c", "ApiVersions", 0, 168, "ok"),
    (53768, "c2s", "Metadata", 2, 212, "ok"),
    (38176, "c2s", "Produce", 3, 2, "ok"),
    (38176, "s2c", "Produce", 3, 2, "ok"),
    (38176, "c2s", "Produce", 3, 3, "ok"),
    (38176, "s2c", "Produce", 3, 3, "ok"),
    (58300, "c2s", "ApiVersions", 0, 4, "ok"),
    (53052, "c2s", "ApiVersions", 0, 15, "ok"),
    (46136, "c2s", "ApiVersions", 3, 3, "ok"),
    (46136, "s2c", "ApiVersions", 3, 3, "ok"),
    (46136, "c2s", "InitProducerId", 4, 4, "ok"),
    (46136, "s2c", "InitProducerId", 4, 4, "ok"),
    (46136, "c2s", "Metadata", 12, 5, "ok"),
    (46136, "s2c", "Metadata", 12, 5, "ok"),
    (46136, "c2s", "Produce", 9, 6, "ok"),
    (46136, "s2c", "Produce", 9, 6, "ok"),
]


def test_ndpi():
    out = decode_files([str(CAPTURES / "ndpi" / "kafka.pcapng")])
    got = [
        (
            r["client_port"],
            r["direction"],
            r["command"],
            r["api_version"],
            r["correlation_id"],
            r["decode_status"],
        )
        for r in sorted(out["commands"], key=lambda r: r["ts_ns"])
    ]
    assert got == NDPI
    (gap,) = [r for r in out["commands"] if r["decode_status"] == "gap"]
    assert (gap["first_frame"], gap["ts_ns"], gap["ts_end_ns"]) == (
        3,
        1681845006101184000,
        1681845606130644000,
    )
    missing = [r for r in out["commands"] if r["decode_status"] == "request_missing"]
    assert missing and not any(r["raw"] for r in missing)  # undetermined type: no bytes
    # tshark shows these three frames as "Request missing" with their length and correlation id
    # only (frames 5-7: lengths 116, 346, 116); inference adds the api where it is certain
    assert [(r["correlation_id"], r["size"] - 4) for r in sorted(missing, key=lambda r: r["ts_ns"])] == [
        (131, 116),
        (140, 346),
        (141, 116),
    ]
    by_corr = {r["correlation_id"]: r for r in out["commands"] if r["client_port"] in (49280, 58052)}
    for corr, paired in ((131, 130), (141, 142)):
        det = json.loads(by_corr[corr]["details"])
        assert det.pop("inferred") is True and "Metadata v2" in det.pop("inferred_reason")
        # the same broker's answer to the same question, paired with its captured request
        assert by_corr[paired]["decode_status"] == "ok"
        assert det == json.loads(by_corr[paired]["details"])
        assert by_corr[corr]["topic"] == "LB_MAIN_LOG_INPUT"
    # 140 is an ApiVersions v0 response (the size of 129's) on a connection where only Metadata
    # v2 was requested, and neither neighbour's request was captured: left undecoded
    assert json.loads(by_corr[140]["details"]) == {
        "inferred": False,
        "inferred_reason": "no request with correlation id 139 or 141 in the capture",
    }
    assert by_corr[140]["size"] == by_corr[129]["size"]
    values = sorted(m["value"][:13] for m in out["messages"])
    assert values == [b"Hello world!", b'{"timestamp":', b'{"timestamp":']
    assert {m["message_id"] for m in out["messages"]} == {
        "sampleTopic-0@0",
        "LB_MAIN_LOG_INPUT-0@11222049",
        "LB_MAIN_LOG_INPUT-0@11222050",
    }
