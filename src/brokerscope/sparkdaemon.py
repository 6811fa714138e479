"""The Python daemon of a local Spark's workers: pyspark's own (pyspark.daemon), run with the
installed PySpark's modules ahead of Spark's bundled zips on the path.

Spark puts $SPARK_HOME/python/lib/pyspark.zip (and py4j's zip) first on the path of its Python
daemon and workers. With a pip-installed PySpark, SPARK_HOME is that installed package, and its
zips hold the same modules as source only: zipimport compiles every module again in every run
(0.6 CPU s in the daemon before the first task can start, more in each worker for the modules it
adds), while the installed package has its bytecode. A zip moves behind the installed package
only where the package found outside the zips is the zip's own (the same version.py); any other
zip (a cluster's Spark, a different version) stays first. pipeline.make_spark names this module as
`spark.python.daemon.module` for local masters."""

from __future__ import annotations

import importlib.machinery
import os
import sys
import zipfile


def _version_file(root: str, package: str) -> bytes | None:
    """The bytes of `package`/version.py in a zip or a directory of the path, or None."""
    name = f"{package}/version.py"
    try:
        if root.endswith(".zip"):
            with zipfile.ZipFile(root) as z:
                return z.read(name)
        with open(os.path.join(root, name), "rb") as f:
            return f.read()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def installed_first(path: list[str]) -> list[str]:
    """`path` with each zip of pyspark or py4j moved to its end where the path outside the zips
    has the same package (its version.py equal to the zip's)."""
    plain = [p for p in path if not p.endswith(".zip")]
    out = list(path)
    for entry in path:
        if not entry.endswith(".zip"):
            continue
        for package in ("pyspark", "py4j"):
            inside = _version_file(entry, package)
            if inside is None:
                continue
            spec = importlib.machinery.PathFinder.find_spec(package, plain)
            if spec is None or not spec.submodule_search_locations:
                continue
            root = os.path.dirname(list(spec.submodule_search_locations)[0])
            if _version_file(root, package) == inside:
                out.remove(entry)
                out.append(entry)
    return out


def main() -> None:
    sys.path[:] = installed_first(sys.path)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
