"""Shared fixtures: paths to the public captures and one local Spark session per test run."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "tests" / "data" / "captures"  # public captures, with provenance (README.md there)
SAMPLE_DATA = ROOT / "sample_data"


def public_captures() -> list[Path]:
    return sorted(p for p in CAPTURES.glob("*/*") if p.suffix in (".pcap", ".pcapng"))


@pytest.fixture(scope="session")
def spark():
    """A real local Spark session (2 cores), shared by every Spark test."""
    from brokerscope.config import Settings
    from brokerscope.pipeline import make_spark

    s = Settings.load(overrides={"spark": {"master": "local[2]", "shuffle_partitions": 4}})
    session = make_spark(s, app_name="brokerscope-tests", quiet_progress=True)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sample_lake(spark, tmp_path_factory):
    """A lake of the bundled sample data, ingested once per test run (read it, do not change it),
    with journeys and lag (as `brokerscope ingest --journeys --lag`: the README's queries read them)."""
    from brokerscope import pipeline
    from brokerscope.config import Settings

    lake = tmp_path_factory.mktemp("sample") / "lake"
    over = {
        "lake": {"path": str(lake)},
        "spark": {"shuffle_partitions": 4},
        "journeys": {"enabled": True},
        "lag": {"enabled": True},
    }
    settings = Settings.load(overrides=over)
    pipeline.ingest([str(SAMPLE_DATA)], settings, spark=spark)
    return str(lake)


def pytest_addoption(parser):
    parser.addoption(
        "--update-baselines",
        action="store_true",
        help="rewrite tests/baselines/ from the current decoders (review the diff before committing)",
    )
