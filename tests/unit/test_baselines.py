"""Every decoded row of every sample and public capture, compared with its stored baseline.

A change to decoded rows fails here with the diff; when the change is meant, regenerate the
baselines with `make baselines` (pytest tests/unit/test_baselines.py --update-baselines) and
review the diff of tests/baselines/ in the commit."""

from __future__ import annotations

import difflib

import pytest

from tests.support.baselines import BASELINES, baseline_dir, render, sources

SOURCES = sources()


def test_every_sample_input_has_a_baseline():
    labels = {label for label, _ in SOURCES}
    assert sum(label.startswith("sample_data/") for label in labels) >= 20
    for label in labels:
        assert baseline_dir(label).is_dir(), f"no baseline for {label}: run make baselines"
    stored = {
        p.parent.relative_to(BASELINES).as_posix() for p in (BASELINES / "sample_data").rglob("*.jsonl")
    }
    assert stored <= labels, f"baselines of inputs that are gone: {sorted(stored - labels)}"


@pytest.mark.parametrize(("label", "path"), SOURCES, ids=[label for label, _ in SOURCES])
def test_decoded_rows_match_the_baseline(label, path, request):
    got = render(path, label)
    where = baseline_dir(label)
    if request.config.getoption("--update-baselines"):
        where.mkdir(parents=True, exist_ok=True)
        for table, text in got.items():
            (where / f"{table}.jsonl").write_text(text, encoding="utf-8")
        return
    problems = []
    for table, text in got.items():
        f = where / f"{table}.jsonl"
        want = f.read_text(encoding="utf-8") if f.is_file() else ""
        if text != want:
            diff = difflib.unified_diff(
                want.splitlines(), text.splitlines(), f"baseline {table}", f"now {table}", n=0, lineterm=""
            )
            problems.append("\n".join(list(diff)[:40]))
    assert not problems, (
        f"{label}: decoded rows differ from tests/baselines/{label} "
        "(if meant: make baselines, then review the diff)\n" + "\n".join(problems)
    )
