"""Broker configuration: the registry of every server.properties key we know, the file reader, listeners."""
