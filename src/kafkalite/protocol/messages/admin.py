"""Topic and config administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
DescribeConfigs, AlterConfigs (the legacy whole-set replacement), IncrementalAlterConfigs, DescribeLogDirs."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, message

CREATE_TOPICS = message(
    ApiKey.CREATE_TOPICS, "0-7", flexible="5+",
    request=[
        A("topics", "0+", [
            F("name", "string"),
            F("num_partitions", "int32"),
            F("replication_factor", "int16"),
            A("assignments", "0+", [
                F("partition_index", "int32"),
                F("broker_ids", "[]int32"),
            ]),
            A("configs", "0+", [
                F("name", "string"),
                F("value", "string", null=True),
            ]),
        ]),
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        A("topics", "0+", [
            F("name", "string"),
            F("topic_id", "uuid", "7+"),
            F("error_code", "int16"),
            F("error_message", "string", "1+", null=True),
            F("topic_config_error_code", "int16", "5+", tag=0),
            F("num_partitions", "int32", "5+", default=-1),
            F("replication_factor", "int16", "5+", default=-1),
            A("configs", "5+", [
                F("name", "string", "5+"),
                F("value", "string", "5+", null="5+"),
                F("read_only", "bool", "5+"),
                F("config_source", "int8", "5+", default=-1),
                F("is_sensitive", "bool", "5+"),
            ], null="5+"),
        ]),
    ],
)

DELETE_TOPICS = message(
    ApiKey.DELETE_TOPICS, "0-6", flexible="4+",
    request=[
        A("topics", "6+", [
            F("name", "string", "6+", null="6+", default=None),
            F("topic_id", "uuid", "6+"),
        ]),
        F("topic_names", "[]string", "0-5"),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        A("responses", "0+", [
            F("name", "string", null="6+"),
            F("topic_id", "uuid", "6+"),
            F("error_code", "int16"),
            F("error_message", "string", "5+", null="5+", default=None),
        ]),
    ],
)

DELETE_RECORDS = message(
    ApiKey.DELETE_RECORDS, "0-2", flexible="2+",
    request=[
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("offset", "int64"),
            ]),
        ]),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("low_watermark", "int64"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

DESCRIBE_CONFIGS = message(
    ApiKey.DESCRIBE_CONFIGS, "0-4", flexible="4+",
    request=[
        A("resources", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("configuration_keys", "[]string", null=True),
        ]),
        F("include_synonyms", "bool", "1+", default=False),
        F("include_documentation", "bool", "3+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("results", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", null=True),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            A("configs", "0+", [
                F("name", "string"),
                F("value", "string", null=True),
                F("read_only", "bool"),
                F("config_source", "int8", "1+", default=-1),
                F("is_default", "bool", "0"),
                F("is_sensitive", "bool"),
                A("synonyms", "1+", [
                    F("name", "string", "1+"),
                    F("value", "string", "1+", null="0+"),
                    F("source", "int8", "1+"),
                ]),
                F("config_type", "int8", "3+", default=0),
                F("documentation", "string", "3+", null="0+"),
            ]),
        ]),
    ],
)

ALTER_CONFIGS = message(
    ApiKey.ALTER_CONFIGS, "0-2", flexible="2+",
    request=[
        A("resources", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            A("configs", "0+", [
                F("name", "string"),
                F("value", "string", null=True),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("responses", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", null=True),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

INCREMENTAL_ALTER_CONFIGS = message(
    ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1", flexible="1+",
    request=[
        A("resources", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            A("configs", "0+", [
                F("name", "string"),
                F("config_operation", "int8"),
                F("value", "string", null=True),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("responses", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", null=True),
            F("resource_type", "int8"),
            F("resource_name", "string"),
        ]),
    ],
)

CREATE_PARTITIONS = message(
    ApiKey.CREATE_PARTITIONS, "0-3", flexible="2+",
    request=[
        A("topics", "0+", [
            F("name", "string"),
            F("count", "int32"),
            A("assignments", "0+", [
                F("broker_ids", "[]int32"),
            ], null=True),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("results", "0+", [
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", null=True, default=None),
        ]),
    ],
)

# v1 only changed throttling; v3 added the top-level error code, v4 the volume's total and usable bytes.
# (v5 adds IsCordoned, a KRaft directory-assignment notion kafkalite has no use for.)
DESCRIBE_LOG_DIRS = message(
    ApiKey.DESCRIBE_LOG_DIRS, "0-4", flexible="2+",
    request=[
        A("topics", "0+", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ], null=True),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+"),
        A("results", "0+", [
            F("error_code", "int16"),
            F("log_dir", "string"),
            A("topics", "0+", [
                F("name", "string"),
                A("partitions", "0+", [
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+", default=-1),
            F("usable_bytes", "int64", "4+", default=-1),
        ]),
    ],
)

# Kafka 3.x's ElectLeaders: v1 adds the election type (KIP-460), v2 is flexible; a null topic_partitions
# means every partition of the cluster.
ELECT_LEADERS = message(
    ApiKey.ELECT_LEADERS, "0-2", flexible="2+",
    request=[
        F("election_type", "int8", "1+", default=0),
        A("topic_partitions", "0+", [
            F("topic", "string"),
            F("partitions", "[]int32"),
        ], null="0+"),
        F("timeout_ms", "int32", default=60000),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "1+", default=0),
        A("replica_election_results", "0+", [
            F("topic", "string"),
            A("partition_result", "0+", [
                F("partition_id", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", null=True),
            ]),
        ]),
    ],
)

# KIP-455 (Kafka 2.4): partition reassignment through the controller. v0 only, flexible; Kafka 3.9's v1 adds
# allow_replication_factor_change (KIP-860), not offered here.
ALTER_PARTITION_REASSIGNMENTS = message(
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, "0", flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("replicas", "[]int32", null="0+", default=None),  # null: cancel the partition's reassignment
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", null=True, default=None),
        A("responses", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", null=True, default=None),
            ]),
        ]),
    ],
)

LIST_PARTITION_REASSIGNMENTS = message(
    ApiKey.LIST_PARTITION_REASSIGNMENTS, "0", flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        A("topics", "0+", [  # null: every partition being reassigned
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ], null="0+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", null=True, default=None),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("replicas", "[]int32"),
                F("adding_replicas", "[]int32"),
                F("removing_replicas", "[]int32"),
            ]),
        ]),
    ],
)

ALL = [CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS,
       CREATE_PARTITIONS, DESCRIBE_LOG_DIRS, ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS]
