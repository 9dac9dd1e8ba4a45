"""The controller's events are named types: the log says which failed, a metric can count them by name."""

from __future__ import annotations

import asyncio
import logging

from kafkalite.cluster import controller_events as ev


async def _nothing() -> None:
    return None


def test_every_event_type_has_its_own_name_and_says_its_detail():
    kinds = [c for c in vars(ev).values() if isinstance(c, type) and issubclass(c, ev.ControllerEvent)
             and c is not ev.ControllerEvent]
    assert len({k.name for k in kinds}) == len(kinds) >= 10
    assert str(ev.PartitionModifications(_nothing, "orders")) == "PartitionModifications(orders)"
    assert str(ev.BrokerChange(_nothing)) == "BrokerChange"


def test_a_failed_event_is_logged_by_its_name(caplog, tmp_path):
    """Run through the controller's own loop: the failure names the event, never `<lambda>`."""
    from kafkalite.cluster.controller import Controller
    from kafkalite.cluster.local_store import LocalStore

    async def main() -> None:
        store = LocalStore(tmp_path, 1)
        await store.start()
        controller = Controller(store, 1)
        controller.start()
        try:
            async def broken() -> None:
                raise RuntimeError("boom")
            controller.enqueue(ev.TopicDeletionStopReplicaResponseReceived(broken, "t from broker 2"))
            for _ in range(100):
                if any("boom" in str(r.exc_info) for r in caplog.records if r.exc_info):
                    break
                await asyncio.sleep(0.01)
        finally:
            await controller.stop()
            await store.close()

    with caplog.at_level(logging.ERROR, logger="kafkalite.cluster.controller"):
        asyncio.run(main())
    assert "Controller event TopicDeletionStopReplicaResponseReceived(t from broker 2) failed" in caplog.text
