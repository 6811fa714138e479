"""A bounded fuzz run inside the suite: every target for a fixed number of inputs from a fixed
seed (libFuzzer -runs / -seed), on the seed corpus built from sample_data/; nothing may fail.
The long run is `make fuzz` (tests/fuzz/run.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("atheris", reason="atheris is not installed (pip install -e '.[test]')")

from tests.fuzz import run  # noqa: E402

RUNS = 300  # per target: about 2-3 s each with the worker's start-up, two targets at a time

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, run.Result]:
    tmp = tmp_path_factory.mktemp("fuzz")
    out = run.run_all(
        list(run.TARGET_NAMES),
        jobs=2,
        runs=RUNS,
        seed=1,
        corpus=str(tmp / "corpus"),
        artifacts=str(tmp / "artifacts"),
        slow_ms_per_kb=None,  # timing is for the long run: a loaded CI machine is not a finding
        restarts=0,
    )
    return {r.target: r for r in out}


@pytest.mark.parametrize("target", run.TARGET_NAMES)
def test_bounded_fuzz_finds_nothing(results: dict[str, run.Result], target: str) -> None:
    r = results[target]
    msg = "\n".join(f"{f.signature}: {f.error}\n{f.traceback}\ninput: {f.path}" for f in r.failures)
    assert not r.failures, msg
    assert r.execs >= RUNS, f"{target} ran {r.execs} inputs:\n{r.log[-3000:]}"
    assert r.cov > 0, r.log[-3000:]
