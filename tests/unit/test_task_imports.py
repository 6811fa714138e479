"""Spark tasks keep pandas out of their Python worker (pipeline.keep_pandas_out), and decode the
same rows without it; a worker freezes its modules' objects out of the collector's passes once
(pipeline.settle_collector); the driver imports what the first call into a new JVM needs while the
JVM starts (pipeline._import_while_the_jvm_starts)."""

import json
import subprocess
import sys
from pathlib import Path

from brokerscope import pipeline

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = [
    str(ROOT / "sample_data" / "kafka" / "lz4.pcap"),
    str(ROOT / "sample_data" / "pulsar"),
    str(ROOT / "sample_data" / "tubemq"),
]

# In a fresh interpreter, as a Python worker runs a task: the rows of the captures, and whether
# pandas got loaded on the way.
SCRIPT = """
import hashlib, json, sys
from brokerscope import pipeline, streams
if sys.argv[1] == "keep-out":
    pipeline.keep_pandas_out()
rows = streams.decode_files(sys.argv[2:])
digest = {
    t: [len(v), hashlib.sha256(json.dumps(v, sort_keys=True, default=repr).encode()).hexdigest()]
    for t, v in rows.items() if not t.startswith("_")
}
print(json.dumps({"pandas": sys.modules.get("pandas") is not None, "rows": digest}))
"""


def _run(mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, *CAPTURES], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_tasks_decode_the_same_rows_without_pandas():
    kept_out, usual = _run("keep-out"), _run("usual")
    assert not kept_out["pandas"]
    assert kept_out["rows"] == usual["rows"]
    assert usual["rows"]["messages"][0] > 0 and usual["rows"]["commands"][0] > 0


FREEZE = """
import gc, json
from brokerscope import pipeline
before = gc.get_freeze_count()
pipeline.settle_collector()
first = gc.get_freeze_count()
[object() for _ in range(10)]
junk = [[i] for i in range(1000)]
pipeline.settle_collector()
print(json.dumps([before, first, gc.get_freeze_count(), gc.get_threshold()]))
"""


def test_a_worker_settles_its_collector_once():
    """The modules' objects leave the collector's passes at the first decode task and the
    collector runs less often; later tasks' objects stay collectable (a second call freezes
    nothing more)."""
    out = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, check=True)
    before, first, again, thresholds = json.loads(out.stdout)
    assert before == 0 and first > 10_000
    assert again == first
    assert tuple(thresholds) == pipeline.GC_THRESHOLDS


FIRST_CALL = """
import json, sys, threading
from brokerscope import pipeline
before = pipeline._FIRST_CALL_IMPORTS in sys.modules
pipeline._import_while_the_jvm_starts()
for t in threading.enumerate():
    if t.name == "brokerscope-imports":
        t.join()
print(json.dumps([before, pipeline._FIRST_CALL_IMPORTS in sys.modules, "pandas" in sys.modules]))
"""


def test_the_driver_imports_what_the_first_jvm_call_needs_beside_the_jvm_start():
    """make_spark starts the import of what PySpark's first call into a new JVM imports (pandas,
    through pyspark.testing.utils) in a thread, so the driver's 0.4 CPU s overlap the JVM's start."""
    out = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, True, True]
