"""How one broker is put together: every part built with its collaborators passed in, in one place, so what
depends on what can be read here rather than discovered at run time. Nothing is patched in afterwards.

    MetadataCache <- UpdateMetadata               ClusterStore (ZooKeeper, or the single broker's file)
          |                                              |
    ReplicaManager (partitions, fetchers, ISR) ----------+------ ClusterNode (registration, Controller)
          |                                              |
    areas: replica / metadata / topic / config / group / producer-id / election / reassignment / ACL / SCRAM
          |
    KafkaApis (the one request table)
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkalite.broker.acl_apis import AclApis
from kafkalite.broker.apis import KafkaApis
from kafkalite.broker.cluster_node import ClusterNode
from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.config_apis import ConfigApis
from kafkalite.broker.config_changes import ConfigChangeListener
from kafkalite.broker.election_apis import ElectionApis
from kafkalite.broker.group_apis import GroupApis
from kafkalite.broker.handlers import ApiArea
from kafkalite.broker.log_dir_apis import LogDirApis
from kafkalite.broker.metadata_apis import MetadataApis, cluster_id
from kafkalite.broker.producer_ids import ProducerIdManager
from kafkalite.broker.reassignment_apis import ReassignmentApis
from kafkalite.broker.replica_apis import ReplicaApis
from kafkalite.broker.replica_manager import ReplicaManager
from kafkalite.broker.scram_admin import ScramAdmin
from kafkalite.broker.topic_apis import TopicApis
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.coordinator import GroupCoordinator


@dataclass
class Assembled:
    cluster: ClusterNode
    apis: KafkaApis
    scram: ScramAdmin  # the SASL authenticator reads its credentials


def assemble(config: BrokerConfig, replicas: ReplicaManager, coordinator: GroupCoordinator, store: ClusterStore,
             cache: MetadataCache) -> Assembled:
    single = not config.get("zookeeper.connect")
    scram = ScramAdmin(store)
    acls = AclApis(config, store, cache)  # authorizer.class.name: the ACL cache, the ACL APIs, the request gate
    cluster = ClusterNode(config, replicas, store, cache, acls=acls, scram=scram,
                          config_changes=ConfigChangeListener(store, replicas.admin, replicas.metadata, scram))
    topics = TopicApis(config, replicas, cache, store)
    areas: list[ApiArea] = [
        MetadataApis(config, cache, topics, cluster_id(config, replicas.logs), single=single,
                     personal=acls.authz is not None),
        ReplicaApis(config, replicas, lambda: cluster.broker_epoch, coordinator),
        topics,
        ConfigApis(config, replicas.admin, cache, store),
        GroupApis(config, coordinator, cache, topics, single=single),
        ProducerIdManager(store, config.node_id),
        ElectionApis(cluster.controller, cache),
        ReassignmentApis(cluster.controller),
        acls,
        scram,
        LogDirApis(replicas.logs),
    ]
    return Assembled(cluster, KafkaApis(areas, acls.authz), scram)
