"""Controller-to-broker requests of ZooKeeper-mode Kafka: LeaderAndIsr, StopReplica, UpdateMetadata, and the
broker-to-controller ControlledShutdown, at the versions of Kafka 3.6's message schemas
(LeaderAndIsrRequest.json and its siblings in clients/src/main/resources/common/message).

ControlledShutdown starts at v1: Kafka's v0 has a non-standard request header without a client id."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, Field, message


def _leader_and_isr_partition() -> list[Field]:
    return [
        F("topic_name", "string", "0-1"),
        F("partition_index", "int32"),
        F("controller_epoch", "int32"),
        F("leader", "int32"),
        F("leader_epoch", "int32"),
        F("isr", "[]int32"),
        F("partition_epoch", "int32"),
        F("replicas", "[]int32"),
        F("adding_replicas", "[]int32", "3+"),
        F("removing_replicas", "[]int32", "3+"),
        F("is_new", "bool", "1+", default=False),
        F("leader_recovery_state", "int8", "6+", default=0),
    ]


def _leader_and_isr_partition_error() -> list[Field]:
    return [
        F("topic_name", "string", "0-4"),
        F("partition_index", "int32"),
        F("error_code", "int16"),
    ]


LEADER_AND_ISR = message(
    ApiKey.LEADER_AND_ISR, "0-7", flexible="4+",
    request=[
        F("controller_id", "int32"),
        F("is_kraft_controller", "bool", "7+", default=False),
        F("controller_epoch", "int32"),
        F("broker_epoch", "int64", "2+", default=-1),
        F("type", "int8", "5+", default=0),
        A("ungrouped_partition_states", "0-1", _leader_and_isr_partition()),
        A("topic_states", "2+", [
            F("topic_name", "string", "2+"),
            F("topic_id", "uuid", "5+"),
            A("partition_states", "2+", _leader_and_isr_partition()),
        ]),
        A("live_leaders", "0+", [
            F("broker_id", "int32"),
            F("host_name", "string"),
            F("port", "int32"),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        A("partition_errors", "0-4", _leader_and_isr_partition_error()),
        A("topics", "5+", [
            F("topic_id", "uuid", "5+"),
            A("partition_errors", "5+", _leader_and_isr_partition_error()),
        ]),
    ],
)

STOP_REPLICA = message(
    ApiKey.STOP_REPLICA, "0-4", flexible="2+",
    request=[
        F("controller_id", "int32"),
        F("is_kraft_controller", "bool", "4+", default=False),
        F("controller_epoch", "int32"),
        F("broker_epoch", "int64", "1+", default=-1),
        F("delete_partitions", "bool", "0-2"),
        A("ungrouped_partitions", "0", [
            F("topic_name", "string", "0"),
            F("partition_index", "int32", "0"),
        ]),
        A("topics", "1-2", [
            F("name", "string", "1-2"),
            F("partition_indexes", "[]int32", "1-2"),
        ]),
        A("topic_states", "3+", [
            F("topic_name", "string", "3+"),
            A("partition_states", "3+", [
                F("partition_index", "int32", "3+"),
                F("leader_epoch", "int32", "3+", default=-1),
                F("delete_partition", "bool", "3+"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        A("partition_errors", "0+", [
            F("topic_name", "string"),
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ],
)


def _update_metadata_partition() -> list[Field]:
    return [
        F("topic_name", "string", "0-4"),
        F("partition_index", "int32"),
        F("controller_epoch", "int32"),
        F("leader", "int32"),
        F("leader_epoch", "int32"),
        F("isr", "[]int32"),
        F("zk_version", "int32"),
        F("replicas", "[]int32"),
        F("offline_replicas", "[]int32", "4+"),
    ]


UPDATE_METADATA = message(
    ApiKey.UPDATE_METADATA, "0-8", flexible="6+",
    request=[
        F("controller_id", "int32"),
        F("is_kraft_controller", "bool", "8+", default=False),
        F("controller_epoch", "int32"),
        F("broker_epoch", "int64", "5+", default=-1),
        A("ungrouped_partition_states", "0-4", _update_metadata_partition()),
        A("topic_states", "5+", [
            F("topic_name", "string", "5+"),
            F("topic_id", "uuid", "7+"),
            A("partition_states", "5+", _update_metadata_partition()),
        ]),
        A("live_brokers", "0+", [
            F("id", "int32"),
            F("v0_host", "string", "0"),
            F("v0_port", "int32", "0"),
            A("endpoints", "1+", [
                F("port", "int32", "1+"),
                F("host", "string", "1+"),
                F("listener", "string", "3+"),
                F("security_protocol", "int16", "1+"),
            ]),
            F("rack", "string", "2+", null="0+", default=None),
        ]),
    ],
    response=[
        F("error_code", "int16"),
    ],
)

CONTROLLED_SHUTDOWN = message(
    ApiKey.CONTROLLED_SHUTDOWN, "1-3", flexible="3+",
    request=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", "2+", default=-1),
    ],
    response=[
        F("error_code", "int16"),
        A("remaining_partitions", "0+", [
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ]),
    ],
)

ALL = [LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN]
