"""Committed consumer offsets: OffsetCommit and OffsetFetch."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, message

OFFSET_COMMIT = message(
    ApiKey.OFFSET_COMMIT, "2-9", flexible="8+",
    request=[
        F("group_id", "string"),
        F("generation_id_or_member_epoch", "int32", "1+", default=-1),
        F("member_id", "string", "1+"),
        F("group_instance_id", "string", "7+", null="7+", default=None),
        F("retention_time_ms", "int64", "2-4", default=-1),
        A("topics", "0+", [
            F("name", "string", "0-9"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "6+", default=-1),
                F("committed_metadata", "string", null=True),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        A("topics", "0+", [
            F("name", "string", "0-9"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

# v8 moved to a batch of groups; v1-7 name one group.
OFFSET_FETCH = message(
    ApiKey.OFFSET_FETCH, "1-8", flexible="6+",
    request=[
        F("group_id", "string", "0-7"),
        A("topics", "0-7", [
            F("name", "string", "0-7"),
            F("partition_indexes", "[]int32", "0-7"),
        ], null="2-7"),
        A("groups", "8+", [
            F("group_id", "string", "8+"),
            A("topics", "8+", [
                F("name", "string", "8-9"),
                F("partition_indexes", "[]int32", "8+"),
            ], null="8+"),
        ]),
        F("require_stable", "bool", "7+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+"),
        A("topics", "0-7", [
            F("name", "string", "0-7"),
            A("partitions", "0-7", [
                F("partition_index", "int32", "0-7"),
                F("committed_offset", "int64", "0-7"),
                F("committed_leader_epoch", "int32", "5-7", default=-1),
                F("metadata", "string", "0-7", null="0-7"),
                F("error_code", "int16", "0-7"),
            ]),
        ]),
        F("error_code", "int16", "2-7", default=0),
        A("groups", "8+", [
            F("group_id", "string", "8+"),
            A("topics", "8+", [
                F("name", "string", "8-9"),
                A("partitions", "8+", [
                    F("partition_index", "int32", "8+"),
                    F("committed_offset", "int64", "8+"),
                    F("committed_leader_epoch", "int32", "8+", default=-1),
                    F("metadata", "string", "8+", null="8+"),
                    F("error_code", "int16", "8+"),
                ]),
            ]),
            F("error_code", "int16", "8+", default=0),
        ]),
    ],
)

OFFSET_DELETE = message(  # KIP-496: kafka-consumer-groups.sh --delete-offsets, Admin.deleteConsumerGroupOffsets
    ApiKey.OFFSET_DELETE, "0", flexible="none",
    request=[
        F("group_id", "string"),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32"),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

ALL = [OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE]
