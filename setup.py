"""The compiled hot loops `pip install .` builds (gcc and the Python headers), and the repository's
conf/log4j2.properties copied into the package (an installed brokerscope has no repository to read
it from); everything else about the package is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

# files of conf/ an installed package carries, under brokerscope/conf/
PACKAGED_CONF = ("log4j2.properties",)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        dest = Path(self.build_lib) / "brokerscope" / "conf"
        dest.mkdir(parents=True, exist_ok=True)
        for name in PACKAGED_CONF:
            shutil.copyfile(Path(__file__).parent / "conf" / name, dest / name)


setup(
    cmdclass={"build_py": BuildPy},
    ext_modules=[
        Extension(
            "brokerscope.capture._walk",  # the read stage's record walk: pcap / pcapng EPB to TCP
            ["src/brokerscope/capture/_walk.c"],
            depends=["src/brokerscope/protocols/arrowbuf.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.tcp._lane",  # the stream driver's in-order packets (TcpConnection.take)
            ["src/brokerscope/tcp/_lane.c"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.kafka._records",  # Kafka's v2 record walk
            ["src/brokerscope/protocols/kafka/_records.c"],
            depends=["src/brokerscope/protocols/arrowbuf.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.kafka._body",  # Kafka's message bodies by a table of their fields
            ["src/brokerscope/protocols/kafka/_body.c"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.pulsar._batch",  # Pulsar's batch entries (SingleMessageMetadata)
            ["src/brokerscope/protocols/pulsar/_batch.c"],
            depends=["src/brokerscope/protocols/pbwire.h", "src/brokerscope/protocols/arrowbuf.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.iggy._batch",  # Iggy's batch records (the VSR generation's messages)
            ["src/brokerscope/protocols/iggy/_batch.c"],
            depends=["src/brokerscope/protocols/arrowbuf.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.tubemq._rpc",  # TubeMQ's frame blocks and RPC envelope
            ["src/brokerscope/protocols/tubemq/_rpc.c"],
            depends=[
                "src/brokerscope/protocols/pbwire.h",
                "src/brokerscope/protocols/arrowbuf.h",
                "src/brokerscope/protocols/jsontext.h",
            ],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols._details",  # the details column's JSON text (base.to_json)
            ["src/brokerscope/protocols/_details.c"],
            depends=["src/brokerscope/protocols/arrowbuf.h", "src/brokerscope/protocols/jsontext.h"],
            extra_compile_args=["-O2"],
        ),
    ],
)
