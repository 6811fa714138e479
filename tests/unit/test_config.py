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


def test_missing_conf_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="config file not found"):
        Settings.load(tmp_path / "nope.toml")
