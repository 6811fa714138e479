"""Message specs of the ZooKeeper-era inter-broker APIs: LeaderAndIsr (4), StopReplica (5),
UpdateMetadata (6) and ControlledShutdown (7).

A ZooKeeper-mode controller sends the first three to the brokers; a broker sends the fourth to the
controller before it stops. Kafka 4.0 removed ZooKeeper mode and these APIs with it, so neither
kafka-python's shipped specs nor kio describe them, yet captures of older clusters carry them.

Source of the facts used here (field names, types, version ranges, nullable and tagged versions,
valid and flexible versions): Apache Kafka, https://github.com/apache/kafka, files
clients/src/main/resources/common/message/{LeaderAndIsr,StopReplica,UpdateMetadata,
ControlledShutdown}{Request,Response}.json at commit 1eb76443 (2024-10-25), Apache-2.0.

The tables below are this project's own notation. `spec()` turns them into spec dicts of the JSON
form schema.py compiles (nested structs written inline, so no `commonStructs`). Conventions:
- `_f(name, type, since, until)`: a field present from version `since` (default 0) to `until`
  (default: every later version); inside a struct, a range is written only where it narrows the
  versions its parent is present in;
- `_structs(name, struct type, fields, since, until)`: an array of structs;
- `topic=True` marks topic names (`entityType: topicName`), which give the commands row its topics;
- only what decoding needs is kept: no defaults, docs, map keys or broker-id markers.
"""

from __future__ import annotations

I8, I16, I32, I64, BOOL, STR, UUID = "int8", "int16", "int32", "int64", "bool", "string", "uuid"
I32S = "[]int32"


def _versions(since: int, until: int | None) -> str:
    if until is None:
        return f"{since}+"
    return str(since) if since == until else f"{since}-{until}"


def _f(
    name: str,
    type_: str,
    since: int = 0,
    until: int | None = None,
    *,
    topic: bool = False,
    nullable_since: int | None = None,
    tag: int | None = None,
) -> dict:
    d: dict = {"name": name, "type": type_, "versions": _versions(since, until)}
    if nullable_since is not None:
        d["nullableVersions"] = _versions(nullable_since, None)
    if tag is not None:  # tagged in every version the field exists in
        d["tag"], d["taggedVersions"] = tag, d["versions"]
    if topic:
        d["entityType"] = "topicName"
    return d


def _structs(name: str, struct: str, fields: list[dict], since: int = 0, until: int | None = None) -> dict:
    return {**_f(name, "[]" + struct, since, until), "fields": fields}


def _controller(kraft_since: int, broker_epoch_since: int) -> list[dict]:
    """What a controller's request starts with: who sends it (isKRaftController: a KRaft
    controller during a ZooKeeper migration, KIP-866), its epoch and the receiver's epoch."""
    return [
        _f("ControllerId", I32),
        _f("isKRaftController", BOOL, kraft_since),  # sic: the spec spells it in lower camel case
        _f("ControllerEpoch", I32),
        _f("BrokerEpoch", I64, broker_epoch_since),
    ]


def _partition_states(
    api: str, grouped_since: int, id_since: int, epoch: str, later: list[dict]
) -> list[dict]:
    """The partition states a controller sends (LeaderAndIsr, UpdateMetadata): one list in which
    each names its topic before `grouped_since`, then grouped by topic, with the topic's id from
    `id_since`. `epoch` names the partition's (ZooKeeper) version field, `later` the added fields."""
    state = [
        _f("TopicName", STR, 0, grouped_since - 1, topic=True),
        _f("PartitionIndex", I32),
        _f("ControllerEpoch", I32),
        _f("Leader", I32),
        _f("LeaderEpoch", I32),
        _f("Isr", I32S),
        _f(epoch, I32),
        _f("Replicas", I32S),
        *later,
    ]
    struct = api + "PartitionState"
    return [
        _structs("UngroupedPartitionStates", struct, state, 0, grouped_since - 1),
        _structs(
            "TopicStates",
            api + "TopicState",
            [
                _f("TopicName", STR, topic=True),
                _f("TopicId", UUID, id_since),
                _structs("PartitionStates", struct, state),
            ],
            grouped_since,
        ),
    ]


# -- LeaderAndIsr (4) ---------------------------------------------------------------------------

_LAI_PARTITION_ERROR = [
    _f("TopicName", STR, 0, 4, topic=True),
    _f("PartitionIndex", I32),
    _f("ErrorCode", I16),
]

_LEADER_AND_ISR = (
    [
        *_controller(7, 2),
        _f("Type", I8, 5),
        *_partition_states(
            "LeaderAndIsr",
            2,
            5,
            "PartitionEpoch",
            [
                _f("AddingReplicas", I32S, 3),
                _f("RemovingReplicas", I32S, 3),
                _f("IsNew", BOOL, 1),
                _f("LeaderRecoveryState", I8, 6),
            ],
        ),
        _structs(
            "LiveLeaders",
            "LeaderAndIsrLiveLeader",
            [_f("BrokerId", I32), _f("HostName", STR), _f("Port", I32)],
        ),
    ],
    [
        _f("ErrorCode", I16),
        _structs("PartitionErrors", "LeaderAndIsrPartitionError", _LAI_PARTITION_ERROR, 0, 4),
        _structs(
            "Topics",
            "LeaderAndIsrTopicError",
            [
                _f("TopicId", UUID),
                _structs("PartitionErrors", "LeaderAndIsrPartitionError", _LAI_PARTITION_ERROR),
            ],
            5,
        ),
    ],
)

# -- StopReplica (5) ----------------------------------------------------------------------------

_STOP_REPLICA = (
    [
        *_controller(4, 1),
        _f("DeletePartitions", BOOL, 0, 2),
        _structs(
            "UngroupedPartitions",
            "StopReplicaPartitionV0",
            [_f("TopicName", STR, topic=True), _f("PartitionIndex", I32)],
            0,
            0,
        ),
        _structs(
            "Topics",
            "StopReplicaTopicV1",
            [_f("Name", STR, topic=True), _f("PartitionIndexes", I32S)],
            1,
            2,
        ),
        _structs(
            "TopicStates",
            "StopReplicaTopicState",
            [
                _f("TopicName", STR, topic=True),
                _structs(
                    "PartitionStates",
                    "StopReplicaPartitionState",
                    [_f("PartitionIndex", I32), _f("LeaderEpoch", I32), _f("DeletePartition", BOOL)],
                ),
            ],
            3,
        ),
    ],
    [
        _f("ErrorCode", I16),
        _structs(
            "PartitionErrors",
            "StopReplicaPartitionError",
            [_f("TopicName", STR, topic=True), _f("PartitionIndex", I32), _f("ErrorCode", I16)],
        ),
    ],
)

# -- UpdateMetadata (6) -------------------------------------------------------------------------

_UPDATE_METADATA = (
    [
        *_controller(8, 5),
        _f("Type", I8, 8, tag=0),  # 0 unknown, 1 incremental, 2 full snapshot (KIP-866 migration)
        *_partition_states("UpdateMetadata", 5, 7, "ZkVersion", [_f("OfflineReplicas", I32S, 4)]),
        _structs(
            "LiveBrokers",
            "UpdateMetadataBroker",
            [
                _f("Id", I32),
                _f("V0Host", STR, 0, 0),  # v0: one plaintext endpoint per broker
                _f("V0Port", I32, 0, 0),
                _structs(
                    "Endpoints",
                    "UpdateMetadataEndpoint",
                    [_f("Port", I32), _f("Host", STR), _f("Listener", STR, 3), _f("SecurityProtocol", I16)],
                    1,
                ),
                _f("Rack", STR, 2, nullable_since=0),
            ],
        ),
    ],
    [_f("ErrorCode", I16)],
)

# -- ControlledShutdown (7) ---------------------------------------------------------------------

_CONTROLLED_SHUTDOWN = (
    [_f("BrokerId", I32), _f("BrokerEpoch", I64, 2)],
    [
        _f("ErrorCode", I16),
        _structs(
            "RemainingPartitions",
            "RemainingPartition",
            [_f("TopicName", STR, topic=True), _f("PartitionIndex", I32)],
        ),
    ],
)

# api key: (name, last valid version, first flexible version, (request fields, response fields));
# every version from 0 is valid, and requests and responses share both ranges
_APIS: dict[int, tuple[str, int, int, tuple[list[dict], list[dict]]]] = {
    4: ("LeaderAndIsr", 7, 4, _LEADER_AND_ISR),
    5: ("StopReplica", 4, 2, _STOP_REPLICA),
    6: ("UpdateMetadata", 8, 6, _UPDATE_METADATA),
    7: ("ControlledShutdown", 3, 3, _CONTROLLED_SHUTDOWN),
}


def api_keys() -> list[int]:
    return sorted(_APIS)


def spec(api_key: int) -> tuple[dict, dict] | None:
    """(request spec, response spec) of `api_key`, or None when it is not one of these APIs."""
    if api_key not in _APIS:
        return None
    name, last, flexible, (request, response) = _APIS[api_key]
    return tuple(  # type: ignore[return-value]
        {
            "apiKey": api_key,
            "type": kind,
            "name": name + kind.capitalize(),
            "validVersions": _versions(0, last),
            "flexibleVersions": _versions(flexible, None),
            "fields": fields,
        }
        for kind, fields in (("request", request), ("response", response))
    )
