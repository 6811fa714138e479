"""Loading brokerscope's compiled modules (the C hot loops `pip install` builds).

Installed, they import as any module. Executors of a cluster where brokerscope is not installed
run it from the zip the driver ships (pipeline._ship_package); a compiled module cannot be
imported from a zip, so it is copied out to a directory named by its content digest under the
temporary directory and loaded from there: Python workers end without running atexit handlers,
so every process of a build shares one copy instead of leaving one each. It is the driver's
build: executors need the same Python version and platform.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import stat
import sys
import tempfile
from types import ModuleType


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
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        try:
            data = loader.get_data(os.path.join(pkg.__path__[0], name + suffix))
        except OSError:
            continue
        path = os.path.join(_private_dir(data), full + suffix)
        if not os.path.isfile(path):
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # whole or absent: another process may be loading it
        spec = importlib.util.spec_from_file_location(full, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[full] = module
        return module
    raise ImportError(f"{full}: no compiled module for this Python in {loader.archive}")


def _private_dir(data: bytes) -> str:
    """The directory of this build's copy: ours alone (a directory of that name that another
    user made, or that others may write, could hold their code), else a fresh private one."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    where = os.path.join(tempfile.gettempdir(), f"brokerscope-native-{os.getuid()}-{digest}")
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        st = os.lstat(where)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022:
            return where
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="brokerscope-native-")


def c_function(module: ModuleType, symbol: str) -> int | None:
    """The address of the C function `symbol` exported by the compiled `module` (a library's
    Python binding), for a compiled walk to call without a Python call per value; None where
    the module exports no such symbol."""
    import ctypes

    try:
        return ctypes.cast(getattr(ctypes.CDLL(module.__file__), symbol), ctypes.c_void_p).value
    except (AttributeError, OSError, TypeError):
        return None
