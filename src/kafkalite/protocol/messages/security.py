"""SASL authentication and SCRAM credential management: SaslHandshake (17), SaslAuthenticate (36),
DescribeUserScramCredentials (50), AlterUserScramCredentials (51), as Kafka's JSON schemas declare them."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, message

# v0: after the handshake the client sends raw length-prefixed SASL tokens (no Kafka header);
# v1: the tokens travel in SaslAuthenticate requests.
SASL_HANDSHAKE = message(
    ApiKey.SASL_HANDSHAKE, "0-1", flexible="none",
    request=[
        F("mechanism", "string"),
    ],
    response=[
        F("error_code", "int16"),
        F("mechanisms", "[]string"),
    ],
)

SASL_AUTHENTICATE = message(
    ApiKey.SASL_AUTHENTICATE, "0-2", flexible="2+",
    request=[
        F("auth_bytes", "bytes"),
    ],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", null=True),
        F("auth_bytes", "bytes"),
        F("session_lifetime_ms", "int64", "1+", default=0),
    ],
)

DESCRIBE_USER_SCRAM_CREDENTIALS = message(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "0", flexible="0+",
    request=[
        A("users", "0+", [
            F("name", "string"),
        ], null=True),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", null=True),
        A("results", "0+", [
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", null=True),
            A("credential_infos", "0+", [
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ],
)

ALTER_USER_SCRAM_CREDENTIALS = message(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "0", flexible="0+",
    request=[
        A("deletions", "0+", [
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        A("upsertions", "0+", [
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        A("results", "0+", [
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", null=True),
        ]),
    ],
)

ALL = [SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS]
