"""Loading brokerscope's compiled modules (the C hot loops `pip install` builds).

Installed, they import as any module. Executors of a cluster where brokerscope is not installed
run it from the zip the driver ships (pipeline._ship_package); a compiled module cannot be
imported from a zip, so it is copied out to a private temporary directory and loaded from
there. It is the driver's build: executors need the same Python version and platform.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import sys
import tempfile
from types import ModuleType

_extracted: str | None = None


def load(package: str, name: str) -> ModuleType:
    """The compiled module `package.name`."""
    full = f"{package}.{name}"
    try:
        return importlib.import_module(full)
    except ImportError as e:
        loader = getattr(sys.modules[package], "__loader__", None)
        if not hasattr(loader, "archive"):  # not shipped in a zip: the package was not built
            raise ImportError(
                f"{full} is not built: install brokerscope with `pip install .` (needs gcc and the "
                f"Python headers), or run `make demo` ({e})"
            ) from e
        return _from_zip(sys.modules[package], full, name, loader)


def _from_zip(pkg: ModuleType, full: str, name: str, loader) -> ModuleType:
    global _extracted
    if _extracted is None:
        _extracted = tempfile.mkdtemp(prefix="brokerscope-native-")
        atexit.register(shutil.rmtree, _extracted, True)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        try:
            data = loader.get_data(os.path.join(pkg.__path__[0], name + suffix))
        except OSError:
            continue
        path = os.path.join(_extracted, full + suffix)
        with open(path, "wb") as f:
            f.write(data)
        spec = importlib.util.spec_from_file_location(full, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[full] = module
        return module
    raise ImportError(f"{full}: no compiled module for this Python in {loader.archive}")
