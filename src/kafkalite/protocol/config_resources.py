"""The numbers DescribeConfigs, AlterConfigs and IncrementalAlterConfigs carry for what a config belongs to and
what to do with it: Kafka's ConfigResource.Type and AlterConfigOp.OpType. (ACLs number their resources
differently: `security.acl.ResourceType`.)"""

from __future__ import annotations

from enum import IntEnum


class ConfigResourceType(IntEnum):
    """org.apache.kafka.common.config.ConfigResource.Type."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigOp(IntEnum):
    """org.apache.kafka.clients.admin.AlterConfigOp.OpType, the `config_operation` of IncrementalAlterConfigs."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3
