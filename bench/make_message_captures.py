"""Message-rich captures for bench/message_bench.py: many messages per frame, real clients where
they exist, recorded like the sample captures (tests/support/loopcap.py: root needed).

    sudo .venv/bin/python bench/make_message_captures.py [OUT_DIR] [pulsar iggy tubemq]

- pulsar_batched.pcap: pulsar-client (PyPI, C++ core) against tests/support/pulsar_sim.py, an LZ4
  producer batching 100 messages per SEND (1,000 messages, properties idx/tag, a key on two of
  three), one Exclusive consumer receiving them all and acknowledging each (the client groups the
  acks);
- iggy_batched.pcap: apache-iggy 0.9 (PyPI) against tests/support/iggy_sim.py, 10 SendMessages
  of 100 messages (user headers on every other one) and 10 PollMessages of 100;
- tubemq_packs.pcap: tests/support/tubemq_sim.py's producer, consumer and broker (there is no
  TubeMQ client on PyPI): 1,000 sendMessageP2B (one message each, TubeMQ's produce call) and
  getMessagesC2B answered with packs of 50 messages.

The sample captures (sample_data/) are mostly commands: a few messages per connection.
Default OUT_DIR: /tmp/message_bench.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "sample_data" / "pulsar"))

from tests.support.loopcap import LoopbackCapture  # noqa: E402

N = 1000
PER_FRAME = 100


def pulsar(out: Path) -> str:
    import make_pulsar_samples as mps
    import pulsar as pc

    from tests.support.pulsar_sim import PulsarSim

    path = out / "pulsar_batched.pcap"
    topic = "persistent://public/default/bench-batched"
    sim = PulsarSim()
    with sim, LoopbackCapture(str(path), ports={sim.port}):
        client = pc.Client(
            sim.url, operation_timeout_seconds=5, logger=pc.ConsoleLogger(pc.LoggerLevel.Error)
        )
        try:
            producer = client.create_producer(
                topic,
                producer_name="bench-producer",
                batching_enabled=True,
                batching_max_messages=PER_FRAME,
                batching_max_publish_delay_ms=1000,
                compression_type=pc.CompressionType.LZ4,
            )
            done = threading.Semaphore(0)
            for i in range(N):
                key = f"key-{i}" if i % 3 != 2 else None
                props = {"idx": str(i), "tag": "bench"}
                value = mps._payload("bench", i)
                producer.send_async(value, lambda _r, _m: done.release(), properties=props, partition_key=key)
            producer.flush()
            for _ in range(N):
                done.acquire(timeout=10)
            producer.close()
            mps._consume(client, topic, "bench-sub", N, "individual")
        finally:
            client.close()
    return str(path)


def iggy(out: Path) -> str:
    from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

    from tests.support.iggy_sim import IggySim

    path = out / "iggy_batched.pcap"

    async def session(port: int) -> None:
        c = IggyClient(f"127.0.0.1:{port}")
        await c.connect()
        await c.login_user("iggy", "bench-pw")
        await c.create_stream("bench")
        await c.create_topic("bench", "t", 1)
        for b in range(N // PER_FRAME):
            msgs = [
                SendMessage(
                    f"bench message {b * PER_FRAME + i}: iggy payload ".encode() * 2,
                    {"source": "bench", "n": i} if i % 2 == 0 else None,
                    b * PER_FRAME + i + 1,
                )
                for i in range(PER_FRAME)
            ]
            await c.send_messages("bench", "t", 1, msgs)
        for b in range(N // PER_FRAME):
            await c.poll_messages(
                "bench",
                "t",
                consumer=Consumer.Single(7),
                partition_id=1,
                polling_strategy=PollingStrategy.Offset(b * PER_FRAME),
                count=PER_FRAME,
                auto_commit=True,
            )

    with IggySim() as sim, LoopbackCapture(str(path), ports={sim.port}):
        asyncio.run(session(sim.port))
        time.sleep(0.3)
    return str(path)


def tubemq(out: Path) -> str:
    from tests.support import tubemq_sim

    path = out / "tubemq_packs.pcap"
    cap = LoopbackCapture(str(path), ports=set())

    def add(mp: int, bp: int) -> None:
        cap.add_port(mp)
        cap.add_port(bp)

    # the broker's pack size (messages per getMessagesC2B answer): 50 instead of the simulator's 3
    init = tubemq_sim.BrokerSim.__init__
    tubemq_sim.BrokerSim.__init__ = lambda self, port=0, pack_size=50: init(self, port, pack_size)
    messages = [(f"bench message {i}: tubemq payload ".encode() * 2, f"k={i},tag=bench") for i in range(N)]
    try:
        with cap:
            tubemq_sim.run_scenario(messages=messages, on_ports=add)
    finally:
        tubemq_sim.BrokerSim.__init__ = init
    return str(path)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv and "/" in argv[0] else Path("/tmp/message_bench")
    names = [a for a in argv if a in ("pulsar", "iggy", "tubemq")] or ["pulsar", "iggy", "tubemq"]
    out.mkdir(parents=True, exist_ok=True)
    for n in names:
        print(n, globals()[n](out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
