"""Write tests/data/tls/kafka_*: one real Kafka client run captured over TLS and in clear.

    .venv/bin/python -m tests.support.make_tls_kafka [tls13] [tls12cbc] [librdkafka]   (as root)

kafka-python (security_protocol="SSL", an ssl_context whose keylog_filename makes Python's ssl,
OpenSSL, write the NSS key log) produces keyed messages and consumes them in a consumer group
with a synchronous commit, through tests/support/tlsproxy.py, a TLS-terminating proxy in front
of librdkafka's one-broker mock cluster (confluent-kafka). The mock broker advertises its own
port; the client's connection factory maps that port to the proxy's (an address mapping, as a
DNS name would: the bytes on the wire are the client's and the broker's own). Everything on `lo`
is captured (tests/support/loopcap.py); each run writes

    kafka_<run>_tls.pcap    client <-> proxy: TLS
    kafka_<run>_clear.pcap  proxy <-> mock broker: the same Kafka bytes in clear
    kafka_<run>_keys.log    the key log the client's OpenSSL wrote (chmod 600 before use)

Runs: tls13 (TLS 1.3, OpenSSL's default suite, AES-256-GCM), tls12cbc (TLS 1.2,
ECDHE-RSA-AES128-SHA256: the CBC + HMAC family Java brokers still negotiate), and librdkafka:
confluent-kafka (librdkafka 2.16, its own OpenSSL) as the TLS client (`security.protocol=ssl`,
`ssl.ca.location` the proxy's certificate, verified with its name 127.0.0.1), the same produce,
consume and commit; librdkafka writes no key log, so kafka_librdkafka_keys.log is the proxy's
(its Python ssl's `keylog_filename`, the server side), and the mock broker, made through
librdkafka's C API (tests/support/rdmock.py), advertises the proxy's address.
"""

from __future__ import annotations

import os
import random
import shutil
import ssl
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support import tlspair  # noqa: E402
from tests.support.loopcap import LoopbackCapture, write_pcap  # noqa: E402
from tests.support.rdmock import MockCluster  # noqa: E402
from tests.support.tlsproxy import TlsProxy, client_context, server_context  # noqa: E402

OUT = ROOT / "tests" / "data" / "tls"
TOPIC = "tls-orders"
MOCK_PARTITIONS = 4  # of a topic librdkafka's mock creates on first use
N = 12
RUNS = {
    "tls13": dict(max_version=None, ciphers=None),
    "tls12cbc": dict(max_version=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-RSA-AES128-SHA256"),
}


def client_run(bootstrap: str, keylog: str, max_version, n: int = N, value_size: int = 0) -> None:
    """Produce `n` messages (each acknowledged before the next; with `value_size`, values of
    that many bytes, sent without waiting, then flushed), consume them in a group, commit."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    common = dict(
        bootstrap_servers=bootstrap,
        security_protocol="SSL",
        ssl_context=client_context(keylog, max_version),
        client_id="tls-client",
        # kafka-python 3.0 cannot read the mock's answer to ApiVersions v3+: ask v2 (broker 2.1)
        api_version=(2, 1),
    )
    # bulk (value_size): batches of up to 1 MiB (a Fetch of the mock broker returns one batch),
    # spread over the 4 partitions of as many topics as keep each partition under 4 MiB (the
    # mock keeps the last 5 MiB of a partition: older messages are gone before the consumer
    # reads them)
    bulk = dict(batch_size=1 << 20, linger_ms=50) if value_size else dict(linger_ms=5)
    topics = [TOPIC] if not value_size else [f"{TOPIC}-{k}" for k in range(-(-n * value_size // (16 << 20)))]
    parts = [TopicPartition(t, i) for t in topics for i in range(MOCK_PARTITIONS if value_size else 1)]
    p = KafkaProducer(acks="all", **bulk, **common)
    for i in range(n):
        if value_size:
            tp = parts[i % len(parts)]
            p.send(
                tp.topic,
                key=f"k{i}".encode(),
                value=random.Random(i).randbytes(value_size),
                partition=tp.partition,
            )
        else:
            p.send(TOPIC, key=f"k{i}".encode(), value=f"order {i} ".encode() * (i + 1), partition=0).get(10)
    p.flush(60)
    p.close(10)
    big = dict(max_partition_fetch_bytes=16 << 20, fetch_max_wait_ms=50) if value_size else {}
    c = KafkaConsumer(
        group_id="tls-group", enable_auto_commit=False, auto_offset_reset="earliest", **big, **common
    )
    c.assign(parts)
    got = []
    deadline = time.time() + 30 + n / 50
    while len(got) < n and time.time() < deadline:
        for recs in c.poll(500).values():
            got += recs
    assert len(got) == n, f"consumed {len(got)} of {n}"
    c.commit()
    c.close()


def record(run: str, max_version, ciphers, out: Path = OUT, n: int = N, value_size: int = 0) -> None:
    import kafka.net.manager as manager
    from confluent_kafka import Producer

    owner = Producer({"test.mock.num.brokers": 1, "enable.metrics.push": False})
    broker = next(iter(owner.list_topics(timeout=10).brokers.values())).port
    tmp = tempfile.mkdtemp()
    keylog = os.path.join(tmp, "keys.log")
    real = manager.create_connection
    try:
        with (
            TlsProxy(("127.0.0.1", broker), server_context(max_version, ciphers)) as proxy,
            LoopbackCapture(os.path.join(tmp, "all.pcap"), ports={broker, proxy.port}, settle_s=0.3) as cap,
        ):

            async def mapped(net, host, port, *a, **kw):  # the advertised broker is the proxy
                return await real(net, host, proxy.port if port == broker else port, *a, **kw)

            manager.create_connection = mapped
            client_run(f"127.0.0.1:{proxy.port}", keylog, max_version, n, value_size)
            time.sleep(0.5)
        write_legs(out, f"kafka_{run}", [proxy], cap.frames, keylog)
    finally:
        manager.create_connection = real
        del owner
        shutil.rmtree(tmp, ignore_errors=True)


def write_legs(out: Path, name: str, proxies: list[TlsProxy], frames: list, keylog: str) -> None:
    """<name>_tls.pcap, <name>_clear.pcap (the proxies' two legs, in capture order) and
    <name>_keys.log."""
    legs: dict[str | None, list] = {"tls": [], "clear": [], None: []}
    for ts, f in frames:
        legs[next((leg for p in proxies if (leg := p.leg(f))), None)].append((ts, f))
    write_pcap(str(out / f"{name}_tls.pcap"), legs["tls"])
    write_pcap(str(out / f"{name}_clear.pcap"), legs["clear"])
    shutil.copy(keylog, out / f"{name}_keys.log")
    print(name, "tls frames", len(legs["tls"]), "clear frames", len(legs["clear"]))


def librdkafka_run(bootstrap: str, ca: str, n: int = N) -> None:
    """confluent-kafka (librdkafka) over TLS, verifying the proxy's certificate and name
    (`ssl.ca.location`): produce `n` messages with acks=all, each delivered before the next,
    consume them in a group from the start, commit synchronously."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    common = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "ssl",
        "ssl.ca.location": ca,
        "client.id": "tls-librdkafka",
        "enable.metrics.push": False,
    }
    p = Producer({**common, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(TOPIC, key=f"k{i}".encode(), value=f"order {i} ".encode() * (i + 1), partition=0)
        assert p.flush(10) == 0
    c = Consumer(
        {**common, "group.id": "tls-group", "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got = []
    deadline = time.time() + 30
    while len(got) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m)
    assert len(got) == n, f"consumed {len(got)} of {n}"
    c.commit(asynchronous=False)
    c.close()


def record_librdkafka(out: Path = OUT) -> None:
    """kafka_librdkafka_*: librdkafka as the TLS client. It writes no key log: the proxy's
    server side (Python's ssl) does. The mock broker advertises the proxy's address."""
    tmp = tempfile.mkdtemp()
    keylog = os.path.join(tmp, "keys.log")
    ctx = server_context()
    ctx.keylog_filename = keylog
    try:
        with (
            MockCluster() as mock,
            TlsProxy(("127.0.0.1", mock.port), ctx) as proxy,
            LoopbackCapture(
                os.path.join(tmp, "all.pcap"), ports={mock.port, proxy.port}, settle_s=0.3
            ) as cap,
        ):
            mock.advertise(tlspair.LOOPBACK, proxy.port)
            librdkafka_run(f"{tlspair.LOOPBACK}:{proxy.port}", tlspair.certificate())
            time.sleep(0.5)
        write_legs(out, "kafka_librdkafka", [proxy], cap.frames, keylog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> None:
    for run in argv or [*RUNS, "librdkafka"]:
        if run == "librdkafka":
            record_librdkafka()
        else:
            record(run, **RUNS[run])


if __name__ == "__main__":
    main(sys.argv[1:])
