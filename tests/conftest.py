"""Shared test settings: hypothesis profiles sized for a 2-core CI machine, and the one Spark session."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Which modules carry which marker (`make test-fast` deselects them). By module, so a new test in an existing
# file is marked as its neighbours are; a new module that starts Spark or a real client matrix belongs in one of
# these sets. `slow` is marked test by test (`@pytest.mark.slow`, over about a quarter of a second): pytest prints
# the 20 slowest tests of every run, which is where a new one shows up.
MODULE_MARKERS: dict[str, frozenset[str]] = {
    "spark": frozenset({"test_cli_demo", "test_readme", "test_demo_report"}),  # plus every test_spark*
    "clients": frozenset({
        "test_broker_clients", "test_broker_groups", "test_protocol_aiokafka", "test_protocol_kafka_python",
        "test_protocol_gaps", "test_kafkajs", "test_cli_console", "test_cli_admin",
        "test_security_tls", "test_security_sasl", "test_security_acl", "test_security_combined",
    }),
}


def pytest_configure(config):
    # fault scenarios that need issue 15's replication (followers, ISR, acks=all waiting for them); also cluster
    config.addinivalue_line("markers", "replication: a fault scenario that needs replication (issue 15)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        for marker, modules in MODULE_MARKERS.items():
            if module in modules or (marker == "spark" and module.startswith("test_spark")):
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory):
    """One ZooKeeper for the whole session (tests/support/zookeeper.py); each test takes its own chroot."""
    from tests.support.zookeeper import ZooKeeperServer, missing

    why = missing()
    if why:
        pytest.skip(f"cluster tests need ZooKeeper: {why}")
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture
def zk_connect(zookeeper_server):
    """A zookeeper.connect string with a chroot of this test's own."""
    return zookeeper_server.connect()


@pytest.fixture
def cluster(tmp_path, zk_connect):
    """Three `kafkalite serve` brokers on this test's chroot (tests/support/cluster.py), stopped cleanly after
    it; a module needing other settings defines its own `cluster` fixture."""
    from tests.support.cluster import Cluster

    c = Cluster(tmp_path, zk_connect).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test module: starting one costs 10+ s, and the first
    Python data source query ~5 s more; 1 GiB driver memory suits a 2-core CI machine."""
    from kafkalite.spark import local_session

    session = local_session("kafkalite-tests", **{"spark.driver.memory": "1g", "spark.sql.session.timeZone": "UTC"})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A CA and certificates for TLS tests (tests/support/certs.py), made once per run."""
    from tests.support.certs import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))
