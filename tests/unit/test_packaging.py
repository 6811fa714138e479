"""Packaging: the package data pyproject names exists, runtime code imports only what the runtime
dependencies install, every runtime dependency is used, and `brokerscope --version` answers."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import packages_distributions

import pytest

from brokerscope import __version__
from tests.conftest import ROOT

SRC = ROOT / "src" / "brokerscope"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# runtime dependencies that runtime code does not import by name, and why they are needed
NOT_IMPORTED = {
    "pandas": "PySpark's mapInArrow and toPandas need it",
    "delta-spark": "delta-spark's writer is used when its jars are on the classpath",
    "kafka-python": "its Kafka JSON message specs are read as data (found with importlib.util.find_spec)",
}


def _dist(req: str) -> str:
    return re.split(r"[=<>!~ \[;]", req, maxsplit=1)[0].lower()


def _runtime() -> set[str]:
    return {_dist(r) for r in PYPROJECT["project"]["dependencies"]}


def _imported_top_modules() -> set[str]:
    mods = set()
    for f in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                mods.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return mods - set(sys.stdlib_module_names) - {"brokerscope", "__future__"}


def test_package_data_exists():
    for pattern in PYPROJECT["tool"]["setuptools"]["package-data"]["brokerscope"]:
        assert list(SRC.glob(pattern)), f"pyproject names package data that does not exist: {pattern}"


def test_runtime_imports_are_runtime_dependencies_and_back():
    dists = packages_distributions()
    runtime = _runtime()
    used = set()
    for mod in sorted(_imported_top_modules()):
        provided = {d.lower() for d in dists.get(mod, [])}
        assert provided & runtime, (
            f"src imports {mod} ({provided or 'not installed'}), not a runtime dependency"
        )
        used |= provided & runtime
    unused = runtime - used - set(NOT_IMPORTED)
    assert not unused, f"runtime dependencies that src never imports: {sorted(unused)}"


def test_version():
    out = subprocess.run(
        [sys.executable, "-m", "brokerscope.cli", "--version"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == f"brokerscope {__version__}"


@pytest.mark.slow
def test_an_installed_package_carries_the_log4j_configuration(tmp_path):
    """A non-editable install has no repository conf/: the wheel carries conf/log4j2.properties
    and the installed pipeline hands that copy to the JVM."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, ROOT],
        check=True,
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("brokerscope-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert (
            z.read("brokerscope/conf/log4j2.properties") == (ROOT / "conf" / "log4j2.properties").read_bytes()
        )
        z.extractall(tmp_path / "site")
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from brokerscope import pipeline; print(pipeline.LOG4J_PLACES[0].is_file(), pipeline.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["True", str(tmp_path / "site" / "brokerscope" / "pipeline.py")]


def test_the_zip_shipped_to_executors_carries_bytecode_its_workers_read(tmp_path):
    """pipeline.package_zip (what _ship_package adds to executors' path): every module with a
    hash-checked .pyc beside it, which zipimport reads instead of compiling the source; a .pyc
    whose source changed is not read (the source is)."""
    from brokerscope import pipeline

    zpath = tmp_path / "brokerscope.zip"
    pipeline.package_zip(zpath)
    with zipfile.ZipFile(zpath) as z:
        names = set(z.namelist())
    sources = {n for n in names if n.endswith(".py") and not n.endswith("/__init__.py")}
    assert sources and all(n + "c" in names for n in sources)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import brokerscope.sqltext as m; "
        "print(m.__file__); print(m.blank('  '))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(zpath)], capture_output=True, text=True, check=True
    )
    file, statements = out.stdout.splitlines()
    assert file.endswith("brokerscope/sqltext.pyc"), file
    assert statements == "True"
    # the same zip with sqltext.py changed: its .pyc no longer matches, the source is what runs
    stale = tmp_path / "stale.zip"
    with zipfile.ZipFile(zpath) as src, zipfile.ZipFile(stale, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "brokerscope/sqltext.py":
                data += b"\nCHANGED = True\n"
            dst.writestr(item, data)
    code = "import sys; sys.path.insert(0, sys.argv[1]); import brokerscope.sqltext as m; print(m.__file__, m.CHANGED)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, str(stale)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == [str(stale / "brokerscope" / "sqltext.py"), "True"]
