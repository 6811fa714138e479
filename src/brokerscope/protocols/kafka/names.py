"""What the Kafka specs do not say: names of api keys no spec describes, and which fields and
config entries hold secrets.

EXTRA_API_NAMES: api keys named without a spec. Such frames are framed and paired but their bodies
are not decoded (decode_status unknown_command, raw kept). Empty today: every api key up to the
newest kio knows has a spec, the ZooKeeper-era inter-broker APIs 4-7 in interbroker_specs.py."""

import re

EXTRA_API_NAMES: dict[int, str] = {}

# SaslHandshake, SaslAuthenticate: their frames carry credentials, so their bytes never reach `raw`.
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
AUTH_API_KEYS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})

# Fields whose values are secrets: they become base.redacted(...) in details.
# Envelope (58) RequestData/ResponseData: a forwarded request, which can be one carrying credentials
# (AlterUserScramCredentials, say).
SECRET_FIELDS = frozenset(
    {"AuthBytes", "SaltedPassword", "Salt", "Password", "Hmac", "TokenHmac", "RequestData", "ResponseData"}
)

# Config entries ({"Name", "Value"} in AlterConfigs, IncrementalAlterConfigs, CreateTopics,
# DescribeConfigs, ...): the value of a password-type config is a credential. Kafka's own
# password-type configs all match this (ssl.key.password, ssl.keystore.password,
# ssl.keystore.key, sasl.jaas.config, sasl.oauthbearer client secrets, password.encoder.secret,
# delegation.token.secret.key, their listener.name.* forms); entries the broker flags
# IsSensitive are redacted whatever their name.
SENSITIVE_CONFIG = re.compile(r"(?i)password|secret|jaas|credential|token|keystore\.key|private\.key")
