"""The broker's one request table (broker/apis.py): built once from the areas that answer the APIs, never
rewritten afterwards, with nothing patched into a collaborator. These are issue 34's end state held as tests:
a later change that overwrites a handler from outside, or hangs a lambda on another object, fails here."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

from kafkalite.broker import apis
from kafkalite.broker.apis import KafkaApis
from kafkalite.broker.config import BrokerConfig
from kafkalite.broker.server import Broker
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, RequestHeader
from kafkalite.security.session import internal_session

SRC = Path(__file__).resolve().parents[1] / "src" / "kafkalite"


class _Area:
    def __init__(self, *keys: int) -> None:
        self.keys = keys

    async def answer(self, h, body, session):  # pragma: no cover - never called
        return {}

    def handlers(self):
        return dict.fromkeys(self.keys, self.answer)


def test_two_areas_answering_one_api_are_refused_when_the_table_is_built() -> None:
    with pytest.raises(ValueError, match="PRODUCE is answered by two areas"):
        KafkaApis([_Area(ApiKey.PRODUCE, ApiKey.FETCH), _Area(ApiKey.PRODUCE)])


def test_only_what_has_a_handler_is_advertised() -> None:
    table = KafkaApis([_Area(ApiKey.FETCH)])
    assert set(table.advertised()) == {ApiKey.API_VERSIONS, ApiKey.FETCH, ApiKey.SASL_HANDSHAKE,
                                       ApiKey.SASL_AUTHENTICATE}


def test_a_broker_answers_every_api_it_advertises_from_one_area_each(tmp_path: Path) -> None:
    cfg = BrokerConfig.load(None, {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": tmp_path / "data"})

    async def run() -> dict[int, str]:
        broker = Broker(cfg)
        await broker.start()
        try:
            assert broker.apis is not None
            table = broker.apis._handlers
            versions = await broker.apis.handle(RequestHeader(ApiKey.API_VERSIONS, 3, 1, "t"),
                                                {"client_software_name": "t", "client_software_version": "1"},
                                                internal_session())
            assert {k["api_key"] for k in versions["api_keys"]} == set(table)
            return {k: type(h.__self__).__module__ for k, h in table.items()}
        finally:
            await broker.stop()

    owners = asyncio.run(run())
    assert set(owners) <= set(SUPPORTED_VERSIONS)
    assert "kafkalite.broker.apis" not in owners.values()  # the table only dispatches
    assert owners[ApiKey.PRODUCE] == owners[ApiKey.LEADER_AND_ISR] == "kafkalite.broker.replica_apis"
    assert owners[ApiKey.METADATA] == "kafkalite.broker.metadata_apis"
    assert owners[ApiKey.CREATE_TOPICS] == "kafkalite.broker.topic_apis"
    assert owners[ApiKey.INIT_PRODUCER_ID] == "kafkalite.broker.producer_ids"


def test_apis_py_holds_no_handler() -> None:
    """KafkaApis decodes nothing itself and answers nothing itself: its only coroutine is `handle`."""
    coroutines = [name for name, f in inspect.getmembers(KafkaApis, inspect.iscoroutinefunction)]
    assert coroutines == ["handle"]
    assert len(inspect.getsource(apis).splitlines()) < 120


def _table_reaches(root: Path) -> list[str]:
    """Uses of another object's `_handlers` (the request table) under `root`."""
    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "_handlers" and \
                    not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                found.append(f"{f.relative_to(root)}:{node.lineno}")
    return found


def _patched_lambdas(root: Path) -> list[str]:
    """Lambdas assigned to an attribute of another object under `root`."""
    found = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                        found.append(f"{f.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_reaches_into_another_objects_request_table() -> None:
    assert _table_reaches(SRC) == []


def test_no_collaborator_is_patched_in_as_a_lambda_on_another_object() -> None:
    """`authz.topic_exists = lambda ...` was how a cluster broker once rewired its parts; collaborators now come
    in through constructors."""
    assert _patched_lambdas(SRC) == []


def test_the_checks_see_a_patched_table_and_a_patched_lambda(tmp_path: Path) -> None:
    """Not vacuous: both source checks find what the broker once did."""
    (tmp_path / "cluster_node.py").write_text(
        "def install(self):\n    self.apis._handlers[0] = self.produce\n"
        "    self.acls.authz.topic_exists = lambda name: True\n")
    assert _table_reaches(tmp_path) == ["cluster_node.py:2"]
    assert len(_patched_lambdas(tmp_path)) == 1


def test_cluster_node_holds_only_the_brokers_membership() -> None:
    """Registration, session loss, the controller, controlled shutdown: the rest lives with what it changes."""
    from kafkalite.broker import cluster_node

    assert len(inspect.getsource(cluster_node).splitlines()) < 400
    public = {n for n, _ in inspect.getmembers(cluster_node.ClusterNode, inspect.isfunction) if not n.startswith("_")}
    assert public == {"start", "stop", "controlled_shutdown"}
