"""Record real Kafka clients authenticating with SASL, as transcripts in tests/data/auth/.

    .venv/bin/python -m tests.support.make_auth_kafka

Each recording runs one real client (kafka-python, or librdkafka through confluent-kafka) against
tests/support/sasl_broker.py through the recording relay of tests/support/relay.py: the client
authenticates (SASL_PLAINTEXT, user "alice") and lists the topics, then closes. The broker
advertises the relay's port in Metadata, so every connection the client makes is recorded.

Every transcript lists its `secrets` (hex of the bytes as they appear on the wire, or for a SCRAM
password, which never does, of the password): tests check that none of them reaches the
decoder's output, whatever packet a capture is cut at.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.relay import Relay, save
from tests.support.sasl_broker import SaslBroker

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "auth")
USER = "alice"
TOPIC = "events"


@dataclass
class Recording:
    name: str  # file name, without .json
    client: str  # "kafka-python" | "librdkafka"
    mechanism: str
    password: str  # the client's; the broker's is always `password` unless `bad_password`
    broker: dict = field(default_factory=dict)  # SaslBroker options (advertised versions)
    bad_password: bool = False  # the client sends a wrong password: authentication fails
    note: str = ""


RECORDINGS = [
    Recording("kafka_python_plain", "kafka-python", "PLAIN", "Vq7pLm2xZr9tKw4nB8sd"),
    Recording("kafka_python_scram256", "kafka-python", "SCRAM-SHA-256", "Hc4rTz8QwN2mKs6vYp3j"),
    Recording("kafka_python_scram512", "kafka-python", "SCRAM-SHA-512", "Jm5xRb9WqT3nLf7zKd2s"),
    Recording(
        "kafka_python_plain_v0",
        "kafka-python",
        "PLAIN",
        "Ps8kWz3TnQ6rMv2xBh9c",
        broker={"handshake_max": 0},
        note="SaslHandshake v0 only: raw SASL tokens (int32 size + token, no Kafka header)",
    ),
    Recording(
        "kafka_python_scram256_v0",
        "kafka-python",
        "SCRAM-SHA-256",
        "Gt2nXq7LcR4wZm9sVk6b",
        broker={"handshake_max": 0},
        note="SaslHandshake v0 only: raw SASL tokens (int32 size + token, no Kafka header)",
    ),
    Recording(
        "kafka_python_scram256_flexible",
        "kafka-python",
        "SCRAM-SHA-256",
        "Wd6fYh3KpZ8tQn2rLx5m",
        broker={"sasl_authenticate_max": 2},
        note="SaslAuthenticate v2 (flexible: request header v2, compact bytes, tagged fields)",
    ),
    Recording("librdkafka_plain", "librdkafka", "PLAIN", "Rn3bKx8VtW5qZc2mHs7p"),
    Recording("librdkafka_scram256", "librdkafka", "SCRAM-SHA-256", "Tz9mQc4XwL7nBv2kRf6d"),
    Recording("librdkafka_scram512", "librdkafka", "SCRAM-SHA-512", "Yk2wHs8NqM5tVb3zPx7c"),
    Recording(
        "librdkafka_scram256_badpass",
        "librdkafka",
        "SCRAM-SHA-256",
        "Fb7qLw3ZsK9xNt4mCv2h",
        bad_password=True,
        note="wrong password: SaslAuthenticate answers SASL_AUTHENTICATION_FAILED (58) and the "
        "broker closes; only the first connection is kept",
    ),
]


def run_kafka_python(port: int, mechanism: str, password: str) -> bool:
    """Authenticate and list topics (Metadata); True when the client saw the topic."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=USER,
        sasl_plain_password=password,
    )
    try:
        return TOPIC in consumer.topics()
    finally:
        consumer.close()


def run_librdkafka(port: int, mechanism: str, password: str, timeout: float = 10) -> bool:
    """Authenticate and list topics (Metadata); True when the client saw the topic."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": USER,
            "sasl.password": password,
            "reconnect.backoff.ms": 2000,
            "log_level": 2,  # the expected authentication failure need not be logged
        }
    )
    try:
        return TOPIC in admin.list_topics(timeout=timeout).topics
    except KafkaException:
        return False
    finally:
        del admin  # destroys the client, closing its connections


def client_label(client: str) -> str:
    if client == "kafka-python":
        import kafka

        return f"kafka-python {kafka.__version__}"
    import confluent_kafka

    return f"confluent-kafka {confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"


def record(rec: Recording) -> str:
    broker_password = rec.password[::-1] if rec.bad_password else rec.password
    run: Callable[..., bool] = run_kafka_python if rec.client == "kafka-python" else run_librdkafka
    with SaslBroker({USER: broker_password}, topics=(TOPIC,), **rec.broker) as broker:
        with Relay((broker.host, broker.port)) as relay:
            broker.advertised_port = relay.port
            if rec.bad_password:
                ok = run_librdkafka(relay.port, rec.mechanism, rec.password, timeout=3)
            else:
                ok = run(relay.port, rec.mechanism, rec.password)
            time.sleep(0.3)  # let the relay see both sides close
    connections = [c for c in relay.connections if c]
    auths = broker.auths
    if rec.bad_password:
        connections, auths = connections[:1], [a for a in auths if a.conn == 0]
        assert not ok and auths and not any(a.ok for a in auths), f"{rec.name}: authentication should fail"
    else:
        assert ok, f"{rec.name}: the client did not list the topic; broker errors: {broker.errors}"
        assert auths and all(a.ok for a in auths) and not broker.errors, f"{rec.name}: {broker.errors}"
    assert len(auths) == len(connections), f"{rec.name}: {len(auths)} auths, {len(connections)} connections"

    secrets = [{"label": "password", "hex": rec.password.encode().hex()}]
    for a in auths:
        if a.client_proof:
            secrets.append({"label": "scram client proof", "hex": a.client_proof.encode().hex()})
        if a.server_signature:
            secrets.append({"label": "scram server signature", "hex": a.server_signature.encode().hex()})
    wire = b"".join(b for c in connections for _, b in c)
    for s in secrets:  # every secret is on the wire, except a SCRAM password, which never is
        on_wire = bytes.fromhex(s["hex"]) in wire
        assert on_wire or (s["label"] == "password" and rec.mechanism != "PLAIN"), f"{rec.name}: {s['label']}"
    assert rec.mechanism == "PLAIN" or rec.password.encode() not in wire

    names = {3: "Metadata", 17: "SaslHandshake", 18: "ApiVersions", 36: "SaslAuthenticate"}
    versions = ", ".join(f"{names[k]} v{lo}-v{hi}" for k, (lo, hi) in sorted(broker.api_versions.items()))
    meta = {
        "protocol": "kafka",
        "port": relay.port,
        "client": f"{client_label(rec.client)} SASL_PLAINTEXT {rec.mechanism}",
        "server": f"tests/support/sasl_broker.py advertising {versions}",
        "authenticated": not rec.bad_password,
    }
    if rec.note:
        meta["note"] = rec.note
    path = os.path.join(OUT, rec.name + ".json")
    save(path, connections, **meta, secrets=secrets)
    return path


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.ERROR)
    os.makedirs(OUT, exist_ok=True)
    for rec in RECORDINGS:
        if argv and rec.name not in argv:
            continue
        path = record(rec)
        print(f"{os.path.relpath(path)}: {rec.client} {rec.mechanism}")


if __name__ == "__main__":
    main(sys.argv[1:])
