#!/usr/bin/env python
"""Record the TubeMQ sample captures: brokerscope's TubeMQ simulator on loopback, captured to pcap.

    sudo .venv/bin/python sample_data/tubemq/make_tubemq_samples.py [outdir]

Writes, into sample_data/tubemq/ (or outdir):
  tubemq_default_ports.pcap  master on 8715, broker on 8123 (TubeMQ's default ports)
  tubemq_other_ports.pcap    the same conversation on ports the OS picks (detection by content)
  manifest.json              what each capture must decode to (messages, requests, commits, ...)

Needs root (AF_PACKET capture on lo). Rerunnable: files are overwritten.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.loopcap import LoopbackCapture  # noqa: E402
from tests.support.tubemq_sim import run_scenario  # noqa: E402


def record(pcap: Path, master_port: int, broker_port: int) -> dict:
    cap = LoopbackCapture(str(pcap), ports={p for p in (master_port, broker_port) if p})

    def add(mp: int, bp: int) -> None:
        cap.add_port(mp)
        cap.add_port(bp)

    with cap:
        res = run_scenario(master_port=master_port, broker_port=broker_port, on_ports=add)
    return {
        "master_port": res.master_port,
        "broker_port": res.broker_port,
        "packets": len(cap.frames),
        "requests": res.requests,
        "exceptions": res.exceptions,
        "commits": res.commits,
        "confirms": res.confirms,
        "messages": [
            {
                "topic": m.topic,
                "partition": m.partition,
                "size": len(m.payload),
                "sha256": hashlib.sha256(m.payload).hexdigest(),
                "attribute": m.attribute,
            }
            for m in res.sent
        ],
    }


def main(outdir: str | None = None) -> None:
    out = Path(outdir) if outdir else Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "generator": "sample_data/tubemq/make_tubemq_samples.py",
        "simulator": "tests/support/tubemq_sim.py",
        "files": {
            "tubemq_default_ports.pcap": record(out / "tubemq_default_ports.pcap", 8715, 8123),
            "tubemq_other_ports.pcap": record(out / "tubemq_other_ports.pcap", 0, 0),
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name, m in manifest["files"].items():
        size = (out / name).stat().st_size
        print(
            f"{name}: {size} bytes, {m['packets']} packets, {m['requests']} requests, {len(m['messages'])} messages"
        )


if __name__ == "__main__":
    main(*sys.argv[1:2])
