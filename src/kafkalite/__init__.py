"""kafkalite: Apache Kafka storage engine and broker in Python."""
__version__ = "0.1.0"
