"""What the Kafka specs do not say: names of api keys no spec describes, and which fields and
config entries hold secrets.

EXTRA_API_NAMES: api keys named without a spec. Such frames are framed and paired but their bodies
are not decoded (decode_status unknown_command, raw kept). Empty today: every api key up to the
newest kio knows has a spec, the ZooKeeper-era inter-broker APIs 4-7 in interbroker_specs.py."""

import re
from enum import IntEnum

EXTRA_API_NAMES: dict[int, str] = {}


class ApiKey(IntEnum):
    """Kafka API keys by their specs' names (tests/unit/kafka/test_kafka_kio_specs.py holds this
    table equal to every spec brokerscope reads)."""

    Produce = 0
    Fetch = 1
    ListOffsets = 2
    Metadata = 3
    LeaderAndIsr = 4
    StopReplica = 5
    UpdateMetadata = 6
    ControlledShutdown = 7
    OffsetCommit = 8
    OffsetFetch = 9
    FindCoordinator = 10
    JoinGroup = 11
    Heartbeat = 12
    LeaveGroup = 13
    SyncGroup = 14
    DescribeGroups = 15
    ListGroups = 16
    SaslHandshake = 17
    ApiVersions = 18
    CreateTopics = 19
    DeleteTopics = 20
    DeleteRecords = 21
    InitProducerId = 22
    OffsetForLeaderEpoch = 23
    AddPartitionsToTxn = 24
    AddOffsetsToTxn = 25
    EndTxn = 26
    WriteTxnMarkers = 27
    TxnOffsetCommit = 28
    DescribeAcls = 29
    CreateAcls = 30
    DeleteAcls = 31
    DescribeConfigs = 32
    AlterConfigs = 33
    AlterReplicaLogDirs = 34
    DescribeLogDirs = 35
    SaslAuthenticate = 36
    CreatePartitions = 37
    CreateDelegationToken = 38
    RenewDelegationToken = 39
    ExpireDelegationToken = 40
    DescribeDelegationToken = 41
    DeleteGroups = 42
    ElectLeaders = 43
    IncrementalAlterConfigs = 44
    AlterPartitionReassignments = 45
    ListPartitionReassignments = 46
    OffsetDelete = 47
    DescribeClientQuotas = 48
    AlterClientQuotas = 49
    DescribeUserScramCredentials = 50
    AlterUserScramCredentials = 51
    Vote = 52
    BeginQuorumEpoch = 53
    EndQuorumEpoch = 54
    DescribeQuorum = 55
    AlterPartition = 56
    UpdateFeatures = 57
    Envelope = 58
    FetchSnapshot = 59
    DescribeCluster = 60
    DescribeProducers = 61
    BrokerRegistration = 62
    BrokerHeartbeat = 63
    UnregisterBroker = 64
    DescribeTransactions = 65
    ListTransactions = 66
    AllocateProducerIds = 67
    ConsumerGroupHeartbeat = 68
    ConsumerGroupDescribe = 69
    ControllerRegistration = 70
    GetTelemetrySubscriptions = 71
    PushTelemetry = 72
    AssignReplicasToDirs = 73
    ListConfigResources = 74
    DescribeTopicPartitions = 75
    ShareGroupHeartbeat = 76
    ShareGroupDescribe = 77
    ShareFetch = 78
    ShareAcknowledge = 79
    AddRaftVoter = 80
    RemoveRaftVoter = 81
    UpdateRaftVoter = 82
    InitializeShareGroupState = 83
    ReadShareGroupState = 84
    WriteShareGroupState = 85
    DeleteShareGroupState = 86
    ReadShareGroupStateSummary = 87
    StreamsGroupHeartbeat = 88
    StreamsGroupDescribe = 89
    DescribeShareGroupOffsets = 90
    AlterShareGroupOffsets = 91
    DeleteShareGroupOffsets = 92


SASL_HANDSHAKE, SASL_AUTHENTICATE = ApiKey.SaslHandshake, ApiKey.SaslAuthenticate
# The APIs whose frames carry credentials: SASL exchanges, delegation tokens and their HMACs, SCRAM
# credentials, requests forwarded in an Envelope. Their bytes never reach `raw`, and of what their
# specs do not name (unknown tagged fields, trailing bytes) only the size is kept.
CREDENTIAL_API_KEYS = frozenset(
    {
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
        ApiKey.CreateDelegationToken,
        ApiKey.RenewDelegationToken,
        ApiKey.ExpireDelegationToken,
        ApiKey.DescribeDelegationToken,
        ApiKey.DescribeUserScramCredentials,
        ApiKey.AlterUserScramCredentials,
        ApiKey.Envelope,
    }
)

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
