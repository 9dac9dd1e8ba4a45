"""The Kafka broker: wire protocol server, request handlers, and partitions served from a LogManager."""
