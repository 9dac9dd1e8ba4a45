"""Replication's rules, below the broker: a partition's role, ISR and commit rule (`partition.py`, Kafka's
`kafka.cluster.Partition`) and where a follower truncates (`truncation.py`). They use only `errors` and
`storage`; the broker's ReplicaManager and ReplicaFetcher drive them, and the group coordinator and the Spark
sink use `Partition` without reaching up into the broker."""
