"""brokerscope.sparkdaemon: which zips of the workers' path move behind the installed packages."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyspark

from brokerscope import sparkdaemon


def _zip(path: Path, package: str, version: bytes) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{package}/__init__.py", "")
        z.writestr(f"{package}/version.py", version)
    return str(path)


def _installed(root: Path, package: str, version: bytes) -> str:
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    (root / package / "version.py").write_bytes(version)
    return str(root)


def test_the_zip_of_the_installed_version_moves_behind_it(tmp_path: Path) -> None:
    zipped = _zip(tmp_path / "pyspark.zip", "pyspark", b'__version__ = "9.9"\n')
    site = _installed(tmp_path / "site", "pyspark", b'__version__ = "9.9"\n')
    assert sparkdaemon.installed_first(["/cwd", zipped, "/lib", site]) == ["/cwd", "/lib", site, zipped]


def test_a_zip_of_another_version_stays_first(tmp_path: Path) -> None:
    zipped = _zip(tmp_path / "pyspark.zip", "pyspark", b'__version__ = "4.0"\n')
    site = _installed(tmp_path / "site", "pyspark", b'__version__ = "9.9"\n')
    path = [zipped, site]
    assert sparkdaemon.installed_first(path) == path


def test_a_zip_with_nothing_installed_beside_it_stays(tmp_path: Path) -> None:
    zipped = _zip(tmp_path / "py4j.zip", "py4j", b"__version__ = '0.10'\n")
    other = _zip(tmp_path / "other.zip", "something", b"")
    path = [zipped, other, str(tmp_path / "missing.zip"), str(tmp_path)]
    assert sparkdaemon.installed_first(path) == path


def test_the_pip_installed_pysparks_own_zips_move() -> None:
    """With PySpark from pip, Spark's home is the installed package and its zips are its own."""
    home = Path(pyspark.__file__).parent
    site = str(home.parent)
    zips = sorted(str(p) for p in (home / "python" / "lib").glob("*.zip"))
    assert zips, "a pip-installed PySpark carries python/lib/pyspark.zip"
    path = [*zips, site]
    assert sparkdaemon.installed_first(path) == [site, *zips]
