"""The committed generated modules match what protoc makes from protos/tubemq."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROTOS = ["tubemq_rpc.proto", "tubemq_master.proto", "tubemq_broker.proto"]
GEN = ROOT / "src/brokerscope/protocols/tubemq/gen"


def test_generated_modules_are_up_to_date(tmp_path):
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-Iprotos/tubemq", f"--python_out={tmp_path}"]
    cmd += [f"protos/tubemq/{p}" for p in PROTOS]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, timeout=60)
    for p in PROTOS:
        name = p.replace(".proto", "_pb2.py")
        assert (tmp_path / name).read_bytes() == (GEN / name).read_bytes(), f"{name} is stale: regenerate"
