"""The compiled hot loops `pip install .` builds (gcc and the Python headers); everything else
about the package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "brokerscope.protocols.kafka._records",  # Kafka's v2 record walk
            ["src/brokerscope/protocols/kafka/_records.c"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.pulsar._batch",  # Pulsar's batch entries (SingleMessageMetadata)
            ["src/brokerscope/protocols/pulsar/_batch.c"],
            depends=["src/brokerscope/protocols/pbwire.h"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.iggy._batch",  # Iggy's batch records (the VSR generation's messages)
            ["src/brokerscope/protocols/iggy/_batch.c"],
            extra_compile_args=["-O2"],
        ),
        Extension(
            "brokerscope.protocols.tubemq._rpc",  # TubeMQ's frame blocks and RPC envelope
            ["src/brokerscope/protocols/tubemq/_rpc.c"],
            depends=["src/brokerscope/protocols/pbwire.h"],
            extra_compile_args=["-O2"],
        ),
    ]
)
