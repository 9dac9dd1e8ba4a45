"""Writing records: Produce, and InitProducerId, which idempotent and transactional producers call first."""

from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import A, F, message

# v0-2 carry the same fields as v3 minus transactional_id; Kafka 4 still advertises them (old
# librdkafka enables compression only when Produce v0 is advertised) and answers UNSUPPORTED_VERSION.
PRODUCE = message(
    ApiKey.PRODUCE, "0-9", flexible="9+",
    request=[
        F("transactional_id", "string", "3+", null="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        A("topic_data", "0+", [
            F("name", "string"),
            A("partition_data", "0+", [
                F("index", "int32"),
                F("records", "records", null=True),
            ]),
        ]),
    ],
    response=[
        A("responses", "0+", [
            F("name", "string"),
            A("partition_responses", "0+", [
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1),
                A("record_errors", "8+", [
                    F("batch_index", "int32", "8+"),
                    F("batch_index_error_message", "string", "8+", null="8+", default=None),
                ]),
                F("error_message", "string", "8+", null="8+", default=None),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+", default=0),
    ],
)

INIT_PRODUCER_ID = message(
    ApiKey.INIT_PRODUCER_ID, "0-4", flexible="2+",
    request=[
        F("transactional_id", "string", null=True),
        F("transaction_timeout_ms", "int32"),
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
    ],
)

ALL = [PRODUCE, INIT_PRODUCER_ID]
