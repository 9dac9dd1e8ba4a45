"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic configs live in the cluster store
(/config/topics/<topic>, Kafka's ZooKeeper layout; the single broker's metadata file likewise), are changed
there by whichever broker takes the request, and reach every broker hosting the topic through the change
notification (broker/config_changes.py). Broker configs are described (static, from server.properties);
changing them is refused by name, since kafkalite has no dynamic broker configs.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.handlers import Body, Handler
from kafkalite.broker.replica_manager import error_code_of
from kafkalite.broker.topic_admin import TopicAdmin
from kafkalite.cluster.metadata_cache import MetadataCache
from kafkalite.cluster.store import ClusterStore
from kafkalite.config.registry import is_sensitive
from kafkalite.errors import InvalidConfigError, InvalidRequestError, KafkaliteError, UnknownTopicOrPartitionError
from kafkalite.protocol import ApiKey, ErrorCode, RequestHeader
from kafkalite.protocol.config_resources import ConfigOp, ConfigResourceType
from kafkalite.security.session import Session
from kafkalite.storage.log_config import CONFIGS_BY_NAME, DEPRECATED_DEFS, LogConfig, topic_config_def

SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
CONFIG_TYPES = {"bool": 1, "str": 2, "int": 3, "long": 5, "double": 6, "list": 7}
NO_DYNAMIC_BROKER_CONFIGS = "kafkalite has no dynamic broker configs; change server.properties and restart"


def topic_config_entries(config: BrokerConfig, defaults: LogConfig, overrides: dict[str, str]) -> list[Body]:
    """DescribeConfigs entries of a topic: its `overrides` over the broker's defaults, each with its source."""
    effective = LogConfig.from_props(overrides, defaults).to_props()
    out = []
    for key, value in effective.items():
        d = CONFIGS_BY_NAME[key]
        if key in overrides:
            source = SOURCE_DYNAMIC_TOPIC
        elif any(b in config.props for b in d.broker):
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        out.append({"name": key, "value": value, "read_only": False, "config_source": source,
                    "is_default": source == SOURCE_DEFAULT, "is_sensitive": False, "synonyms": [],
                    "config_type": CONFIG_TYPES.get(d.kind, 0), "documentation": d.doc})
    for d in DEPRECATED_DEFS:  # shown as Kafka 3.x shows them, with the value given or Kafka's default
        given = d.name in overrides
        out.append({"name": d.name, "value": overrides[d.name] if given else d.default, "read_only": False,
                    "config_source": SOURCE_DYNAMIC_TOPIC if given else SOURCE_DEFAULT, "is_default": not given,
                    "is_sensitive": False, "synonyms": [], "config_type": CONFIG_TYPES.get(d.kind, 0),
                    "documentation": d.doc})
    return out


def apply_config_op(configs: dict[str, str], name: str, op: int, value: str | None) -> dict[str, str]:
    """One alteration of a topic's overrides (SET, DELETE, APPEND or SUBTRACT), checked as Kafka checks it."""
    d = topic_config_def(name)
    if d is None:
        raise InvalidConfigError(f"Unknown topic config name: {name}")
    if op == ConfigOp.SET:
        if value is None:
            raise InvalidConfigError(f"Null value not supported for: {name}")
        configs[name] = value
    elif op == ConfigOp.DELETE:
        configs.pop(name, None)
    elif op in (ConfigOp.APPEND, ConfigOp.SUBTRACT):
        if d.kind != "list":
            raise InvalidConfigError(f"Config value append is not allowed for config key: {name}")
        current = [p for p in (configs.get(name) or ",".join(sorted(d.default))).split(",") if p]
        items = [p.strip() for p in (value or "").split(",") if p.strip()]
        if op == ConfigOp.APPEND:
            current += [i for i in items if i not in current]
        else:
            current = [c for c in current if c not in items]
        configs[name] = ",".join(current)
    else:
        raise InvalidRequestError(f"Unknown config operation {op}")
    return configs


def _config_names(rname: str, r: Body) -> list[str]:
    """The config names of one resource of an AlterConfigs-style request; a name given twice is refused."""
    names = [c["name"] for c in r.get("configs", [])]
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"Duplicate config keys in the request for {rname}: {names}")
    return names


class ConfigApis:
    def __init__(self, config: BrokerConfig, admin: TopicAdmin, cache: MetadataCache, store: ClusterStore) -> None:
        self.config = config
        self.admin = admin
        self.cache = cache
        self.store = store
        self.node_id = config.node_id

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.DESCRIBE_CONFIGS: self.describe_configs, ApiKey.ALTER_CONFIGS: self.alter_configs,
                ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}

    async def _topic_exists(self, name: str) -> bool:
        return name in self.cache.topics or await self.store.topic_assignment(name) is not None

    # --- DescribeConfigs ----------------------------------------------------------------------------

    async def describe_configs(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        results = []
        for r in body.get("resources", []):
            rtype, rname = r["resource_type"], r["resource_name"]
            res: Body = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": rtype,
                         "resource_name": rname, "configs": []}
            if rtype == ConfigResourceType.TOPIC:
                if await self._topic_exists(rname):
                    res["configs"] = topic_config_entries(self.config, self.admin.logs.default_config,
                                                          await self.store.topic_config(rname))
                else:
                    res.update(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               error_message=f"The topic '{rname}' does not exist.")
            elif rtype == ConfigResourceType.BROKER:
                if rname not in ("", str(self.node_id)):
                    res.update(error_code=ErrorCode.INVALID_REQUEST, error_message=f"Unexpected broker id {rname}")
                else:
                    res["configs"] = self._broker_entries()
            else:
                res.update(error_code=ErrorCode.INVALID_REQUEST, error_message=f"Unsupported resource type {rtype}")
            keys = r.get("configuration_keys")
            if keys is not None:
                res["configs"] = [c for c in res["configs"] if c["name"] in keys]
            results.append(res)
        return {"throttle_time_ms": 0, "results": results}

    def _broker_entries(self) -> list[Body]:
        return [{"name": k, "value": None if hidden else v, "read_only": True,
                 "config_source": SOURCE_DEFAULT if default else SOURCE_STATIC_BROKER, "is_default": default,
                 "is_sensitive": hidden, "synonyms": [], "config_type": 2, "documentation": None}
                for k, (v, default) in sorted(self.config.describe().items()) for hidden in (is_sensitive(k),)]

    # --- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------------

    async def alter_configs(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        """Legacy AlterConfigs: the configs sent become the resource's whole set of dynamic configs (what
        is left out returns to its default), as Kafka does; validated like IncrementalAlterConfigs."""
        return await self._alter(body, incremental=False)

    async def incremental_alter_configs(self, h: RequestHeader, body: Body, _session: Session) -> Body:
        return await self._alter(body, incremental=True)

    async def _alter(self, body: Body, incremental: bool) -> Body:
        validate_only = body.get("validate_only", False)
        responses = []
        for r in body.get("resources", []):
            rtype, rname = r["resource_type"], r["resource_name"]
            res: Body = {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": rtype,
                         "resource_name": rname}
            try:
                if rtype == ConfigResourceType.TOPIC:
                    await self._alter_topic(rname, r, incremental, validate_only)
                else:
                    self._refuse_other(rtype, rname, r, incremental)
            except KafkaliteError as exc:
                res.update(error_code=error_code_of(exc), error_message=str(exc))
            responses.append(res)
        return {"throttle_time_ms": 0, "responses": responses}

    async def _alter_topic(self, name: str, r: Body, incremental: bool, validate_only: bool) -> None:
        """A topic's new overrides, written to the store (every broker hosting it applies them from the change
        notification); a null value in the legacy request leaves a key at its default, as Kafka's path does."""
        if not await self._topic_exists(name):
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        _config_names(name, r)
        configs = await self.store.topic_config(name) if incremental else {}
        for c in r.get("configs", []):
            op = c["config_operation"] if incremental else (ConfigOp.SET if c.get("value") is not None
                                                             else ConfigOp.DELETE)
            configs = apply_config_op(configs, c["name"], op, c.get("value"))
        self.admin.validate_topic_configs(configs)
        if not validate_only:
            await self.store.set_topic_config(name, configs)

    def _refuse_other(self, rtype: int, rname: str, r: Body, incremental: bool) -> None:
        """Non-topic resources: no dynamic broker configs, so changing any is refused as Kafka refuses a
        read-only one (INVALID_REQUEST); an empty legacy set for this broker changes nothing and succeeds."""
        if incremental:
            raise InvalidRequestError(NO_DYNAMIC_BROKER_CONFIGS)
        names = _config_names(rname, r)
        if rtype != ConfigResourceType.BROKER:
            raise InvalidRequestError(f"Unsupported resource type {rtype}")
        if rname not in ("", str(self.node_id)):
            raise InvalidRequestError(f"Unexpected broker id {rname}: this broker is {self.node_id}")
        if names:
            raise InvalidRequestError(f"Cannot update these configs dynamically: {sorted(names)}; "
                                      + NO_DYNAMIC_BROKER_CONFIGS)
