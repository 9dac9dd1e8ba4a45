"""Discovery APIs: what the broker speaks (ApiVersions), who hosts what (Metadata, DescribeCluster),
and which broker coordinates a group or transaction (FindCoordinator)."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, message

NO_AUTHORIZED_OPERATIONS = -2147483648  # Kafka's "not requested" bit set (only bit 31)

API_VERSIONS = message(
    ApiKey.API_VERSIONS, "0-4", flexible="3+",
    request=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
    response=[
        F("error_code", "int16"),
        A("api_keys", "0+", [
            F("api_key", "int16"),
            F("min_version", "int16"),
            F("max_version", "int16"),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        A("supported_features", "3+", [
            F("name", "string", "3+"),
            F("min_version", "int16", "3+"),
            F("max_version", "int16", "3+"),
        ], tag=0),
        F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
        A("finalized_features", "3+", [
            F("name", "string", "3+"),
            F("max_version_level", "int16", "3+"),
            F("min_version_level", "int16", "3+"),
        ], tag=2),
        F("zk_migration_ready", "bool", "3+", tag=3, default=False),
    ],
)

METADATA = message(
    ApiKey.METADATA, "0-12", flexible="9+",
    request=[
        A("topics", "0+", [
            F("topic_id", "uuid", "10+"),
            F("name", "string", null="10+"),
        ], null="1+"),
        F("allow_auto_topic_creation", "bool", "4+", default=True),
        F("include_cluster_authorized_operations", "bool", "8-10"),
        F("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        A("brokers", "0+", [
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", "1+", null="1+", default=None),
        ]),
        F("cluster_id", "string", "2+", null="2+", default=None),
        F("controller_id", "int32", "1+", default=-1),
        A("topics", "0+", [
            F("error_code", "int16"),
            F("name", "string", null="12+"),
            F("topic_id", "uuid", "10+"),
            F("is_internal", "bool", "1+", default=False),
            A("partitions", "0+", [
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", "7+", default=-1),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("offline_replicas", "[]int32", "5+"),
            ]),
            F("topic_authorized_operations", "int32", "8+", default=NO_AUTHORIZED_OPERATIONS),
        ]),
        F("cluster_authorized_operations", "int32", "8-10", default=NO_AUTHORIZED_OPERATIONS),
    ],
)

DESCRIBE_CLUSTER = message(
    ApiKey.DESCRIBE_CLUSTER, "0-1", flexible="0+",
    request=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", null=True, default=None),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        A("brokers", "0+", [
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", null=True, default=None),
        ]),
        F("cluster_authorized_operations", "int32", default=NO_AUTHORIZED_OPERATIONS),
    ],
)

FIND_COORDINATOR = message(
    ApiKey.FIND_COORDINATOR, "0-4", flexible="3+",
    request=[
        F("key", "string", "0-3"),
        F("key_type", "int8", "1+", default=0),
        F("coordinator_keys", "[]string", "4+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "0-3"),
        F("error_message", "string", "1-3", null="1-3"),
        F("node_id", "int32", "0-3"),
        F("host", "string", "0-3"),
        F("port", "int32", "0-3"),
        A("coordinators", "4+", [
            F("key", "string", "4+"),
            F("node_id", "int32", "4+"),
            F("host", "string", "4+"),
            F("port", "int32", "4+"),
            F("error_code", "int16", "4+"),
            F("error_message", "string", "4+", null="4+"),
        ]),
    ],
)

ALL = [API_VERSIONS, METADATA, DESCRIBE_CLUSTER, FIND_COORDINATOR]
