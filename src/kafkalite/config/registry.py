"""Every broker setting kafkalite knows, declared once: Kafka's name, type, default, one line of documentation
and the rule its value must follow.

Operators bring their Kafka `server.properties`; a misspelt key or a value out of range must not leave the
broker running on defaults they did not ask for. So each key is here exactly once, and the components
(LogConfig's topic defaults, the log manager, the group coordinator, the cleaner) read their defaults from
this table rather than keeping their own. The `log.*` topic defaults are derived from LogConfig's table
(`ConfigDef.broker` synonyms), so their type, default and rule stay in storage/log_config.py.

`effect` says what a key does here:
- "used": read by kafkalite;
- "none": a Kafka key we recognise but that changes nothing in kafkalite (a single broker, one asyncio loop,
  features not built yet): setting it logs a WARNING naming it and why.
TLS keys (`ssl.*`, also per listener as `listener.name.<name>.ssl.*`) are real (security/tls.py reads them),
as is the ACL authorizer (security/acl.py); SASL keys are refused outright until implemented, as is any
`ssl.*` key kafkalite cannot honour: see `security_refusals`.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kafkalite.config.listeners import DEFAULT_PORT, SECURITY_PROTOCOLS
from kafkalite.errors import InvalidConfigError
from kafkalite.storage.log_config import (
    BROKER_UNIT_KEYS,
    BROKER_UNIT_MINIMUM,
    CONFIG_DEFS,
    INT_MAX,
    LONG_MAX,
    ConfigDef,
    at_least,
    between,
    parse_value,
)

DEFAULT_DATA_DIR = "kafkalite-data"
COMPRESSION_CODECS = (0, 1, 2, 3, 4)  # none, gzip, snappy, lz4, zstd
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")  # what ssl.enabled.protocols may name (Kafka's default list)
# ssl.* keys Kafka has that kafkalite cannot honour: refused when set rather than ignored.
SSL_REFUSED = {
    "ssl.engine.factory.class": "TLS is Python's ssl module (OpenSSL); no pluggable SSL engine",
    "ssl.provider": "TLS is Python's ssl module (OpenSSL); no JCA security provider",
}


def _any(_: Any) -> str | None:
    return None


def _codec(v: Any) -> str | None:
    return None if v in COMPRESSION_CODECS else "0 (none), 1 (gzip), 2 (snappy), 3 (lz4) or 4 (zstd)"


def _inter_broker_protocol(v: Any) -> str | None:
    return None if v.upper() in SECURITY_PROTOCOLS else f"Value must be one of {', '.join(SECURITY_PROTOCOLS)}"


def _one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if str(v).lower() in allowed else f"Value must be one of {', '.join(allowed)}"
    return check


def _tls_versions(v: Any) -> str | None:
    bad = [p for p in v if p not in TLS_VERSIONS]
    return f"{', '.join(bad)}: supported are {', '.join(TLS_VERSIONS)}" if bad else None


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # what kafkalite's authenticator speaks
SASL_REFUSED = ("GSSAPI", "OAUTHBEARER")  # Kafka's other built-in mechanisms: refused by name


def _sasl_mechanisms(v: Any) -> str | None:
    """sasl.enabled.mechanisms: the list is only checked when a SASL listener uses it (Kafka's default GSSAPI
    is harmless on a PLAINTEXT broker); here only the names must be known."""
    return None


def _sasl_mechanism(v: Any) -> str | None:
    name = str(v).strip().upper()
    if name in SASL_MECHANISMS:
        return None
    if name in SASL_REFUSED:
        return f"SASL mechanism {name} is not supported by kafkalite (supported: {', '.join(SASL_MECHANISMS)})"
    return f"unknown SASL mechanism {name} (supported: {', '.join(SASL_MECHANISMS)})"


def _ibp(v: Any) -> str | None:
    """inter.broker.protocol.version: Kafka's MAJOR.MINOR[-IVn] names from 2.3 (replica_id in
    OffsetsForLeaderEpoch, the oldest protocol a kafkalite follower speaks)."""
    m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?(?:-IV\d+)?", str(v).strip())
    if m is None:
        return "Value must be a version such as 2.8 or 3.6-IV2"
    return None if (int(m[1]), int(m[2])) >= (2, 3) else "Versions below 2.3 are not supported"


def _load_factor(v: Any) -> str | None:
    return None if 0 < v <= 1 else "Value must be above 0 and at most 1"


def _positive(v: Any) -> str | None:
    return None if v > 0 else "Value must be above 0"


# authorizer.class.name values that select kafkalite's ACL authorizer (security/acl.py): its own class name
# and the names of Kafka's two ACL authorizers, so a Kafka server.properties keeps working unchanged.
AUTHORIZER_OWN_CLASS = "kafkalite.security.acl.AclAuthorizer"
AUTHORIZER_CLASSES = frozenset({AUTHORIZER_OWN_CLASS, "kafka.security.authorizer.AclAuthorizer",
                                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})


def _authorizer(v: Any) -> str | None:
    if not str(v).strip() or str(v).strip() in AUTHORIZER_CLASSES:
        return None
    return f"Unknown authorizer class {str(v).strip()}: kafkalite provides one ACL authorizer, selected by " \
        f"{', '.join(sorted(AUTHORIZER_CLASSES))}"


@dataclass(frozen=True, slots=True)
class BrokerKey:
    name: str
    kind: str  # "int", "long", "double", "bool", "str", "list"
    default: Any  # None: Kafka has no default (another key decides, or the feature is off)
    doc: str
    validate: Callable[[Any], str | None] = _any
    effect: str = "used"  # "used" or "none" (see the module docstring)
    topic: ConfigDef | None = None  # the LogConfig key this broker key gives the default of


def _k(name: str, kind: str, default: Any, doc: str, validate: Callable[[Any], str | None] = _any) -> BrokerKey:
    return BrokerKey(name, kind, default, doc, validate)


def _none(name: str, why: str) -> BrokerKey:
    return BrokerKey(name, "str", None, why, effect="none")


_BROKER: tuple[BrokerKey, ...] = (
    # identity and network
    _k("node.id", "int", 1, "this broker's id, written to meta.properties of each data dir", at_least(0)),
    _k("cluster.id", "str", "kafkalite-cluster", "cluster id written to new data dirs"),
    _k("broker.rack", "str", "", "rack reported in Metadata"),
    _k("listeners", "str", f"PLAINTEXT://127.0.0.1:{DEFAULT_PORT}", "NAME://host:port,... to listen on"),
    _k("advertised.listeners", "str", "", "addresses given to clients in Metadata (default: listeners)"),
    _k("listener.security.protocol.map", "str",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       "listener name -> security protocol"),
    _k("security.inter.broker.protocol", "str", "PLAINTEXT", "protocol between brokers (the listener of that "
       "name, when inter.broker.listener.name is not set)", _inter_broker_protocol),
    _k("authorizer.class.name", "str", "", "the authorizer: kafkalite's ACL authorizer (its own name, or Kafka's "
       "kafka.security.authorizer.AclAuthorizer / org.apache.kafka.metadata.authorizer.StandardAuthorizer); "
       "empty: none, every request allowed", _authorizer),
    _k("super.users", "str", "", "principals allowed everything, separated by ';' (User:admin;User:broker)"),
    _k("allow.everyone.if.no.acl.found", "bool", False, "allow every principal on a resource without ACLs"),
    # SASL (security/sasl.py); per-listener forms listener.name.<l>.<key> and, for JAAS,
    # listener.name.<l>.<mechanism>.sasl.jaas.config (see `listener_override_base`)
    _k("sasl.enabled.mechanisms", "list", ("GSSAPI",), "SASL mechanisms a SASL_* listener offers (PLAIN, "
       "SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default GSSAPI, and OAUTHBEARER, are refused on a SASL listener)",
       _sasl_mechanisms),
    _k("sasl.mechanism.inter.broker.protocol", "str", "GSSAPI", "the SASL mechanism brokers log in to each other "
       "with over a SASL_* inter-broker listener"),
    _k("sasl.jaas.config", "str", "", "JAAS login module text: PlainLoginModule with the broker's own "
       "username/password and user_<name>=\"<password>\" entries; ScramLoginModule with username/password"),
    _k("sasl.server.max.receive.size", "int", 524288, "largest frame accepted before SASL authentication",
       at_least(1)),
    _k("connections.max.reauth.ms", "long", 0, "SASL session lifetime: a connection must re-authenticate "
       "within it (0: sessions do not expire)", at_least(0)),
    _k("socket.request.max.bytes", "int", 104857600, "largest request accepted", at_least(1)),
    _k("connections.max.idle.ms", "long", 600000, "close connections idle this long", at_least(1)),
    _k("fetch.max.bytes", "int", 57671680, "most bytes one fetch response returns", at_least(0)),
    _k("inter.broker.listener.name", "str", "", "the advertised listener followers and the controller connect "
       "to (default: the one named as security.inter.broker.protocol)"),
    _k("control.plane.listener.name", "str", "", "the advertised listener the controller's requests "
       "(LeaderAndIsr, UpdateMetadata, StopReplica) reach this broker on, apart from replication (KIP-291; "
       "default: the inter-broker listener)"),
    _k("inter.broker.protocol.version", "str", "3.6", "protocol between brokers: below 2.7 followers truncate "
       "through OffsetsForLeaderEpoch instead of the Fetch response (KIP-595's truncate-on-fetch)", _ibp),
    # TLS (security/tls.py), also per listener as listener.name.<name>.<key>; Kafka's defaults
    _k("ssl.keystore.type", "str", "JKS", "PEM or PKCS12 (JKS: a PKCS12 file is read, a JKS file refused)",
       _one_of("jks", "pkcs12", "pem")),
    _k("ssl.keystore.location", "str", "", "keystore file: PKCS12, or PEM with the key and certificate chain"),
    _k("ssl.keystore.password", "str", "", "password of the keystore file"),
    _k("ssl.key.password", "str", "", "password of the private key (PKCS12 entry, encrypted PEM key)"),
    _k("ssl.keystore.certificate.chain", "str", "", "the certificate chain inline as PEM (ssl.keystore.type=PEM)"),
    _k("ssl.keystore.key", "str", "", "the private key inline as PEM (ssl.keystore.type=PEM)"),
    _k("ssl.truststore.type", "str", "JKS", "PEM or PKCS12 (JKS: a PKCS12 file is read, a JKS file refused)",
       _one_of("jks", "pkcs12", "pem")),
    _k("ssl.truststore.location", "str", "", "trusted CA certificates: a PEM or PKCS12 file"),
    _k("ssl.truststore.password", "str", "", "password of the truststore file"),
    _k("ssl.truststore.certificates", "str", "", "trusted certificates inline as PEM (ssl.truststore.type=PEM)"),
    _k("ssl.client.auth", "str", "none", "client certificates: none, requested or required",
       _one_of("none", "requested", "required")),
    _k("ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"), "TLS versions accepted", _tls_versions),
    _k("ssl.protocol", "str", "TLSv1.3", "the highest TLS version used (TLS, TLSv1.2 or TLSv1.3)",
       _one_of("tls", "tlsv1.2", "tlsv1.3")),
    _k("ssl.cipher.suites", "list", (), "cipher suites (IANA or OpenSSL names; empty: OpenSSL's defaults)"),
    _k("ssl.endpoint.identification.algorithm", "str", "https", "https: a client checks the broker's certificate "
       "names the host it connects to; empty: no check", _one_of("https", "")),
    _k("ssl.principal.mapping.rules", "str", "DEFAULT", "client certificate -> principal (only DEFAULT: User:<DN>)",
       _one_of("default")),
    # replication: the follower side (broker/replica_fetcher.py)
    _k("num.replica.fetchers", "int", 1, "fetcher tasks per source broker (only 1: one asyncio task each)",
       at_least(1)),
    _k("replica.fetch.wait.max.ms", "int", 500, "how long a follower's fetch waits at the leader", at_least(0)),
    _k("replica.fetch.min.bytes", "int", 1, "bytes a follower's fetch waits for", at_least(1)),
    _k("replica.fetch.max.bytes", "int", 1048576, "bytes per partition in a follower's fetch", at_least(0)),
    _k("replica.fetch.response.max.bytes", "int", 10485760, "bytes in a follower's whole fetch response",
       at_least(0)),
    _k("replica.fetch.backoff.ms", "int", 1000, "a follower's pause after a fetch error", at_least(0)),
    _k("replica.socket.timeout.ms", "int", 30000, "a follower's timeout for one request to its leader",
       at_least(1)),
    # topics
    _k("num.partitions", "int", 1, "partitions of auto-created topics", at_least(1)),
    _k("default.replication.factor", "int", 1, "replication factor of auto-created topics", at_least(1)),
    _k("auto.create.topics.enable", "bool", True, "create topics on first Metadata/produce"),
    _k("delete.topic.enable", "bool", True, "allow DeleteTopics"),
    # the log manager
    _k("log.dirs", "list", (DEFAULT_DATA_DIR,), "data directories (log.dir is a synonym)"),
    _k("num.recovery.threads.per.data.dir", "int", 1, "threads per data dir for recovery at start-up",
       at_least(1)),
    _k("log.retention.check.interval.ms", "long", 300000, "how often retention runs", at_least(1)),
    _k("log.flush.scheduler.interval.ms", "long", LONG_MAX, "how often the flusher checks flush.ms"),
    _k("log.flush.offset.checkpoint.interval.ms", "int", 60000, "how often recovery points are checkpointed",
       between(0, INT_MAX)),
    _k("log.flush.start.offset.checkpoint.interval.ms", "int", 60000,
       "how often log start offsets are checkpointed", between(0, INT_MAX)),
    _k("log.initial.task.delay.ms", "long", 30000, "delay before the first retention/flush run", at_least(0)),
    _k("replica.high.watermark.checkpoint.interval.ms", "long", 5000, "how often high watermarks are saved",
       at_least(1)),
    # the cleaner
    _k("log.cleaner.enable", "bool", True, "run the log cleaner for compacted topics"),
    _k("log.cleaner.threads", "int", 1, "cleaner threads", at_least(1)),
    _k("log.cleaner.dedupe.buffer.size", "long", 134217728, "offset map memory over all cleaner threads"),
    _k("log.cleaner.io.buffer.load.factor", "double", 0.9, "how full the offset map may get", _load_factor),
    _k("log.cleaner.io.buffer.size", "int", 524288, "I/O buffer memory over all cleaner threads", at_least(0)),
    _k("log.cleaner.io.max.bytes.per.second", "double", math.inf, "cleaner I/O throttle", _positive),
    _k("log.cleaner.backoff.ms", "long", 15000, "sleep when there is nothing to clean", at_least(0)),
    # the group coordinator
    _k("offsets.topic.num.partitions", "int", 50, "partitions of __consumer_offsets", at_least(1)),
    _k("offsets.topic.segment.bytes", "int", 104857600, "segment size of __consumer_offsets", at_least(1)),
    _k("offsets.topic.compression.codec", "int", 0, "compression of offset commits", _codec),
    _k("offsets.retention.minutes", "int", 10080, "how long committed offsets of empty groups are kept",
       at_least(1)),
    _k("offsets.retention.check.interval.ms", "long", 600000, "how often stale offsets are expired",
       at_least(1)),
    _k("offset.metadata.max.bytes", "int", 4096, "largest metadata string of a commit", at_least(0)),
    _k("offsets.commit.timeout.ms", "int", 5000, "how long an offset commit or group write waits for all in-sync "
       "replicas of its __consumer_offsets partition (it is written with acks=all)", at_least(1)),
    _k("group.initial.rebalance.delay.ms", "int", 3000, "wait for more members before the first rebalance",
       at_least(0)),
    _k("group.min.session.timeout.ms", "int", 6000, "smallest session timeout a member may ask for",
       at_least(0)),
    _k("group.max.session.timeout.ms", "int", 1800000, "largest session timeout a member may ask for",
       at_least(0)),
    _k("group.max.size", "int", INT_MAX, "most members in one group", at_least(1)),
    # cluster mode (docs/cluster.md): unset zookeeper.connect = one broker, no ZooKeeper
    _k("zookeeper.connect", "str", "", "ZooKeeper host:port[,host:port...][/chroot] holding the cluster's "
       "metadata; empty = single-broker mode"),
    _k("zookeeper.session.timeout.ms", "int", 18000, "ZooKeeper session timeout: a broker silent this long is "
       "dead", at_least(1)),
    _k("zookeeper.connection.timeout.ms", "int", None, "how long to wait for the first ZooKeeper connection "
       "(default: zookeeper.session.timeout.ms)", at_least(1)),
    _k("replica.lag.time.max.ms", "long", 30000, "a follower not caught up with its leader for this long leaves "
       "the ISR (checked every half of it)", at_least(1)),
    _k("replica.high.watermark.requires.min.isr", "bool", True, "kafkalite (KIP-966 rule 1): a leader's high "
       "watermark advances only while its ISR has min.insync.replicas members (docs/design.md)"),
    # cluster operations (cluster mode only): controlled shutdown and preferred-leader rebalance
    _k("controlled.shutdown.enable", "bool", True, "on SIGTERM, ask the controller to move this broker's "
       "leaderships away before stopping"),
    _k("controlled.shutdown.max.retries", "int", 3, "controlled shutdown attempts before stopping anyway"),
    _k("controlled.shutdown.retry.backoff.ms", "long", 5000, "pause between controlled shutdown attempts",
       at_least(0)),
    _k("auto.leader.rebalance.enable", "bool", True, "the controller moves leadership back to preferred "
       "replicas periodically"),
    _k("leader.imbalance.check.interval.seconds", "long", 300, "how often the controller checks the leader "
       "imbalance", at_least(1)),
    _k("leader.imbalance.per.broker.percentage", "int", 10, "share of a broker's preferred partitions led "
       "elsewhere (percent) above which the controller elects preferred leaders", at_least(0)),
    _k("offsets.topic.replication.factor", "int", 3, "replication factor of __consumer_offsets in cluster mode "
       "(single-broker mode always uses 1)", at_least(1)),
)

_NO_EFFECT: tuple[BrokerKey, ...] = (
    _none("num.network.threads", "one asyncio loop serves every connection"),
    _none("num.io.threads", "requests run on one asyncio loop"),
    _none("queued.max.requests", "each connection has one request in flight"),
    _none("socket.send.buffer.bytes", "the OS default socket buffers are used"),
    _none("socket.receive.buffer.bytes", "the OS default socket buffers are used"),
    _none("socket.listen.backlog.size", "the asyncio default backlog is used"),
    _none("max.connections", "connections are not limited"),
    _none("max.connections.per.ip", "connections are not limited"),
    _none("background.threads", "background work runs on the scheduler's threads"),
    _none("process.roles", "kafkalite is a single broker without a KRaft quorum"),
    _none("controller.quorum.voters", "kafkalite is a single broker without a KRaft quorum"),
    _none("controller.quorum.bootstrap.servers", "kafkalite is a single broker without a KRaft quorum"),
    _none("controller.listener.names", "kafkalite is a single broker without a KRaft quorum"),
    _none("log.message.format.version", "record batches are always written in format v2"),
    _none("transaction.state.log.replication.factor", "transactions are not implemented yet"),
    _none("transaction.state.log.min.isr", "transactions are not implemented yet"),
    _none("transaction.state.log.num.partitions", "transactions are not implemented yet"),
    _none("transaction.state.log.segment.bytes", "transactions are not implemented yet"),
    _none("transactional.id.expiration.ms", "transactions are not implemented yet"),
    _none("transaction.max.timeout.ms", "transactions are not implemented yet"),
    _none("share.coordinator.state.topic.replication.factor", "share groups are not implemented yet"),
    _none("share.coordinator.state.topic.min.isr", "share groups are not implemented yet"),
    _none("group.coordinator.rebalance.protocols", "only the classic group protocol is implemented"),
    _none("remote.log.storage.system.enable", "tiered storage is not implemented yet"),
    _none("metric.reporters", "metrics are not exported yet"),
    _none("log.dir.failure.timeout.ms", "a failed data dir stops the broker"),
    _none("producer.id.expiration.ms", "producer ids are kept with the producer state snapshots"),
    _none("ssl.keymanager.algorithm", "keys are loaded by OpenSSL, not a Java KeyManagerFactory"),
    _none("ssl.trustmanager.algorithm", "certificates are checked by OpenSSL, not a Java TrustManagerFactory"),
    _none("ssl.secure.random.implementation", "OpenSSL's random generator is used"),
    _none("ssl.allow.dn.changes", "keystores are not reloaded at run time"),
    _none("ssl.allow.san.changes", "keystores are not reloaded at run time"),
)


def _topic_keys() -> tuple[BrokerKey, ...]:
    """The `log.*` and other broker synonyms of topic configs, with LogConfig's type, default and rule."""
    out: dict[str, BrokerKey] = {}
    for d in CONFIG_DEFS:
        for b in d.broker:
            if b in BROKER_UNIT_KEYS:
                unit, default = BROKER_UNIT_KEYS[b]
                rule = at_least(BROKER_UNIT_MINIMUM[b]) if b in BROKER_UNIT_MINIMUM else _any
                word = "hours" if unit == 3_600_000 else "minutes"
                out[b] = BrokerKey(b, "long", default, f"{d.doc}, in {word} (default of topic {d.name})", rule,
                                   topic=d)
            else:
                coarser = any(s in BROKER_UNIT_KEYS for s in d.broker)
                out[b] = BrokerKey(b, d.kind, None if coarser else d.default,
                                   f"{d.doc} (default of topic {d.name})", d.validate, topic=d)
    return tuple(out.values())


KEYS: dict[str, BrokerKey] = {k.name: k for k in (*_BROKER, *_topic_keys(), *_NO_EFFECT)}
ALIASES = {"broker.id": "node.id", "log.dir": "log.dirs"}
assert len(KEYS) == len(_BROKER) + len(_topic_keys()) + len(_NO_EFFECT), "a key is declared twice"


def default(name: str) -> Any:
    """The one default of `name` (components take theirs from here)."""
    return KEYS[name].default


def parse(name: str, raw: object) -> Any:
    """`raw` as the key's type, checked by its rule; errors say "Invalid value X for configuration K: why"."""
    key = KEYS[name]
    if key.kind == "list" and key.topic is None:
        items = [p.strip() for p in str(raw).split(",") if p.strip()]
        why = key.validate(items)
        if why:
            raise InvalidConfigError(f"Invalid value {raw} for configuration {name}: {why}")
        return items
    if key.topic is not None and key.name not in BROKER_UNIT_KEYS:
        return parse_value(key.topic, raw, name)
    return parse_value(ConfigDef(name, key.kind, key.default, key.validate, key.doc), raw)


def closest(name: str) -> str | None:
    """The known key nearest to a misspelt one, for the warning."""
    found = difflib.get_close_matches(name, [*KEYS, *ALIASES], n=1, cutoff=0.6)
    return found[0] if found else None


def listener_key(name: str) -> tuple[str, str] | None:
    """`listener.name.<listener>.<key>` -> (LISTENER, key), Kafka's per-listener override; None otherwise."""
    if not name.startswith("listener.name."):
        return None
    listener, sep, key = name[len("listener.name."):].partition(".")
    return (listener.upper(), key) if sep and listener else None


_MECHANISM_PREFIXES = tuple(f"{m.lower()}." for m in (*SASL_MECHANISMS, *SASL_REFUSED))


def listener_override_base(name: str) -> str | None:
    """The registered key a per-listener override stands for: `listener.name.<l>.<key>` (Kafka's
    ListenerName.configPrefix) and, for JAAS, `listener.name.<l>.<mechanism>.sasl.jaas.config`; None when
    `name` is no such key."""
    per_listener = listener_key(name)
    if per_listener is None:
        return None
    rest = per_listener[1]
    for prefix in _MECHANISM_PREFIXES:
        if rest.startswith(prefix) and rest[len(prefix):] == "sasl.jaas.config":
            return "sasl.jaas.config"
    return rest


def is_sensitive(name: str) -> bool:
    """Kafka's PASSWORD-type settings (sasl.jaas.config, ssl.*.password), directly or per listener: never shown
    by DescribeConfigs (value null, is_sensitive true)."""
    base = listener_override_base(name) or name
    return base == "sasl.jaas.config" or base.endswith(".password")


def security_refusals(props: Mapping[str, object]) -> list[str]:
    """Settings asking for what kafkalite cannot do (an ssl.* key it cannot honour): refused, since
    running without them would mislead."""
    out = []
    for k in props:
        per_listener = listener_key(k)
        key = per_listener[1] if per_listener else k
        if key.startswith("ssl."):
            if key in SSL_REFUSED:
                out.append(f"{k} is set: {SSL_REFUSED[key]}")
            elif key not in KEYS:
                out.append(f"{k} is set: kafkalite does not support this TLS setting")
    return out


def unknown_key_warning(name: str) -> str:
    near = closest(name)
    hint = f" (did you mean {near}?)" if near else ""
    return f"Unknown configuration {name!r} is ignored{hint}"


def no_effect_warning(name: str) -> str:
    return f"Configuration {name} is accepted but has no effect in kafkalite: {KEYS[name].doc}"
