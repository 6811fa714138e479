"""The committed generated module matches protos/pulsar_api.proto and loads cleanly."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PROTO = ROOT / "protos" / "pulsar_api.proto"
GEN = ROOT / "src" / "brokerscope" / "protocols" / "pulsar" / "gen" / "pulsar_api_pb2.py"


def test_committed_gencode_matches_proto(tmp_path):
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO.parent}",
            f"--python_out={tmp_path}",
            str(PROTO),
        ],
        check=True,
        capture_output=True,
    )
    fresh = (tmp_path / "pulsar_api_pb2.py").read_text()
    assert fresh == GEN.read_text(), "regenerate: see src/brokerscope/protocols/pulsar/gen/README.md"


def test_gencode_loads_without_warnings():
    code = "import warnings; warnings.simplefilter('error'); import brokerscope.protocols.pulsar.gen.pulsar_api_pb2 as m; print(m.BaseCommand.SEND)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "6"


def test_wire_numbers_of_key_fields():
    """Spot-check field numbers the decoder depends on against the protocol's wire facts."""
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        md = pb.MessageMetadata.DESCRIPTOR.fields_by_name
    assert md["num_messages_in_batch"].number == 11
    assert md["uuid"].number == 26 and md["chunk_id"].number == 29
    assert pb.SingleMessageMetadata.DESCRIPTOR.fields_by_name["sequence_id"].number == 8
    assert pb.CommandAck.DESCRIPTOR.fields_by_name["request_id"].number == 8
    assert (
        pb.BaseCommand.DESCRIPTOR.fields_by_name["ack_response"].number == pb.BaseCommand.ACK_RESPONSE == 38
    )
    for f in pb.BaseCommand.DESCRIPTOR.fields:
        if f.name != "type":
            assert pb.BaseCommand.Type.Name(f.number).lower() == f.name
