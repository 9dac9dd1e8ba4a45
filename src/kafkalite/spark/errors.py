"""Errors the Spark connector raises on purpose, each phrased so the user knows what to change.

Spark hands Python exceptions to the user as text inside its own exception (the type is lost), so
the class name and the message are all a user sees: both say what is wrong and where.
"""

from __future__ import annotations

from kafkalite.errors import CorruptRecordError, KafkaliteError


class SparkConnectorError(KafkaliteError):
    """Base of the connector's errors."""


class OptionError(SparkConnectorError, ValueError):
    """An option is missing, contradicts another one, or has a value that cannot be used."""


class UnknownTopicError(SparkConnectorError):
    """A topic or partition named by the query does not exist in the data."""


class DataLossError(SparkConnectorError):
    """Offsets the query needs are gone (retention, truncation, deleted partitions) and
    failOnDataLoss is true. Set failOnDataLoss=false to skip what was lost instead."""


class CorruptBatchError(CorruptRecordError):
    """A record batch cannot be decoded; names the segment file (or the broker's fetch answer), the byte
    and the offset."""


class SinkError(SparkConnectorError):
    """A write could not be committed (data dir owned by another process, bad rows)."""


class BrokerError(SparkConnectorError):
    """Broker mode: the cluster cannot be reached, or answered with an error that retrying did not
    clear; names the bootstrap servers (or the broker) and Kafka's error name."""
