"""TLS through a real Spark ingest: `brokerscope ingest --tls-keylog` on the real TLS captures of
tests/data/tls/ writes exactly what `decode_files` gives, the captures' own Decryption Secrets
Blocks decrypt across splits (the shuffle path), a real client run's keys injected by
`editcap --inject-secrets` and another's key log that misses some connections give their clear
legs' rows (of the connections with keys), no key appears in any table, lake file or output
line, the run directory keeps no secret, and a key log others may read is refused before Spark
starts (exit 2, the file named) unless --tls-keylog-insecure-ok."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from brokerscope import cli, inputs, pipeline, report, tables
from brokerscope.config import Settings
from brokerscope.streams import decode_files
from brokerscope.tls import load
from tests.support.lakecheck import delta_rs_rows, normalized
from tests.unit.tls.legs import COMPARED, DATA, keys_without, private_copy, without_leg
from tests.unit.tls.test_tls_ingest import dsb, leaks

pytestmark = pytest.mark.spark

RUNS = ("kafka_tls13", "kafka_tls12cbc", "pulsar_tls13", "iggy_tls13")
CAPTURES = ("tls.pcap", *(f"{r}_tls.pcap" for r in RUNS))
KEYLOGS = ("keys.log", *(f"{r}_keys.log" for r in RUNS))


def _no_spark(monkeypatch) -> None:
    def refuse(*a, **kw):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(cli, "_spark", refuse)


def _lake_text(lake: Path) -> list[str]:
    """Every row of every table, and every file under the lake as bytes (latin-1)."""
    out = [repr(r) for t in tables.TABLES for r in delta_rs_rows(str(lake / t))]
    out += [p.read_bytes().decode("latin-1") for p in lake.rglob("*") if p.is_file()]
    return out


def test_cli_ingest_with_key_logs(spark, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "_spark", lambda settings, quiet=False: spark)
    keys = [private_copy(tmp_path, n) for n in KEYLOGS]
    caps = [str(DATA / c) for c in CAPTURES]
    lake = tmp_path / "lake"
    argv = ["ingest", *caps, "--lake", str(lake), "-q"]
    for k in keys:
        argv += ["--tls-keylog", k]
    rc = cli.main(argv)
    out = capsys.readouterr()
    assert rc == report.EXIT_OK, out.err
    got = {t: delta_rs_rows(str(lake / t)) for t in tables.DECODED_TABLES}
    local = decode_files(caps, Settings.load(overrides={"tls": {"keylog_files": keys}}))
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(local[t]), t
    streams = got["streams"]
    assert len(streams) == 17
    assert sorted(r["tls_decrypted"] for r in streams) == ["no key"] + ["yes"] * 16
    assert {r["protocol"] for r in streams if r["server_port"] != 9093} == {"kafka", "pulsar", "iggy"}
    assert {r["tls_sni"] for r in streams if r["server_port"] == 9093} == {"broker.test"}
    assert got["messages"] and got["acks"] and got["latencies"]
    assert not list((lake / "_runs").rglob("*.keylog"))
    assert leaks(["\n".join(_lake_text(lake) + [out.out, out.err])], load(keys).secrets()) == []


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (wireshark-common) not installed")
def test_decryption_secrets_block_after_the_packets_across_splits(spark, tmp_path):
    ng = tmp_path / "tls.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(DATA / "tls.pcap"), str(ng)], check=True)
    with open(ng, "ab") as fh:
        fh.write(dsb((DATA / "keys.log").read_bytes()))
    settings = Settings.load(
        overrides={"lake": {"path": str(tmp_path / "lake")}, "capture": {"split_size": "64KiB"}}
    )
    splits, _ = inputs.plan(inputs.discover([str(ng)]).inputs, settings.split_size, 2)
    assert len(splits) >= 3  # read by several tasks, decoded after the shuffle
    summary = pipeline.ingest([str(ng)], settings, spark=spark)
    assert summary.exit_code() == report.EXIT_OK
    streams = delta_rs_rows(str(tmp_path / "lake" / "streams"))
    assert sorted((r["client_port"], r["tls_decrypted"]) for r in streams) == [
        (20000, "yes"),
        (20001, "yes"),
        (20002, "yes"),
        (20003, "yes"),
        (20004, "no key"),
    ]
    assert not list((tmp_path / "lake" / "_runs").rglob("*.keylog"))
    secrets = load(private_copy(tmp_path, "keys.log")).secrets()
    assert leaks(["\n".join(_lake_text(tmp_path / "lake"))], secrets) == []


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (wireshark-common) not installed")
def test_injected_secrets_and_a_key_log_missing_connections(spark, tmp_path, capsys, monkeypatch):
    """One `brokerscope ingest` of two real client runs over TLS: kafka-python's with its key
    log injected by `editcap --inject-secrets` (a Decryption Secrets Block before the packets),
    and librdkafka's with a key log that lacks two of its five connections. The first gives
    its clear leg's rows, the second its clear leg's rows of the three connections with keys;
    the two others are streams rows with no key and nothing else."""
    monkeypatch.setattr(cli, "_spark", lambda settings, quiet=False: spark)
    injected = tmp_path / "kafka_tls13.pcapng"
    subprocess.run(
        [
            "editcap",
            "--inject-secrets",
            f"tls,{DATA / 'kafka_tls13_keys.log'}",
            str(DATA / "kafka_tls13_tls.pcap"),
            str(injected),
        ],
        check=True,
    )
    partial, dropped, kept = keys_without(tmp_path, "kafka_librdkafka", {1, 4})
    lake = tmp_path / "lake"
    rdk = str(DATA / "kafka_librdkafka_tls.pcap")
    rc = cli.main(["ingest", str(injected), rdk, "--lake", str(lake), "-q", "--tls-keylog", partial])
    out = capsys.readouterr()
    assert rc == report.EXIT_OK, out.err
    ids = {r["path"]: r["capture_id"] for r in delta_rs_rows(str(lake / "inputs"))}
    got = {t: delta_rs_rows(str(lake / t)) for t in (*COMPARED, "streams")}

    def of(path: str, t: str) -> list[dict]:
        return [r for r in got[t] if r["capture_id"] == ids[path]]

    clear13 = decode_files([str(DATA / "kafka_tls13_clear.pcap")], Settings.load())
    clear_rdk = decode_files([str(DATA / "kafka_librdkafka_clear.pcap")], Settings.load())
    assert {r["tls_decrypted"] for r in of(str(injected), "streams")} == {"yes"}
    streams = {r["client_port"]: r["tls_decrypted"] for r in of(rdk, "streams")}
    assert {p for p, d in streams.items() if d == "no key"} == dropped and len(streams) == 5
    for t in COMPARED:
        assert without_leg(of(str(injected), t)) == without_leg(clear13[t]), t
        want = [r for r in clear_rdk[t] if r["client_port"] in kept]
        assert without_leg(of(rdk, t)) == without_leg(want), t
    assert not list((lake / "_runs").rglob("*.keylog"))
    secrets = load([private_copy(tmp_path, n) for n in ("kafka_tls13_keys.log", "kafka_librdkafka_keys.log")])
    assert leaks(["\n".join(_lake_text(lake) + [out.out, out.err])], secrets.secrets()) == []


def test_readable_key_log_refused_before_spark(tmp_path, capsys, monkeypatch):
    _no_spark(monkeypatch)
    key = Path(private_copy(tmp_path, "keys.log"))
    key.chmod(0o640)
    lake = str(tmp_path / "lake")
    rc = cli.main(["ingest", str(DATA / "tls.pcap"), "--lake", lake, "--tls-keylog", str(key)])
    err = capsys.readouterr().err
    assert rc == report.EXIT_USAGE
    assert str(key) in err and "readable by group or others" in err and "--tls-keylog-insecure-ok" in err
    assert len(err.strip().splitlines()) == 1
    # the same from the config file
    conf = tmp_path / "c.toml"
    conf.write_text(f'[tls]\nkeylog_files = ["{key}"]\n')
    rc = cli.main(["ingest", str(DATA / "tls.pcap"), "--lake", lake, "--conf", str(conf)])
    assert rc == report.EXIT_USAGE and str(key) in capsys.readouterr().err
    # forced: read (and Spark would start)
    with pytest.raises(AssertionError, match="Spark was started"):
        cli.main(
            [
                "ingest",
                str(DATA / "tls.pcap"),
                "--lake",
                lake,
                "--tls-keylog",
                str(key),
                "--tls-keylog-insecure-ok",
            ]
        )
    missing = tmp_path / "nope.log"
    rc = cli.main(["ingest", str(DATA / "tls.pcap"), "--lake", lake, "--tls-keylog", str(missing)])
    assert rc == report.EXIT_USAGE and str(missing) in capsys.readouterr().err


@pytest.mark.spark
def test_the_summary_says_what_the_key_logs_decrypted(spark, tmp_path):
    """A key log of other sessions decrypted none of the capture's connections, and the run said
    'every input read cleanly' and nothing more (found by a user trial). The summary counts the
    TLS connections by outcome, and warns when the key logs given decrypted none."""
    cap = str(DATA / "kafka_tls13_tls.pcap")
    said = {}
    for name, keys in (("right", "kafka_tls13_keys.log"), ("wrong", "iggy_tls13_keys.log")):
        over = {
            "lake": {"path": str(tmp_path / name)},
            "tls": {"keylog_files": [private_copy(tmp_path, keys)]},
        }
        said[name] = pipeline.ingest([cap], Settings.load(overrides=over), spark=spark).lines()
    assert "TLS: 5 connections: 5 decrypted (streams.tls_decrypted says why)" in said["right"]
    assert not any("decrypted none" in ln for ln in said["right"])
    assert "TLS: 5 connections: 0 decrypted, 5 no key (streams.tls_decrypted says why)" in said["wrong"]
    assert "warning: the key logs given decrypted none of the 5 TLS connection(s)" in said["wrong"]
