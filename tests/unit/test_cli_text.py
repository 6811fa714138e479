"""The command's own text: each subcommand's --help says what it does, the run summary counts."""

from brokerscope import cli
from brokerscope.report import Summary


def test_every_subcommand_help_starts_with_what_it_does():
    parser = cli.build_parser()
    sub = parser._subparsers._group_actions[0]
    listed = {a.dest: a.help for a in sub._choices_actions}
    assert {"ingest", "sql", "extract", "report", "demo"} <= set(listed)
    for name, p in sub.choices.items():
        text = " ".join(p.format_help().split())
        assert listed[name] and " ".join(listed[name].split()) in text, name


def test_summary_counts_connections_in_the_right_number():
    one = Summary(run_id="r", files=1, connections=1).lines()[0]
    many = Summary(run_id="r", files=1, connections=2).lines()[0]
    assert "1 connection," in one and "2 connections," in many
