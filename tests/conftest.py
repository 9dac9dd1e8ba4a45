"""Shared test settings: hypothesis profiles sized for a 2-core CI machine, and the one Spark session."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

T0 = 1700000000000


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for every Spark test module: starting one costs 10+ s, and the first
    Python data source query ~5 s more (CI settings from shared/reference/pyspark-datasource.md)."""
    from kafkalite.spark import local_session

    session = local_session("kafkalite-tests", **{"spark.driver.memory": "1g", "spark.sql.session.timeZone": "UTC"})
    yield session
    session.stop()
