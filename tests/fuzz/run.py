"""Run the fuzz targets with atheris (libFuzzer), one subprocess per target.

    python -m tests.fuzz.run [--target NAME|all] [--seconds N | --runs N] [--corpus DIR]
                             [--artifacts DIR] [--jobs N] [--seed N] [--no-time-check]

Each target fuzzes in its own process (atheris.Fuzz never returns): brokerscope is instrumented
as it is imported, the corpus directory `<corpus>/<target>` is seeded from sample_data/ when empty
(tests/fuzz/seeds.py) and grows with what libFuzzer finds. A failure (an exception, an invariant,
an input slower than --slow-ms-per-kb per KiB, at least 100 ms) is saved by libFuzzer under
--artifacts as `<target>-crash-<sha1>` with a `.txt` next to it (signature and traceback); the
worker then restarts with that signature ignored, so one bug does not hide the others, until the
time (or run count) is used up. Prints per target: inputs executed, exec/s, libFuzzer's `cov:` and
`ft:`, corpus size and failures; exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

TARGET_NAMES = (
    "kafka",
    "pulsar",
    "iggy",
    "tubemq",
    "kafka_segment",
    "iggy_segment",
    "capture",
    "capture_compiled",
    "tcp",
    "tls",
    "tls_capture",
    "iggy_batch",
    "tubemq_rpc",
    "tubemq_exchanges",
    "pulsar_batch",
    "kafka_body",
    "details_json",
)
MAX_LEN = 1 << 16
PER_INPUT_TIMEOUT = 60  # libFuzzer -timeout, seconds: a hang is a failure too
# A worker that has not exited this long after its time budget (or, counting runs, at all) is
# killed: libFuzzer ends with exit(), whose static destructors can deadlock (pyarrow's thread pool
# waiting on a thread that releases a Python buffer and needs the GIL the exiting thread holds;
# seen once in CI after "Done 300 runs"). Its output up to then is what it did.
WORKER_GRACE = 300
MAX_RESTARTS = 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------------------------------
# worker (inside the fuzzed process)


class SlowInput(Exception):
    """An input took longer than the time budget for its size."""


def signature(e: BaseException) -> str:
    """A stable name for a failure: the invariant's kind, or the exception type and the innermost
    brokerscope frame (file:line), else the innermost frame."""
    if getattr(e, "kind", None):
        return f"{type(e).__name__}: {e.kind}"
    if isinstance(e, SlowInput):
        return "SlowInput"
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if f"{os.sep}brokerscope{os.sep}" in f.filename] or frames
    if not ours:
        return type(e).__name__
    f = ours[-1]
    path = (
        f.filename.split(f"{os.sep}src{os.sep}")[-1] if f"{os.sep}src{os.sep}" in f.filename else f.filename
    )
    return f"{type(e).__name__} at {path}:{f.lineno} ({f.name})"


def _instrument() -> None:
    """Import every brokerscope module a target reaches, instrumented."""
    import atheris

    with atheris.instrument_imports(include=["brokerscope"]):
        import importlib
        import pkgutil

        import brokerscope.capture
        import brokerscope.protocols
        import brokerscope.streams
        import brokerscope.tables
        import brokerscope.tcp
        import brokerscope.tls

        for pkg in (brokerscope.protocols, brokerscope.capture, brokerscope.tcp, brokerscope.tls):
            for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
                importlib.import_module(m.name)
        from brokerscope.protocols import base

        base.protocols()


def timed(fn, slow_ms_per_kb: float | None, ignore: set[str], failures: str):
    """`fn` with the time check and the failure bookkeeping of one fuzz iteration."""

    def budget(n: int) -> float:
        return max(0.1, slow_ms_per_kb / 1000 * n / 1024)

    def once(data: bytes) -> None:
        try:
            t0 = time.perf_counter()
            fn(data)
            took = time.perf_counter() - t0
            if slow_ms_per_kb is not None and took > budget(len(data)):
                t0 = time.perf_counter()  # once more: a GC pause or a busy machine is not a finding
                fn(data)
                took = time.perf_counter() - t0
                if took > budget(len(data)):
                    raise SlowInput(
                        f"{took * 1000:.0f} ms for {len(data)} bytes (budget {budget(len(data)) * 1000:.0f} ms)"
                    )
        except Exception as e:
            sig = signature(e)
            if sig in ignore:
                return
            info = {
                "signature": sig,
                "error": f"{type(e).__name__}: {e}"[:1000],
                "traceback": traceback.format_exc(),
            }
            with open(os.path.join(failures, hashlib.sha1(data).hexdigest() + ".json"), "w") as f:
                json.dump(info, f)
            raise

    return once


def worker(argv: list[str]) -> None:
    """`--worker NAME [--ignore SIG]... [--slow-ms-per-kb X] --failures DIR -- <libFuzzer args>`"""
    import atheris

    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--ignore", action="append", default=[])
    ap.add_argument("--slow-ms-per-kb", type=float)
    ap.add_argument("--failures", required=True)
    sep = argv.index("--")
    a = ap.parse_args(argv[:sep])
    _instrument()
    from . import targets

    fn = targets.TARGETS[a.worker]
    for warm in (b"", b"\x00" * 64):  # lazy imports and caches, before the clock counts
        try:
            fn(warm)
        except Exception:
            pass
    atheris.Setup([sys.argv[0], *argv[sep + 1 :]], timed(fn, a.slow_ms_per_kb, set(a.ignore), a.failures))
    atheris.Fuzz()


# ---------------------------------------------------------------------------------------------
# driver


@dataclass
class Failure:
    target: str
    signature: str
    error: str
    path: str  # the input libFuzzer saved
    traceback: str = ""


@dataclass
class Result:
    target: str
    execs: int = 0
    seconds: float = 0.0
    cov: int = 0
    ft: int = 0
    corpus: int = 0
    seeds: int = 0
    failures: list[Failure] = field(default_factory=list)
    log: str = ""

    @property
    def exec_per_s(self) -> float:
        return self.execs / self.seconds if self.seconds else 0.0


_COV = re.compile(r"cov: (\d+) ft: (\d+)(?: corp: (\d+))?")
_EXECS = re.compile(r"stat::number_of_executed_units: (\d+)")
_DONE = re.compile(r"Done (\d+) runs")
_ARTIFACT = re.compile(r"Test unit written to (\S+)")
_PULSE = re.compile(r"^#(\d+)\s", re.M)


def _parse(out: str, res: Result) -> tuple[int, list[str]]:
    """Update coverage from libFuzzer's output; return (inputs executed, artifacts written)."""
    covs = _COV.findall(out)
    if covs:
        cov, ft, corp = covs[-1]
        res.cov, res.ft = max(res.cov, int(cov)), max(res.ft, int(ft))
        if corp:
            res.corpus = int(corp)
    m = _EXECS.findall(out) or _DONE.findall(out) or _PULSE.findall(out)
    return (int(m[-1]) if m else 0), _ARTIFACT.findall(out)


def fuzz_target(
    target: str,
    *,
    seconds: float | None = None,
    runs: int | None = None,
    corpus: str,
    artifacts: str,
    seed: int | None = None,
    slow_ms_per_kb: float | None = 100.0,
    max_len: int = MAX_LEN,
    extra: list[str] | None = None,
    restarts: int = MAX_RESTARTS,
) -> Result:
    """Fuzz one target for `seconds` (or `runs` inputs), restarting after each failure."""
    from .seeds import write_seeds

    res = Result(target)
    cdir = os.path.join(corpus, target)
    os.makedirs(cdir, exist_ok=True)
    if not os.listdir(cdir):
        res.seeds = write_seeds(target, cdir)
    failures = os.path.join(artifacts, ".failures")
    os.makedirs(failures, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"fuzz-{target}-")
    ignore: list[str] = []
    start = time.monotonic()
    logs = []
    try:
        for _ in range(restarts + 1):
            limit = []
            if seconds is not None:
                left = int(seconds - (time.monotonic() - start))
                if left < 1 and logs:
                    break
                limit.append(f"-max_total_time={max(1, left)}")
            if runs is not None:
                if runs - res.execs <= 0:
                    break
                limit.append(f"-runs={runs - res.execs}")
            cmd = [sys.executable, "-m", "tests.fuzz.run", "--worker", target, "--failures", failures]
            cmd += [x for sig in ignore for x in ("--ignore", sig)]
            if slow_ms_per_kb is not None:
                cmd += ["--slow-ms-per-kb", str(slow_ms_per_kb)]
            cmd += ["--", cdir, *limit, f"-max_len={max_len}", f"-timeout={PER_INPUT_TIMEOUT}"]
            cmd += [f"-artifact_prefix={os.path.join(artifacts, target)}-", "-print_final_stats=1"]
            cmd += ["-rss_limit_mb=4096"]
            if seed is not None:
                cmd.append(f"-seed={seed}")
            cmd += extra or []
            path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
            env = {**os.environ, "BROKERSCOPE_FUZZ_WORKDIR": work, "PYTHONPATH": path}
            budget = (seconds or 0) + WORKER_GRACE
            try:
                p = subprocess.run(
                    cmd, cwd=ROOT, env=env, capture_output=True, text=True, errors="replace", timeout=budget
                )
                out, rc = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                out = "".join(
                    x.decode(errors="replace") if isinstance(x, bytes) else x or ""
                    for x in (e.stdout, e.stderr)
                )
                rc = 0 if _DONE.search(out) else -9  # stuck in exit() after its last run: done
                out += f"\n(worker killed after {budget:.0f} s)\n"
            logs.append(out)
            n, written = _parse(out, res)
            res.execs += n
            if rc == 0 and not written:
                if seconds is None or time.monotonic() - start >= seconds - 1:
                    break
                continue
            new = _failures(target, written, failures, out)
            if not new:  # a crash without an input (should not happen): stop, the log says why
                res.failures.append(Failure(target, "worker failed", f"exit code {rc}", ""))
                break
            res.failures.extend(new)
            ignore.extend(f.signature for f in new if f.signature not in ignore)
    finally:
        res.seconds = time.monotonic() - start
        res.log = "".join(logs)
        with open(os.path.join(artifacts, f"{target}.log"), "w") as f:
            f.write(res.log)
        shutil.rmtree(work, ignore_errors=True)
    return res


def _failures(target: str, written: list[str], failures: str, out: str) -> list[Failure]:
    found = []
    for path in written:
        path = os.path.join(ROOT, path) if not os.path.isabs(path) else path
        try:
            with open(path, "rb") as f:
                h = hashlib.sha1(f.read()).hexdigest()
        except OSError:
            continue
        info_path = os.path.join(failures, h + ".json")
        if os.path.exists(info_path):
            with open(info_path) as f:
                info = json.load(f)
            with open(path + ".txt", "w") as f:
                f.write(f"{info['signature']}\n\n{info['traceback']}")
        else:  # a timeout or out-of-memory: libFuzzer's own message
            kind = os.path.basename(path).split("-")[-2] if "-" in os.path.basename(path) else "crash"
            msg = next((ln for ln in out.splitlines() if "ERROR: libFuzzer" in ln or "ALARM" in ln), kind)
            info = {"signature": kind, "error": msg.strip(), "traceback": ""}
        found.append(Failure(target, info["signature"], info["error"], path, info["traceback"]))
    return found


def run_all(targets: list[str], jobs: int, **kw) -> list[Result]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        return list(ex.map(lambda t: fuzz_target(t, **kw), targets))


def report(results: list[Result]) -> str:
    lines = [f"{'target':<14} {'inputs':>9} {'exec/s':>8} {'cov':>6} {'ft':>7} {'corpus':>7} {'failures':>8}"]
    for r in results:
        lines.append(
            f"{r.target:<14} {r.execs:>9} {r.exec_per_s:>8.0f} {r.cov:>6} {r.ft:>7} {r.corpus:>7} {len(r.failures):>8}"
        )
    for r in results:
        for f in r.failures:
            lines.append(f"FAIL {f.target}: {f.signature}\n     {f.error.splitlines()[0] if f.error else ''}")
            lines.append(f"     input: {f.path}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--worker" in argv:
        worker(argv)
        return 0  # not reached: libFuzzer exits
    ap = argparse.ArgumentParser(description="Fuzz brokerscope with atheris.")
    ap.add_argument("--target", default="all", help=f"all or one of {', '.join(TARGET_NAMES)}")
    ap.add_argument("--seconds", type=float, default=None, help="per target (default 60 unless --runs)")
    ap.add_argument("--runs", type=int, default=None, help="inputs per target (libFuzzer -runs)")
    ap.add_argument("--corpus", help="corpus root, kept (default: a temporary directory)")
    ap.add_argument("--artifacts", help="where failing inputs go (default: a new temporary directory)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="targets run in parallel")
    ap.add_argument("--seed", type=int, default=None, help="libFuzzer -seed")
    ap.add_argument("--max-len", type=int, default=MAX_LEN)
    ap.add_argument("--slow-ms-per-kb", type=float, default=100.0)
    ap.add_argument("--no-time-check", action="store_true")
    a = ap.parse_args(argv)
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("atheris is not installed: pip install atheris (make test installs it)", file=sys.stderr)
        return 2
    names = list(TARGET_NAMES) if a.target == "all" else a.target.split(",")
    bad = [n for n in names if n not in TARGET_NAMES]
    if bad:
        ap.error(f"unknown target(s) {bad}; known: {', '.join(TARGET_NAMES)}")
    seconds = a.seconds if a.seconds is not None or a.runs is not None else 60.0
    tmp = tempfile.mkdtemp(prefix="brokerscope-fuzz-")
    corpus = a.corpus or os.path.join(tmp, "corpus")
    artifacts = os.path.abspath(a.artifacts or os.path.join(tmp, "artifacts"))
    os.makedirs(artifacts, exist_ok=True)
    print(
        f"fuzzing {', '.join(names)}: corpus {corpus}, failing inputs and logs under {artifacts}", flush=True
    )
    results = run_all(
        names,
        a.jobs,
        seconds=seconds,
        runs=a.runs,
        corpus=os.path.abspath(corpus),
        artifacts=artifacts,
        seed=a.seed,
        slow_ms_per_kb=None if a.no_time_check else a.slow_ms_per_kb,
        max_len=a.max_len,
    )
    print(report(results))
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
