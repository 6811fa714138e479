"""Kafka API names for api keys that no spec describes: the ZooKeeper-era inter-broker APIs,
dropped from Kafka 4.0's specs and so from both kafka-python and kio. Such frames are framed
and paired but their bodies are not decoded (decode_status unknown_command, raw kept). Names
from the Apache Kafka protocol guide."""

EXTRA_API_NAMES: dict[int, str] = {
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
}

# Fields whose values are secrets: they become base.redacted(...) in details.
# Envelope (58) RequestData/ResponseData: a forwarded request, which can be one carrying credentials
# (AlterUserScramCredentials, say).
SECRET_FIELDS = frozenset(
    {"AuthBytes", "SaltedPassword", "Salt", "Password", "Hmac", "TokenHmac", "RequestData", "ResponseData"}
)
