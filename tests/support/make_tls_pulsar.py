"""Write tests/data/tls/pulsar_tls13_*: one real pulsar-client run captured over TLS and in clear.

    .venv/bin/python -m tests.support.make_tls_pulsar      (as root: loopback capture)

The real pulsar-client library (C++ core) connects to `pulsar+ssl://` (certificate not verified)
of tests/support/tlsproxy.py, a TLS-terminating proxy in front of tests/support/pulsar_sim.py,
whose lookups name the proxy's URL (`broker_service_url_tls`). The client writes no key log: the
proxy's OpenSSL does (`keylog_filename` on its server context), and either end's key log
decrypts. It produces 8 keyed messages with properties, unbatched, then consumes and
acknowledges them. Everything on `lo` is captured (tests/support/loopcap.py):

    pulsar_tls13_tls.pcap    client <-> proxy: TLS 1.3
    pulsar_tls13_clear.pcap  proxy <-> simulator: the same Pulsar bytes in clear
    pulsar_tls13_keys.log    the key log of the proxy's side (chmod 600 before use)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap  # noqa: E402
from tests.support.pulsar_sim import PulsarSim  # noqa: E402
from tests.support.tlsproxy import TlsProxy, server_context  # noqa: E402

OUT = ROOT / "tests" / "data" / "tls"
TOPIC = "persistent://public/default/tls"
N = 8


def main(out: Path = OUT) -> None:
    import pulsar

    tmp = tempfile.mkdtemp()
    keylog = os.path.join(tmp, "keys.log")
    ctx = server_context()
    ctx.keylog_filename = keylog
    sim = PulsarSim()
    try:
        with (
            sim,
            TlsProxy(("127.0.0.1", sim.port), ctx) as proxy,
            LoopbackCapture(os.path.join(tmp, "all.pcap"), ports={sim.port, proxy.port}, settle_s=0.3) as cap,
        ):
            sim.tls_url = f"pulsar+ssl://127.0.0.1:{proxy.port}"
            client = pulsar.Client(
                sim.tls_url,
                tls_allow_insecure_connection=True,
                tls_validate_hostname=False,
                operation_timeout_seconds=5,
                connection_timeout_ms=3000,
                logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            )
            p = client.create_producer(TOPIC, producer_name="tls-producer", batching_enabled=False)
            for i in range(N):
                p.send(
                    f"tls message {i} ".encode() * (i + 1), properties={"i": str(i)}, partition_key=f"k{i}"
                )
            c = client.subscribe(TOPIC, "tls-sub")
            for _ in range(N):
                c.acknowledge(c.receive(5000))
            client.close()
            time.sleep(0.3)
        upstream = set(proxy.upstream_ports)
        tls = [(ts, f) for ts, f in cap.frames if proxy.port in _tcp_ports(f)]
        clear = [
            (ts, f) for ts, f in cap.frames if (pp := _tcp_ports(f)) and sim.port in pp and upstream & set(pp)
        ]
        write_pcap(str(out / "pulsar_tls13_tls.pcap"), tls)
        write_pcap(str(out / "pulsar_tls13_clear.pcap"), clear)
        shutil.copy(keylog, out / "pulsar_tls13_keys.log")
        print("tls frames", len(tls), "clear frames", len(clear))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
