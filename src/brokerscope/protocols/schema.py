"""User-supplied protobuf schemas: message definitions a decoder does not ship with.

A schema file is either a compiled FileDescriptorSet (`protoc --include_imports
--descriptor_set_out=FILE x.proto`) or a `.proto` file, which is compiled here with grpcio-tools'
protoc. The driver loads it once (`load_descriptor_set`); the serialized set travels to the
decode tasks inside the settings, and each task builds its message classes from it once
(`MessagePool.from_bytes`, cached by content).
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message


class SchemaError(ValueError):
    """A schema file that cannot be read, compiled or loaded; the text says which and why."""


def _compile_proto(path: Path) -> bytes:
    try:
        import grpc_tools  # noqa: F401  (only to give a clear error when it is missing)
    except ImportError:
        raise SchemaError(
            f"{path} is a .proto file; compiling it needs grpcio-tools (a brokerscope dependency: "
            "reinstall brokerscope, or pip install grpcio-tools), "
            "or give a descriptor set made with: protoc --include_imports --descriptor_set_out=FILE "
            f"{path.name}"
        ) from None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "schema.desc"
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{path.parent}",
            "--include_imports",
            f"--descriptor_set_out={out}",
            str(path),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0 or not out.is_file():
            msg = (res.stderr or res.stdout).strip() or f"protoc exited with {res.returncode}"
            raise SchemaError(f"cannot compile {path}: {msg}")
        return out.read_bytes()


def load_descriptor_set(path: str | Path) -> bytes:
    """The serialized FileDescriptorSet of a schema file (`.proto` files are compiled first)."""
    p = Path(path)
    if not p.is_file():
        raise SchemaError(f"schema file not found: {p}")
    data = _compile_proto(p) if p.suffix == ".proto" else p.read_bytes()
    MessagePool.from_bytes(data)  # fail here, on the driver, rather than in every task
    return data


class MessagePool:
    """The messages of one FileDescriptorSet, looked up by their short (unqualified) name."""

    def __init__(self, fds: descriptor_pb2.FileDescriptorSet, source: str):
        self.source = source
        pool = descriptor_pool.DescriptorPool()  # separate from the default pool: no name clashes
        try:
            for fd in fds.file:
                pool.Add(fd)
            self._by_name: dict[str, type[Message]] = {}
            for fd in fds.file:
                desc = pool.FindFileByName(fd.name)
                for mdesc in desc.message_types_by_name.values():
                    # the first definition of a short name wins
                    self._by_name.setdefault(mdesc.name, message_factory.GetMessageClass(mdesc))
        except (TypeError, KeyError, ValueError) as e:
            raise SchemaError(f"schema {source}: cannot load its definitions: {e}") from None

    @classmethod
    def from_bytes(cls, data: bytes) -> MessagePool:
        return _pool(bytes(data))

    def get(self, name: str | None) -> type[Message] | None:
        return self._by_name.get(name) if name else None

    def names(self) -> list[str]:
        return sorted(self._by_name)


@functools.lru_cache(maxsize=8)
def _pool(data: bytes) -> MessagePool:
    digest = hashlib.sha256(data).hexdigest()
    fds = descriptor_pb2.FileDescriptorSet()
    try:
        fds.ParseFromString(data)
    except DecodeError as e:
        raise SchemaError(f"not a protobuf FileDescriptorSet (sha256 {digest[:12]}): {e}") from None
    if not fds.file:
        raise SchemaError(f"FileDescriptorSet (sha256 {digest[:12]}) defines no files")
    return MessagePool(fds, f"sha256:{digest[:12]}")
