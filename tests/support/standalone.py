"""A real Spark standalone cluster on loopback for tests: one master and N workers started with
pyspark's own `bin/spark-class`, plus `spark-submit` against it.

Every process is started in its own session (process group). `stop()` signals those groups and
then every descendant recorded while the cluster ran (executors, Python worker daemons, which move
to their own process group), so nothing outlives the test. Nothing here knows about brokerscope.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


def spark_home() -> Path:
    """SPARK_HOME of the installed pyspark (the package directory holds bin/ and jars/)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def java_missing() -> str | None:
    """Why Spark cannot start here (no Java), or None when a `java` is available."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return None
    if shutil.which("java"):
        return None
    return "Java is not installed (Spark needs Java 17+ on PATH or JAVA_HOME)"


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _stat(pid: int) -> tuple[int, bytes, int] | None:
    """(ppid, state, start time in clock ticks) of a process, from /proc (Linux); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    # pid (comm) state ppid ... field 22 = starttime; comm may hold spaces: split after the last ')'
    rest = stat[stat.rindex(b")") + 2 :].split()
    return int(rest[1]), rest[0], int(rest[19])


def descendants(pids: list[int]) -> dict[int, int]:
    """Every live descendant of `pids` (not the pids themselves): pid -> start time, so that a
    pid is only ever signalled while it still names the same process."""
    kids: dict[int, list[tuple[int, int]]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit() and (st := _stat(int(d))) is not None:
            kids.setdefault(st[0], []).append((int(d), st[2]))
    seen: dict[int, int] = {}
    todo = list(pids)
    while todo:
        for c, start in kids.get(todo.pop(), []):
            if c not in seen:
                seen[c] = start
                todo.append(c)
    return seen


def _same_alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st[2] == start and st[1] != b"Z"


def _signal(tree: dict[int, int], sig: int) -> None:
    for pid, start in tree.items():
        if _same_alive(pid, start):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def kill_tree(
    procs: list[subprocess.Popen], extra: dict[int, int] | None = None, grace: float = 10.0
) -> None:
    """SIGTERM the process groups of `procs`, their descendants and the recorded processes in
    `extra` (pid -> start time), wait up to `grace` seconds, then SIGKILL whatever is left.
    Only processes we started, or that descend from them, are signalled."""
    live = [p for p in procs if p.poll() is None]
    tree = dict(extra or {})
    tree.update(descendants([p.pid for p in live]))
    for p in live:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _signal(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if all(p.poll() is not None for p in live) and not any(_same_alive(x, s) for x, s in tree.items()):
            break
        time.sleep(0.2)
    tree.update(descendants([p.pid for p in live if p.poll() is None]))
    for p in live:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _signal(tree, signal.SIGKILL)
    for p in live:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


@dataclass
class Worker:
    webui_port: int
    work_dir: Path
    log: Path
    proc: subprocess.Popen


@dataclass
class StandaloneCluster:
    """A running master and its workers; use `start()` to make one and `stop()` to end it."""

    home: Path
    base: Path
    master_port: int
    master_webui_port: int
    master_log: Path
    master_proc: subprocess.Popen
    workers: list[Worker] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    _seen: dict[int, int] = field(default_factory=dict)  # descendants seen: pid -> start time
    started_in: float = 0.0  # seconds from start() to every worker ALIVE

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    # -- lifecycle ------------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        base: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        timeout: float = 90.0,
        daemon_java_opts: str = "",
    ) -> StandaloneCluster:
        """Start a master and `workers` workers under `base` (logs, work dirs, conf dir) and wait
        until every worker is registered and ALIVE. Raises (after stopping everything) if that
        does not happen within `timeout` seconds. `daemon_java_opts` go to the master and worker
        JVMs (SPARK_DAEMON_JAVA_OPTS)."""
        t0 = time.monotonic()
        home = spark_home()
        base = Path(base)
        conf_dir = base / "conf"  # empty: no stray spark-defaults.conf / spark-env.sh is read
        for d in (conf_dir, base / "logs", base / "local"):
            d.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(home),
                "SPARK_CONF_DIR": str(conf_dir),
                "SPARK_LOG_DIR": str(base / "logs"),
                "SPARK_LOCAL_DIRS": str(base / "local"),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_DAEMON_MEMORY": "512m",
                "SPARK_DAEMON_JAVA_OPTS": daemon_java_opts,
                "PYSPARK_PYTHON": sys.executable,
            }
        )
        # a PYSPARK_SUBMIT_ARGS or SPARK_MASTER_* from the caller's shell must not leak in
        for k in ("PYSPARK_SUBMIT_ARGS", "SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_WORKER_DIR"):
            env.pop(k, None)
        spark_class = str(home / "bin" / "spark-class")
        mport, mweb = free_port(), free_port()
        mlog = base / "logs" / "master.log"
        mproc = spawn(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(mport),
                "--webui-port",
                str(mweb),
            ],
            env,
            mlog,
        )
        cluster = cls(home, base, mport, mweb, mlog, mproc, env=env)
        try:
            deadline = time.monotonic() + timeout
            state = cluster._wait(lambda s: s is not None, deadline, "the master's web UI to answer")
            if state.get("url") != cluster.url:
                raise RuntimeError(f"master listens on {state.get('url')}, expected {cluster.url}")
            for i in range(workers):
                wdir = base / f"worker{i}"
                wdir.mkdir(exist_ok=True)
                wweb = free_port()
                wlog = base / "logs" / f"worker{i}.log"
                wproc = spawn(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        cluster.url,
                        "--host",
                        LOOPBACK,
                        "--cores",
                        str(cores),
                        "--memory",
                        memory,
                        "--webui-port",
                        str(wweb),
                        "--work-dir",
                        str(wdir),
                    ],
                    env,
                    wlog,
                )
                cluster.workers.append(Worker(wweb, wdir, wlog, wproc))
            cluster._wait(
                lambda s: s is not None and len(cluster.alive_workers(s)) == workers,
                deadline,
                f"{workers} workers to register",
            )
        except BaseException:
            cluster.stop()
            raise
        cluster.started_in = time.monotonic() - t0
        return cluster

    def stop(self) -> None:
        """End the workers (and their executors), then the master; idempotent."""
        procs = [w.proc for w in self.workers] + [self.master_proc]
        self._seen.update(descendants([p.pid for p in procs if p.poll() is None]))
        kill_tree([w.proc for w in self.workers], self._seen)
        kill_tree([self.master_proc], self._seen)

    def remember_descendants(self) -> None:
        """Record the current process tree (executors, Python daemons) so `stop()` reaches
        processes that re-parented themselves."""
        procs = [w.proc for w in self.workers] + [self.master_proc]
        self._seen.update(descendants([p.pid for p in procs if p.poll() is None]))

    # -- observing ------------------------------------------------------------------------------
    def state(self) -> dict | None:
        """The master's JSON status (/json/), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.master_webui_port}/json/", timeout=5) as r:
                return json.loads(r.read().decode())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    @staticmethod
    def alive_workers(state: dict) -> list[dict]:
        return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]

    def logs(self, tail: int = 4000) -> str:
        """The last `tail` characters of every daemon log, for failure messages."""
        out = []
        for p in [self.master_log] + [w.log for w in self.workers]:
            try:
                out.append(f"--- {p.name}\n" + p.read_text(errors="replace")[-tail:])
            except OSError:
                pass
        return "\n".join(out)

    def _wait(self, ok, deadline: float, what: str) -> dict:
        while True:
            for p in [self.master_proc] + [w.proc for w in self.workers]:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"a Spark daemon exited ({p.returncode}) while waiting for {what}\n{self.logs()}"
                    )
            s = self.state()
            if ok(s):
                return s
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.3)

    # -- submitting -----------------------------------------------------------------------------
    def submit(
        self,
        app_args: list[str],
        conf: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
        executor_python: str | None = None,
    ) -> Submission:
        """Start `spark-submit --master <this cluster> ... app_args`; `.wait()` on the result.
        The driver runs this interpreter (sys.executable), the executors `executor_python`
        (default: the same)."""
        return Submission.start(
            self.url, app_args, self.base, self.env, conf, cwd, extra_args, self, executor_python
        )


@dataclass
class Submission:
    """A running `spark-submit`; its stdout/stderr go to files so nothing blocks on a pipe."""

    cmd: list[str]
    proc: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    cluster: StandaloneCluster | None = None

    @classmethod
    def start(
        cls,
        master: str,
        app_args: list[str],
        log_dir: Path,
        env: dict[str, str] | None = None,
        conf: dict[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
        cluster: StandaloneCluster | None = None,
        executor_python: str | None = None,
    ) -> Submission:
        home = spark_home()
        env = dict(env or os.environ)
        env.setdefault("SPARK_HOME", str(home))
        env["PYSPARK_PYTHON"] = executor_python or sys.executable  # executors (and make_spark)
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.pop("PYSPARK_SUBMIT_ARGS", None)
        cmd = [str(home / "bin" / "spark-submit"), "--master", master]
        for k, v in (conf or {}).items():
            cmd += ["--conf", f"{k}={v}"]
        cmd += list(extra_args or []) + list(app_args)
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        n = len(list(log_dir.glob("submit*.stdout")))
        out_p, err_p = log_dir / f"submit{n}.stdout", log_dir / f"submit{n}.stderr"
        with open(out_p, "wb") as out, open(err_p, "wb") as err:
            proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=cwd,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return cls(cmd, proc, out_p, err_p, cluster)

    def wait(self, timeout: float = 300.0) -> subprocess.CompletedProcess:
        """Wait for spark-submit to end (killed with its process tree after `timeout` s)."""
        deadline = time.monotonic() + timeout
        try:
            while self.proc.poll() is None:
                if self.cluster is not None:
                    # record executors and Python daemons while they live, for cluster.stop()
                    self.cluster.remember_descendants()
                if time.monotonic() > deadline:
                    kill_tree([self.proc])
                    raise TimeoutError(
                        f"spark-submit did not finish within {timeout:.0f} s\n" + self.stderr()[-4000:]
                    )
                time.sleep(0.5)
        finally:
            if self.proc.poll() is None:
                kill_tree([self.proc])
        return subprocess.CompletedProcess(self.cmd, self.proc.returncode, self.stdout(), self.stderr())

    def kill(self) -> None:
        kill_tree([self.proc])

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def spawn(
    cmd: list[str], env: dict[str, str], log: Path, cwd: str | os.PathLike | None = None
) -> subprocess.Popen:
    """Start `cmd` in a session of its own, stdout and stderr both into the file `log`."""
    fh = open(log, "wb")
    try:
        return subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        fh.close()  # the child holds its own copy


def read_event_log(events_dir: Path, app_id: str) -> list[dict]:
    """The events of application `app_id` from an uncompressed Spark event log directory:
    either one file named after the app or a rolling `eventlog_v2_<app>/events_<n>_<app>` set."""
    events_dir = Path(events_dir)
    single = events_dir / app_id
    if single.is_file():
        files = [single]
    else:
        roll = events_dir / f"eventlog_v2_{app_id}"
        files = sorted(roll.glob(f"events_*_{app_id}"), key=lambda f: int(f.name.split("_")[1]))
    if not files:
        raise FileNotFoundError(f"no event log for {app_id} under {events_dir}")
    out = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out
