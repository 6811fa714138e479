"""The registry: a protocol is one package under protocols/. A fifth one, written to a temporary
directory on the package path, is found, gets its ports and options into the defaults, and
decodes a capture of its traffic with no other file touched."""

from __future__ import annotations

import textwrap

import pytest

import brokerscope.protocols as protocols_pkg
from brokerscope.config import Settings, defaults, schema_options
from brokerscope.inputs import segment_readers
from brokerscope.protocols import base
from brokerscope.streams import decode_files
from tests.support.synth import write_capture

TOY = textwrap.dedent(
    '''
    """A line protocol for the registry test: the client sends "VERB arg\\\\n", the server "OK\\\\n"."""

    from brokerscope.protocols.base import Conversation, Protocol


    class ToyConversation(Conversation):
        def __init__(self, conn, ctx):
            super().__init__(conn, ctx)
            self.buf = b""

        def feed(self, direction, data, ts_ns):
            if direction != "c2s":
                return []
            self.buf += data
            rows = []
            while b"\\n" in self.buf:
                line, self.buf = self.buf.split(b"\\n", 1)
                verb = line.split(b" ")[0].decode()
                rows.append(("commands", {"ts_ns": ts_ns, "direction": "c2s", "command": verb,
                                          "size": len(line) + 1, "decode_status": "ok"}))
            return rows


    class ToyProtocol(Protocol):
        name = "toyproto"
        default_ports = (7777,)
        options = {"greeting": "hello"}
        schema_option = "schema_file"

        def sniff(self, client_head, server_head):
            return 0.9 if client_head.startswith((b"PUT ", b"GET ")) else 0.0

        def conversation(self, conn, ctx):
            return ToyConversation(conn, ctx)


    PROTOCOL = ToyProtocol()
    '''
)


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    pkg = tmp_path / "toyproto"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(TOY)
    monkeypatch.setattr(protocols_pkg, "__path__", [*protocols_pkg.__path__, str(tmp_path)])
    yield
    base._registry.pop("toyproto", None)
    base.load_errors.pop("toyproto", None)


def test_the_builtins_declare_their_facts_in_their_packages():
    assert base.known_names()[:4] == ["kafka", "pulsar", "iggy", "tubemq"]
    assert defaults()["ports"] == {"kafka": [9092], "pulsar": [6650], "iggy": [8090], "tubemq": [8715, 8123]}
    assert defaults()["protocols"] == {
        "pulsar": {"max_frame_bytes": 5 * 1024**2},
        "tubemq": {"schema_file": ""},
    }
    assert schema_options() == {"tubemq": "schema_file"}
    assert sorted(segment_readers()) == ["iggy_segment", "kafka_segment"]
    assert segment_readers()["kafka_segment"].__name__ == "brokerscope.protocols.kafka.segments"


def test_a_fifth_protocol_is_one_package(toy_package, tmp_path):
    assert "toyproto" in base.known_names()
    assert defaults()["ports"]["toyproto"] == [7777]
    assert Settings.load().raw["protocols"]["toyproto"] == {"greeting": "hello"}
    assert schema_options()["toyproto"] == "schema_file"

    def payloads(conn: int, i: int) -> tuple[bytes, bytes]:
        return (b"PUT k%d\n" % i if i % 2 else b"GET k%d\n" % i), b"OK\n"

    cap = tmp_path / "toy.pcap"
    write_capture(str(cap), n_conns=2, exchanges=3, payloads=payloads, server_port=7777)
    out = decode_files([str(cap)])
    assert {s["protocol"] for s in out["streams"]} == {"toyproto"}
    assert [c["command"] for c in out["commands"] if c["conn_id"] == out["streams"][0]["conn_id"]] == [
        "GET",
        "PUT",
        "GET",
    ]
