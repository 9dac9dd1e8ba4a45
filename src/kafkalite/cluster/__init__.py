"""Cluster mode: brokers sharing their metadata through ZooKeeper, with one elected controller.

Layout (Kafka's ZooKeeper mode, so an operator's knowledge applies): `znodes` holds the paths and JSON of
every znode, `store` the small interface the controller and brokers use, `zk_store` its ZooKeeper backend
(kazoo), `assignment` Kafka's replica assignment, `controller` the elected controller, `metadata_cache` what
every broker knows of the cluster (filled by UpdateMetadata). The broker imports this package, never the
other way round.
"""
