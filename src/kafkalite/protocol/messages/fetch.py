"""Reading records and locating offsets: Fetch, ListOffsets, OffsetForLeaderEpoch."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, S, message

FETCH = message(
    ApiKey.FETCH, "4-12", flexible="12+",
    request=[
        F("cluster_id", "string", "12+", null="12+", tag=0, default=None),
        F("replica_id", "int32", "0-14", default=-1),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
        F("isolation_level", "int8", "4+", default=0),
        F("session_id", "int32", "7+", default=0),
        F("session_epoch", "int32", "7+", default=-1),
        A("topics", "0+", [
            F("topic", "string", "0-12"),
            A("partitions", "0+", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                F("partition_max_bytes", "int32"),
            ]),
        ]),
        A("forgotten_topics_data", "7+", [
            F("topic", "string", "7-12"),
            F("partitions", "[]int32", "7+"),
        ]),
        F("rack_id", "string", "11+", default=""),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16", "7+"),
        F("session_id", "int32", "7+", default=0),
        A("responses", "0+", [
            F("topic", "string", "0-12"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                S("diverging_epoch", "12+", [
                    F("epoch", "int32", "12+", default=-1),
                    F("end_offset", "int64", "12+", default=-1),
                ], tag=0),
                S("current_leader", "12+", [
                    F("leader_id", "int32", "12+", default=-1),
                    F("leader_epoch", "int32", "12+", default=-1),
                ], tag=1),
                S("snapshot_id", "12+", [
                    F("end_offset", "int64", default=-1),
                    F("epoch", "int32", default=-1),
                ], tag=2),
                A("aborted_transactions", "4+", [
                    F("producer_id", "int64", "4+"),
                    F("first_offset", "int64", "4+"),
                ], null="4+"),
                F("preferred_read_replica", "int32", "11+", default=-1),
                F("records", "records", null=True),
            ]),
        ]),
    ],
)

LIST_OFFSETS = message(
    ApiKey.LIST_OFFSETS, "1-7", flexible="6+",
    request=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("current_leader_epoch", "int32", "4+", default=-1),
                F("timestamp", "int64"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        A("topics", "0+", [
            F("name", "string"),
            A("partitions", "0+", [
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("timestamp", "int64", "1+", default=-1),
                F("offset", "int64", "1+", default=-1),
                F("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ],
)

OFFSET_FOR_LEADER_EPOCH = message(
    ApiKey.OFFSET_FOR_LEADER_EPOCH, "2-4", flexible="4+",
    request=[
        F("replica_id", "int32", "3+", default=-2),
        A("topics", "0+", [
            F("topic", "string"),
            A("partitions", "0+", [
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "2+", default=-1),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        A("topics", "0+", [
            F("topic", "string"),
            A("partitions", "0+", [
                F("error_code", "int16"),
                F("partition", "int32"),
                F("leader_epoch", "int32", "1+", default=-1),
                F("end_offset", "int64", default=-1),
            ]),
        ]),
    ],
)

ALL = [FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH]
