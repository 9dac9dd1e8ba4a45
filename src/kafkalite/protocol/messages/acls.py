"""ACL administration: DescribeAcls (29), CreateAcls (30), DeleteAcls (31), as Kafka's JSON schemas declare them
(v1 adds the pattern type, v2 makes them flexible, v3 adds the USER resource type with no layout change)."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, message

LITERAL = 3  # PatternType.LITERAL: what a v0 request means and the schemas' default

# An AclBindingFilter: DescribeAcls' request and each of DeleteAcls' filters (the same fields in Kafka's schemas)
ACL_FILTER = [
    F("resource_type_filter", "int8"),
    F("resource_name_filter", "string", null=True),
    F("pattern_type_filter", "int8", "1+", default=LITERAL),
    F("principal_filter", "string", null=True),
    F("host_filter", "string", null=True),
    F("operation", "int8"),
    F("permission_type", "int8"),
]

DESCRIBE_ACLS = message(
    ApiKey.DESCRIBE_ACLS, "0-3", flexible="2+",
    request=ACL_FILTER,
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", null=True),
        A("resources", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=LITERAL),
            A("acls", "0+", [
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

CREATE_ACLS = message(
    ApiKey.CREATE_ACLS, "0-3", flexible="2+",
    request=[
        A("creations", "0+", [
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("resource_pattern_type", "int8", "1+", default=LITERAL),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("results", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", null=True),
        ]),
    ],
)

DELETE_ACLS = message(
    ApiKey.DELETE_ACLS, "0-3", flexible="2+",
    request=[
        A("filters", "0+", ACL_FILTER),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("filter_results", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", null=True),
            A("matching_acls", "0+", [
                F("error_code", "int16"),
                F("error_message", "string", null=True),
                F("resource_type", "int8"),
                F("resource_name", "string"),
                F("pattern_type", "int8", "1+", default=LITERAL),
                F("principal", "string"),
                F("host", "string"),
                F("operation", "int8"),
                F("permission_type", "int8"),
            ]),
        ]),
    ],
)

ALL = [DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS]
