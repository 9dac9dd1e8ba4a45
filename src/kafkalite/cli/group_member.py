"""A classic consumer-group member for `kafkalite consume --group`: it joins as a "consumer" with the range
assignor, so Java, librdkafka and kafka-python consumers of the same group share partitions with it, and
commits what the console consumer printed so `groups --describe` and every client see it.

Single-threaded by design: the console consumer calls `poll()` between fetches (each fetch waits at most
half a second), which heartbeats when due and rejoins when the coordinator announces a rebalance.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from kafkalite.client import KafkaClient, KafkaClientError
from kafkalite.coordinator.consumer_protocol import (
    PROTOCOL_TYPE,
    decode_assignment,
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
)
from kafkalite.protocol import ApiKey, ErrorCode

log = logging.getLogger("kafkalite.cli.group")

ASSIGNOR = "range"
SESSION_TIMEOUT_MS = 45000  # Kafka's consumer defaults
REBALANCE_TIMEOUT_MS = 300000
HEARTBEAT_INTERVAL_S = 3.0
_REJOIN = (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID)


def range_assign(subscriptions: Mapping[str, list[str]], partitions: Mapping[str, int]
                 ) -> dict[str, dict[str, list[int]]]:
    """Kafka's RangeAssignor: per topic, members in id order each take a contiguous run; the first
    `partitions % members` take one more."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subscriptions}
    for topic, count in partitions.items():
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        each, extra = divmod(count, len(members))
        start = 0
        for i, m in enumerate(members):
            n = each + (1 if i < extra else 0)
            if n:
                out[m][topic] = list(range(start, start + n))
            start += n
    return out


class GroupMember:
    """One member of `group` subscribed to `topics`; `assignment` is what the group gave it."""

    def __init__(self, client: KafkaClient, group: str, topics: list[str], client_id: str) -> None:
        self.client = client
        self.group = group
        self.topics = topics
        self.client_id = client_id
        self.member_id = ""
        self.generation = -1
        self.assignment: dict[str, list[int]] = {}
        self._last_heartbeat = 0.0

    # --- membership -------------------------------------------------------------------------------

    def join(self) -> dict[str, list[int]]:
        """Join (or rejoin) the group and return this member's partitions."""
        deadline = time.monotonic() + REBALANCE_TIMEOUT_MS / 1000
        while True:
            res = self.client.group_request(self.group, ApiKey.JOIN_GROUP, {
                "group_id": self.group, "session_timeout_ms": SESSION_TIMEOUT_MS,
                "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS, "member_id": self.member_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": ASSIGNOR, "metadata": encode_subscription(self.topics)}]})
            code = res["error_code"]
            if code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = res["member_id"]
                continue
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if code == ErrorCode.REBALANCE_IN_PROGRESS and time.monotonic() < deadline:
                continue
            if code:
                raise KafkaClientError(code, f"JoinGroup of group {self.group}")
            self.member_id, self.generation = res["member_id"], res["generation_id"]
            assignments = []
            if res["leader"] == self.member_id:
                assignments = self._assign(res["members"])
            sync = self.client.group_request(self.group, ApiKey.SYNC_GROUP, {
                "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                "protocol_type": PROTOCOL_TYPE, "protocol_name": ASSIGNOR, "assignments": assignments})
            if sync["error_code"] in _REJOIN and time.monotonic() < deadline:
                continue
            if sync["error_code"]:
                raise KafkaClientError(sync["error_code"], f"SyncGroup of group {self.group}")
            self.assignment = {t: sorted(ps) for t, ps in decode_assignment(bytes(sync["assignment"])).items()}
            self._last_heartbeat = time.monotonic()
            log.info("joined group %s generation %d as %s: %s", self.group, self.generation, self.member_id,
                     self.assignment)
            return self.assignment

    def _assign(self, members: list[dict]) -> list[dict]:
        subs = {m["member_id"]: decode_subscription_topics(bytes(m["metadata"])) for m in members}
        topics = sorted({t for ts in subs.values() for t in ts})
        counts = {}
        for t in topics:
            try:
                counts[t] = self.client.partition_count(t)
            except KafkaClientError as exc:
                log.warning("group %s: cannot assign topic %s: %s", self.group, t, exc)
        plan = range_assign(subs, counts)
        return [{"member_id": m, "assignment": encode_assignment(parts)} for m, parts in plan.items()]

    def poll(self) -> bool:
        """Heartbeat when one is due; True when the group is rebalancing and the caller must commit and
        `join()` again."""
        if time.monotonic() - self._last_heartbeat < HEARTBEAT_INTERVAL_S:
            return False
        res = self.client.group_request(self.group, ApiKey.HEARTBEAT, {
            "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id})
        self._last_heartbeat = time.monotonic()
        if res["error_code"] in _REJOIN:
            return True
        if res["error_code"]:
            raise KafkaClientError(res["error_code"], f"Heartbeat of group {self.group}")
        return False

    def leave(self) -> None:
        if not self.member_id:
            return
        res = self.client.group_request(self.group, ApiKey.LEAVE_GROUP, {
            "group_id": self.group, "member_id": self.member_id, "members": [{"member_id": self.member_id}]})
        if res["error_code"] and res["error_code"] != ErrorCode.UNKNOWN_MEMBER_ID:
            log.warning("LeaveGroup of group %s: %s", self.group, ErrorCode(res["error_code"]).name)
        self.member_id, self.generation = "", -1

    # --- offsets ----------------------------------------------------------------------------------

    def committed(self) -> dict[tuple[str, int], int]:
        return self.client.offset_fetch(self.group, self.assignment)

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit `offsets` (next offset to read per partition); a failure is reported, never dropped."""
        if not offsets:
            return
        errors = self.client.offset_commit(self.group, offsets, self.generation, self.member_id)
        failed = {tp: code for tp, code in errors.items() if code}
        if failed:
            detail = ", ".join(f"{t}-{p}: {ErrorCode(c).name}" for (t, p), c in sorted(failed.items()))
            if all(c in _REJOIN for c in failed.values()):
                log.warning("group %s rebalanced before offsets were committed (%s)", self.group, detail)
            else:
                raise KafkaClientError(next(iter(failed.values())), f"OffsetCommit of group {self.group}: {detail}")
