"""Write tests/data/tls/{pulsar,iggy}_tls13_*: one real client run per simulator, captured over TLS
and in clear.

    .venv/bin/python -m tests.support.make_tls_sims [pulsar] [iggy]     (as root: loopback capture)

Each real client connects over TLS to tests/support/tlsproxy.py, a TLS-terminating proxy in
front of the project's simulator, certificate not verified:

- pulsar: the pulsar-client library (C++ core) at `pulsar+ssl://`, against pulsar_sim.py, whose
  lookups name the proxy's URL (`broker_service_url_tls`); 8 keyed messages with properties
  produced unbatched, then consumed and acknowledged;
- iggy: apache-iggy (the Rust SDK inside, rustls) with `TcpConfig(tls_enabled=True)`, against
  iggy_sim.py, running sample_data/iggy/make_iggy_samples.py's session (login, stream and topic,
  four messages with headers, a poll, a stored offset, reads).

The clients write no key log: the proxy's OpenSSL does (`keylog_filename` on its server context),
and either end's key log decrypts. Everything on `lo` is captured (tests/support/loopcap.py):

    <name>_tls13_tls.pcap    client <-> proxy: TLS 1.3
    <name>_tls13_clear.pcap  proxy <-> simulator: the same bytes in clear
    <name>_tls13_keys.log    the key log of the proxy's side (chmod 600 before use)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.loopcap import LoopbackCapture  # noqa: E402
from tests.support.make_tls_kafka import write_legs  # noqa: E402
from tests.support.tlsproxy import TlsProxy, server_context  # noqa: E402

OUT = ROOT / "tests" / "data" / "tls"
N = 8


def pulsar_client(sim, proxy_port: int) -> None:
    import pulsar

    topic = "persistent://public/default/tls"
    sim.tls_url = f"pulsar+ssl://127.0.0.1:{proxy_port}"
    client = pulsar.Client(
        sim.tls_url,
        tls_allow_insecure_connection=True,
        tls_validate_hostname=False,
        operation_timeout_seconds=5,
        connection_timeout_ms=3000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    p = client.create_producer(topic, producer_name="tls-producer", batching_enabled=False)
    for i in range(N):
        p.send(f"tls message {i} ".encode() * (i + 1), properties={"i": str(i)}, partition_key=f"k{i}")
    c = client.subscribe(topic, "tls-sub")
    for _ in range(N):
        c.acknowledge(c.receive(5000))
    client.close()


def iggy_client(sim, proxy_port: int) -> None:
    from apache_iggy import IggyClient, TcpConfig

    sys.path.insert(0, str(ROOT / "sample_data" / "iggy"))
    import make_iggy_samples as samples

    def over_tls(address: str):
        return IggyClient(
            TcpConfig(
                server_address=address,
                tls_enabled=True,
                tls_validate_certificate=False,
                tls_domain="broker.test",
            )
        )

    samples.IggyClient = over_tls
    log: list = []
    asyncio.run(samples.session(proxy_port, log))
    assert all(s["ok"] for s in log), log


def simulators() -> dict[str, tuple[Callable, Callable]]:
    from tests.support.iggy_sim import IggySim
    from tests.support.pulsar_sim import PulsarSim

    return {"pulsar": (PulsarSim, pulsar_client), "iggy": (lambda: IggySim(port=0), iggy_client)}


def record(name: str, out: Path = OUT) -> None:
    make_sim, run_client = simulators()[name]
    tmp = tempfile.mkdtemp()
    keylog = os.path.join(tmp, "keys.log")
    ctx = server_context()
    ctx.keylog_filename = keylog
    sim = make_sim()
    try:
        with (
            sim,
            TlsProxy(("127.0.0.1", sim.port), ctx) as proxy,
            LoopbackCapture(os.path.join(tmp, "all.pcap"), ports={sim.port, proxy.port}, settle_s=0.3) as cap,
        ):
            run_client(sim, proxy.port)
            time.sleep(0.3)
        write_legs(out, f"{name}_tls13", [proxy], cap.frames, keylog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def record_tubemq(out: Path = OUT) -> None:
    """tubemq_tls12_*: the TubeMQ simulator's scenario (tests/support/tubemq_sim.py: a producer
    and a consumer, each with a master and a broker connection) with its clients over TLS 1.2
    (ECDHE-RSA-AES256-GCM-SHA384, the certificate and its name broker.test verified) to two
    proxies, one in front of the master and one in front of the broker (which the master names
    by its proxy's port). TubeMQ has no Python client: the simulator's RpcClient, Python's ssl."""
    from tests.support import tlspair
    from tests.support.tubemq_sim import run_scenario

    tmp = tempfile.mkdtemp()
    keylog = os.path.join(tmp, "keys.log")
    ctx = server_context(ssl.TLSVersion.TLSv1_2, "ECDHE-RSA-AES256-GCM-SHA384")
    ctx.keylog_filename = keylog
    client = ssl.create_default_context(cafile=tlspair.certificate())
    proxies: list[TlsProxy] = []
    try:
        with (
            LoopbackCapture(os.path.join(tmp, "all.pcap"), ports=set(), settle_s=0.3) as cap,
            contextlib.ExitStack() as stack,
        ):

            def front(*ports: int) -> tuple[int, ...]:
                for port in ports:
                    proxies.append(stack.enter_context(TlsProxy(("127.0.0.1", port), ctx)))
                    cap.add_port(port)
                    cap.add_port(proxies[-1].port)
                return tuple(p.port for p in proxies)

            res = run_scenario(front=front, context=client, host=tlspair.HOST)
            assert len(res.received) == len(res.sent) and res.commits
            time.sleep(0.3)
        write_legs(out, "tubemq_tls12", proxies, cap.frames, keylog)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str]) -> None:
    for name in argv or [*simulators(), "tubemq"]:
        if name == "tubemq":
            record_tubemq()
        else:
            record(name)


if __name__ == "__main__":
    main(sys.argv[1:])
