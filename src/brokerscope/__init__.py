"""brokerscope: message-broker traffic from packet captures and segment files into Delta tables."""

__version__ = "0.1.0"
