"""Classic consumer-group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), group admin
(DescribeGroups, ListGroups, DeleteGroups), and KIP-848's ConsumerGroupHeartbeat, declared only so that
a `group.protocol=consumer` client gets an answer (a refusal) instead of waiting forever."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, S, message

JOIN_GROUP = message(
    ApiKey.JOIN_GROUP, "0-7", flexible="6+",
    request=[
        F("group_id", "string"),
        F("session_timeout_ms", "int32"),
        F("rebalance_timeout_ms", "int32", "1+", default=-1),
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", null="5+", default=None),
        F("protocol_type", "string"),
        A("protocols", "0+", [
            F("name", "string"),
            F("metadata", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+"),
        F("error_code", "int16"),
        F("generation_id", "int32", default=-1),
        F("protocol_type", "string", "7+", null="7+", default=None),
        F("protocol_name", "string", null="7+"),
        F("leader", "string"),
        F("member_id", "string"),
        A("members", "0+", [
            F("member_id", "string"),
            F("group_instance_id", "string", "5+", null="5+", default=None),
            F("metadata", "bytes"),
        ]),
    ],
)

SYNC_GROUP = message(
    ApiKey.SYNC_GROUP, "0-5", flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", null="3+", default=None),
        F("protocol_type", "string", "5+", null="5+", default=None),
        F("protocol_name", "string", "5+", null="5+", default=None),
        A("assignments", "0+", [
            F("member_id", "string"),
            F("assignment", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        F("protocol_type", "string", "5+", null="5+", default=None),
        F("protocol_name", "string", "5+", null="5+", default=None),
        F("assignment", "bytes"),
    ],
)

HEARTBEAT = message(
    ApiKey.HEARTBEAT, "0-4", flexible="4+",
    request=[
        F("group_id", "string"),
        F("generation_id", "int32"),
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", null="3+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
    ],
)

LEAVE_GROUP = message(
    ApiKey.LEAVE_GROUP, "0-5", flexible="4+",
    request=[
        F("group_id", "string"),
        F("member_id", "string", "0-2"),
        A("members", "3+", [
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", null="3+", default=None),
            F("reason", "string", "5+", null="5+", default=None),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        A("members", "3+", [
            F("member_id", "string", "3+"),
            F("group_instance_id", "string", "3+", null="3+"),
            F("error_code", "int16", "3+"),
        ]),
    ],
)

DESCRIBE_GROUPS = message(
    ApiKey.DESCRIBE_GROUPS, "0-5", flexible="5+",
    request=[
        F("groups", "[]string"),
        F("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        A("groups", "0+", [
            F("error_code", "int16"),
            F("group_id", "string"),
            F("group_state", "string"),
            F("protocol_type", "string"),
            F("protocol_data", "string"),
            A("members", "0+", [
                F("member_id", "string"),
                F("group_instance_id", "string", "4+", null="4+", default=None),
                F("client_id", "string"),
                F("client_host", "string"),
                F("member_metadata", "bytes"),
                F("member_assignment", "bytes"),
            ]),
            F("authorized_operations", "int32", "3+", default=-2147483648),
        ]),
    ],
)

LIST_GROUPS = message(
    ApiKey.LIST_GROUPS, "0-5", flexible="3+",
    request=[
        F("states_filter", "[]string", "4+"),
        F("types_filter", "[]string", "5+"),  # KIP-848: "classic", "consumer"
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("error_code", "int16"),
        A("groups", "0+", [
            F("group_id", "string"),
            F("protocol_type", "string"),
            F("group_state", "string", "4+"),
            F("group_type", "string", "5+"),
        ]),
    ],
)

DELETE_GROUPS = message(
    ApiKey.DELETE_GROUPS, "0-2", flexible="2+",
    request=[
        F("groups_names", "[]string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("results", "0+", [
            F("group_id", "string"),
            F("error_code", "int16"),
        ]),
    ],
)


CONSUMER_GROUP_HEARTBEAT = message(  # KIP-848; v1 adds the regex subscription
    ApiKey.CONSUMER_GROUP_HEARTBEAT, "0-1", flexible="0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("instance_id", "string", null=True, default=None),
        F("rack_id", "string", null=True, default=None),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("subscribed_topic_names", "[]string", null=True),
        F("subscribed_topic_regex", "string", "1+", null=True, default=None),
        F("server_assignor", "string", null=True, default=None),
        A("topic_partitions", "0+", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ], null=True),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", null=True, default=None),
        F("member_id", "string", null=True, default=None),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        S("assignment", "0+", [
            A("topic_partitions", "0+", [
                F("topic_id", "uuid"),
                F("partitions", "[]int32"),
            ]),
        ], null=True),
    ],
)
ALL = [JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP, DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS,
       CONSUMER_GROUP_HEARTBEAT]
