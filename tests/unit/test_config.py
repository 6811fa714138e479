"""Settings: conf/brokerscope.toml spells out exactly the embedded defaults; overrides and errors."""

from __future__ import annotations

import tomllib

import pytest

from brokerscope.config import Settings, defaults, parse_size
from tests.conftest import ROOT


def _sizes(d):
    if isinstance(d, dict):
        return {k: _sizes(v) for k, v in d.items()}
    if isinstance(d, str) and d[-1:] == "B" and d[0].isdigit():
        return parse_size(d)
    return d


def test_conf_file_equals_embedded_defaults():
    with open(ROOT / "conf" / "brokerscope.toml", "rb") as fh:
        conf = tomllib.load(fh)
    assert _sizes(conf) == _sizes(defaults())
    assert _sizes(Settings.load(ROOT / "conf" / "brokerscope.toml").raw) == _sizes(defaults())


def test_overrides_and_ports(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[capture]\nsplit_size = "1MiB"\n[ports]\nkafka = [19092]\n[payload]\npolicy = "hash"\n')
    s = Settings.load(f, {"lake": {"path": "/x"}})
    assert s.split_size == 1 << 20 and s.lake_path == "/x"
    assert s.ports[19092] == "kafka" and 9092 not in s.ports
    s.add_port("pulsar", 16650)
    assert s.ports[16650] == "pulsar"
    assert s.context("kafka").payload.mode == "hash"
    assert s.context("pulsar").max_frame_bytes == 5 << 20
    assert s.context("kafka").max_frame_bytes == 100 << 20


@pytest.mark.parametrize(
    "text, message",
    [
        ("[payload]\npolicy = 'encrypt'\n", "payload.policy"),
        ("[capture]\nsplitsize = 1\n", "unknown setting capture.splitsize"),
        ("[ports]\nkafka = [70000]\n", "ports.kafka"),
        ("[capture]\nbatch_bytes = '4GiB'\n", "capture.batch_bytes"),
        ("[capture]\nbatch_bytes = 100\n", "capture.batch_bytes"),
        ("[inputs]\nexclude = '*.tmp'\n", "inputs.exclude must be a list of globs"),
        ("[spark]\npacket_runs = 'false'\n", "spark.packet_runs must be true or false"),
        ("[spark]\nml_jars = 'yes'\n", "spark.ml_jars must be true or false"),
        ("[capture]\nsplit_size = true\n", "capture.split_size: not a size: True"),
        # found by a user trial: these crashed every Spark task (a traceback per task) ...
        ("[capture]\nbatch_packets = 'many'\n", "^capture.batch_packets must be a whole number, not 'many'$"),
        ("[tcp]\nidle_timeout_s = 'ten'\n", "^tcp.idle_timeout_s must be a number, not 'ten'$"),
        ("[tcp]\nreorder_timeout_s = 'ten'\n", "^tcp.reorder_timeout_s must be a number"),
        ("[limits]\nmax_frame_bytes = 'lots'\n", "^limits.max_frame_bytes: not a size: 'lots'"),
        ("[protocols.pulsar]\nmax_frame_bytes = 'lots'\n", "^protocols.pulsar.max_frame_bytes: not a size"),
        ("[protocols.iggy]\nmax_raw_bytes = -5\n", "^protocols.iggy.max_raw_bytes must be at least 0 bytes"),
        # ... or a Python traceback before Spark
        ("lake = 'x'\n", "^lake must be a table, not 'x'$"),
        ("[capture.split_size]\nx = 1\n", "^capture.split_size must be a setting, not a table"),
        ("[lake]\nwriter = 'delta'\n", "^lake.writer must be auto|spark|embedded, not 'delta'$"),
        ("[lake]\npath = ''\n", "^lake.path must be a non-empty string"),
        ("[spark]\nmaster = 5\n", "^spark.master must be a non-empty string, not 5$"),
        # ... or decoded nothing, exit 0: every stream unknown, every frame oversize
        ("[tcp]\nsniff_bytes = 0\n", "^tcp.sniff_bytes must be from 64 bytes to 16,777,216 bytes, not 0$"),
        ("[limits]\nmax_frame_bytes = -1\n", "^limits.max_frame_bytes must be from 1,024 bytes"),
        ("[capture]\nbatch_packets = -5\n", "^capture.batch_packets must be at least 1, not -5$"),
        ("[tcp]\nmax_reorder_bytes = -1\n", "^tcp.max_reorder_bytes must be at least 0 bytes"),
        ("[payload]\ntruncate_bytes = -1\n", "^payload.truncate_bytes must be at least 0 bytes"),
        ("[spark]\nshuffle_partitions = 'auto'\n", "^spark.shuffle_partitions must be a whole number"),
        ("[spark]\nshuffle_partitions = 2.5\n", "^spark.shuffle_partitions must be a whole number"),
        ("[tcp]\nreorder_timeout_s = nan\n", "^tcp.reorder_timeout_s must be a number, not nan$"),
        ("[lake]\nvacuum_retain_hours = -1\n", "^lake.vacuum_retain_hours must be at least 0"),
        ("[protocols.mqtt]\nmax_frame_bytes = 5\n", "^protocols.mqtt: unknown protocol"),
        ("[protocols.pulsar]\nschema_file = 'x'\n", "^unknown setting protocols.pulsar.schema_file$"),
        ("[protocols.tubemq]\nschema_file = 5\n", "^protocols.tubemq.schema_file must be a string"),
        ("[ports]\nkafka = [true]\n", "ports.kafka must be a list of TCP ports"),
        ("[filter]\nhosts = '10.0.0.1'\n", "^filter.hosts must be a list"),
    ],
)
def test_bad_settings_are_named(tmp_path, text, message):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ValueError, match=message):
        Settings.load(f)


def _boolean_settings(d: dict, where: str = "") -> list[tuple[str, str]]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += _boolean_settings(v, f"{where}{k}.")
        elif isinstance(v, bool):
            out.append((where.rstrip("."), k))
    return out


@pytest.mark.parametrize(("section", "key"), _boolean_settings(defaults()), ids=lambda v: v)
def test_every_boolean_setting_refuses_a_quoted_false(tmp_path, section, key):
    """A quoted "false" is a non-empty string: it was taken for true wherever a setting was read
    with bool() (found by a user trial: [tls] keylog_insecure_ok = "false" let a key log any
    process may read in; [journeys] enabled = "false" wrote journeys)."""
    f = tmp_path / "bad.toml"
    f.write_text(f'[{section}]\n{key} = "false"\n')
    with pytest.raises(ValueError, match=f"^{section}.{key} must be true or false, not 'false'$"):
        Settings.load(f)


def test_sizes_and_numbers_in_range_are_taken(tmp_path):
    """The edges of the ranges are allowed, sizes as strings or plain bytes."""
    f = tmp_path / "ok.toml"
    f.write_text(
        "[tcp]\nsniff_bytes = 64\nidle_timeout_s = 1.5\nreorder_timeout_s = 0\n"
        "[limits]\nmax_frame_bytes = '1KiB'\nmax_raw_bytes = 0\n"
        "[protocols.iggy]\nmax_frame_bytes = '2MiB'\n[spark]\nshuffle_partitions = 0\n"
    )
    s = Settings.load(f)
    assert s.sniff_bytes == 64 and s.idle_timeout_ns == 1_500_000_000 and s.reorder_timeout_ns == 0
    assert s.context("kafka").max_frame_bytes == 1024 and s.context("kafka").max_raw_bytes == 0
    assert s.context("iggy").max_frame_bytes == 2 << 20
    f.write_text("[tcp]\nidle_timeout_s = '30'\n[capture]\nbatch_packets = ' 100 '\n")  # quoted, as before
    s = Settings.load(f)
    assert s.idle_timeout_ns == 30_000_000_000 and s.batch_packets == 100


def test_filter_times_as_epoch_seconds_or_toml_date_times(tmp_path):
    """[filter] since/until take epoch seconds and TOML's own date-times, unquoted (the type
    checks of every setting refused them as 'must be a string' for a while)."""
    f = tmp_path / "t.toml"
    f.write_text("[filter]\nsince = 1700000000\nuntil = 2023-11-14T22:23:20Z\n")
    assert Settings.load(f).packet_filter.text() == "since=2023-11-14T22:13:20Z;until=2023-11-14T22:23:20Z"
    f.write_text("[filter]\nsince = true\n")
    with pytest.raises(ValueError, match="filter.since: not a time: True"):
        Settings.load(f)


def test_iggy_frame_limit_from_its_section_as_a_size_string():
    """[protocols.iggy] max_frame_bytes = "2MiB" was int("2MiB") in every Iggy connection."""
    from brokerscope.protocols.base import ConnInfo
    from brokerscope.protocols.iggy.conversation import IggyConversation

    s = Settings.load(None, {"protocols": {"iggy": {"max_frame_bytes": "2MiB"}}})
    conn = ConnInfo("c1", "10.0.0.1", 50000, "10.0.0.2", 8090)
    conv = IggyConversation(conn, s.context("iggy"))
    assert conv.max_frame == 2 << 20


def test_a_toml_syntax_error_names_the_file(tmp_path):
    """Found by a user trial: tomllib's message alone did not say which file."""
    conf = tmp_path / "night.toml"
    conf.write_text('[lake\npath = "x"\n')
    with pytest.raises(ValueError, match=rf"^{conf}: not valid TOML: Expected '\]' at the end of a table"):
        Settings.load(conf)


def test_missing_conf_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="config file not found"):
        Settings.load(tmp_path / "nope.toml")
