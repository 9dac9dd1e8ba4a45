"""The fault tests' checker, in the vocabulary of Jepsen's queue checker.

Inputs: the workload's sends (id, partition, offset or unknown, outcome), what a fresh consumer read afterwards,
and each replica's log read straight from its broker's data dir (`kafkalite.storage.Log.open_read_only`, which
takes no lock, so it works beside a running broker). Counts:

- acked-lost: acknowledged values never read (must be 0); Jepsen's narrower "lost": those at or below the
  highest offset read on their partition;
- inconsistent offsets: one (partition, offset) holding two values across the acknowledgements, the reads and
  the replicas (below the high watermark), or an acknowledged value read at another offset than acknowledged;
- duplicates: one value at two offsets (0 with idempotence). A copy the client re-sent under a newer epoch of the
  same producer id is counted apart, as `resent_after_epoch_bump`: a broker deduplicates by (producer id, epoch,
  sequence), and a new epoch restarts the sequences, so no broker can tell such a copy from a new record. That
  is librdkafka's doing, against Kafka's brokers too (confluentinc/librdkafka#4953: after a leader change it may
  send a later sequence before retrying the earlier ones, get OUT_OF_ORDER_SEQUENCE_NUMBER, bump the epoch and
  re-send, under the new epoch, batches the old leader had appended and answered NOT_LEADER_OR_FOLLOWER for).
  Only a copy the client acknowledged at the last offset counts so (it was never told of the earlier ones), and
  only with the replicas to tell the epochs apart; every other duplicate counts;
- aborted reads: a value whose send was definitively refused, found in a read or a replica;
- unexpected: a value read that no producer sent;
- replica divergence: below the high watermark every replica holds the same batches, byte for byte (base and
  last offset, partition leader epoch, CRC and a digest of the whole batch), and reaches the high watermark;
- epoch-cache problems: each replica's leader-epoch cache is monotonic, agrees with the epochs stamped in its
  own batches, and below the high watermark is the same history on every replica.

`check(...)` returns a `Report`; `Report.problems()` lists what breaks Kafka's promise and `assert_clean()` fails
the test with a summary, so a scenario's asserts read as the promise they check.
"""

from __future__ import annotations

import hashlib
import itertools
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalite.storage.log import Log
from tests.support.workload import Send

SAMPLES = 5  # examples kept per kind of problem, for the failure message


@dataclass(frozen=True)
class BatchId:
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    digest: str  # sha1 of the batch's bytes: "byte-identical", not just same header


@dataclass
class ReplicaSnapshot:
    """One replica's log as its broker left it on disk."""

    broker: int
    partition: int
    log_start: int
    leo: int
    batches: list[BatchId]
    records: dict[int, bytes | None]  # offset -> value
    epochs: list[tuple[int, int]]  # (epoch, start offset), the leader-epoch cache
    producers: dict[int, tuple[int, int]] = field(default_factory=dict)  # offset -> (producer id, epoch)


def snapshot_replica(directory: Path, broker: int, partition: int) -> ReplicaSnapshot | None:
    """Read a partition directory without locking it; None when the broker holds no replica there."""
    if not directory.is_dir():
        return None
    log = Log.open_read_only(directory)
    try:
        batches, records, producers = [], {}, {}
        for b in log.batches():
            raw = bytes(b.buffer)
            batches.append(BatchId(b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc,
                                   hashlib.sha1(raw).hexdigest()))
            if not b.is_control:
                for r in b.records():
                    records[r.offset] = r.value
                    if b.has_producer_id:
                        producers[r.offset] = (b.producer_id, b.producer_epoch)
        epochs = [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.epoch_entries()]
        return ReplicaSnapshot(broker, partition, log.log_start_offset, log.log_end_offset, batches, records, epochs,
                               producers)
    finally:
        log.close()


def snapshot_replicas(data_dirs: dict[int, Path], topic: str, partitions: int) -> dict[int, dict[int,
                                                                                            ReplicaSnapshot]]:
    """{partition: {broker: snapshot}} for every broker data dir holding a replica of `topic`."""
    out: dict[int, dict[int, ReplicaSnapshot]] = {}
    for p in range(partitions):
        out[p] = {}
        for bid, d in sorted(data_dirs.items()):
            snap = snapshot_replica(Path(d) / f"{topic}-{p}", bid, p)
            if snap is not None:
                out[p][bid] = snap
    return out


@dataclass
class Report:
    sent: int = 0
    acked: int = 0
    failed: int = 0  # definitively refused
    unknown: int = 0  # timed out / indeterminate
    read: int = 0
    unknown_read: int = 0  # indeterminate sends that were read (allowed: they may have been appended)
    acked_lost: list[str] = field(default_factory=list)
    lost_below_max_read: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    resent_after_epoch_bump: list[str] = field(default_factory=list)  # not a broker's fault (module docstring)
    aborted_reads: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    replica_divergence: list[str] = field(default_factory=list)
    epoch_problems: list[str] = field(default_factory=list)
    replicas_compared: int = 0
    batches_compared: int = 0
    hw: dict[int, int] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # scenario figures: failover times, epochs, ...

    COUNTED = ("acked_lost", "lost_below_max_read", "inconsistent", "duplicates", "aborted_reads", "unexpected",
               "replica_divergence", "epoch_problems")

    def counts(self) -> dict[str, int]:
        return {k: len(getattr(self, k)) for k in self.COUNTED}

    def problems(self) -> list[str]:
        out = []
        for k in self.COUNTED:
            items = getattr(self, k)
            if items:
                out.append(f"{k}: {len(items)} (e.g. {items[:SAMPLES]})")
        return out

    def summary(self) -> str:
        c = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        return (f"sent={self.sent} acked={self.acked} failed={self.failed} unknown={self.unknown} read={self.read} "
                f"unknown_read={self.unknown_read} resent_after_epoch_bump={len(self.resent_after_epoch_bump)} "
                f"replicas_compared={self.replicas_compared} "
                f"batches_compared={self.batches_compared} hw={self.hw}; {c}; figures={self.figures}")

    def assert_clean(self, min_acked: int = 1) -> None:
        """Kafka's promise held, and the run was not vacuous (something was acknowledged and compared)."""
        problems = self.problems()
        if self.acked < min_acked:
            problems.append(f"only {self.acked} sends acknowledged (expected at least {min_acked})")
        assert not problems, "\n".join(problems) + "\n" + self.summary()


# over the complexity limit: still to split (issue 34)
def check(sends: list[Send], reads: dict[int, list[tuple[int, bytes]]],  # noqa: C901
          replicas: dict[int, dict[int, ReplicaSnapshot]] | None = None, hws: dict[int, int] | None = None,
          *, expect_replicas: int | None = None) -> Report:
    """Judge one run. `hws` are the partitions' high watermarks at the end (the final consumer's); replicas are
    compared below them. `expect_replicas`: how many replicas of each partition must exist and reach the HW."""
    rep = Report(sent=len(sends), hw=dict(hws or {}))
    by_id = {s.id: s for s in sends}
    rep.acked = sum(s.outcome == "ok" for s in sends)
    rep.failed = sum(s.outcome == "fail" for s in sends)
    rep.unknown = rep.sent - rep.acked - rep.failed
    errors = Counter(s.error for s in sends if s.outcome != "ok")
    if errors:
        rep.figures["errors"] = dict(errors.most_common())

    # values at offsets, from every source
    at: dict[tuple[int, int], set[bytes | None]] = defaultdict(set)
    read_at: dict[str, list[tuple[int, int]]] = defaultdict(list)
    max_read: dict[int, int] = {}
    for p, recs in reads.items():
        for off, value in recs:
            rep.read += 1
            at[(p, off)].add(value)
            key = value.decode(errors="replace") if value is not None else "<null>"
            read_at[key].append((p, off))
            max_read[p] = max(max_read.get(p, -1), off)
    for s in sends:
        if s.outcome == "ok" and s.offset is not None:
            at[(s.partition, s.offset)].add(s.id.encode())

    for s in sends:
        seen = read_at.get(s.id)
        if s.outcome == "ok":
            if not seen:
                rep.acked_lost.append(f"{s.id}@p{s.partition}:{s.offset}")
                if s.offset is not None and s.offset <= max_read.get(s.partition, -1):
                    rep.lost_below_max_read.append(f"{s.id}@p{s.partition}:{s.offset}")
            elif s.offset is not None and (s.partition, s.offset) not in seen:
                rep.inconsistent.append(f"{s.id} acknowledged at p{s.partition}:{s.offset}, read at {seen}")
        elif s.outcome == "fail" and seen:
            rep.aborted_reads.append(f"{s.id} ({s.error}) read at {seen}")
        elif seen:
            rep.unknown_read += 1
    writers = {(p, off): w for p, by_broker in (replicas or {}).items() for snap in by_broker.values()
               for off, w in snap.producers.items()}
    for value, places in read_at.items():
        if len(places) > 1:
            copies = [writers.get(place) for place in sorted(places)]
            send = by_id.get(value)
            # the client's delivery report names the last copy: it did not know of the earlier ones
            acked_last = send is not None and send.outcome == "ok" and (send.partition, send.offset) == max(places)
            if acked_last and _resent_under_new_epochs(copies):
                rep.resent_after_epoch_bump.append(f"{value} at {sorted(places)} by (producer id, epoch) {copies}")
            else:
                rep.duplicates.append(f"{value} at {sorted(places)} by (producer id, epoch) {copies}")
        if value not in by_id:
            rep.unexpected.append(f"{value} at {places}")

    for p, by_broker in (replicas or {}).items():
        hw = (hws or {}).get(p)
        if hw is None:
            raise ValueError(f"replicas of partition {p} given without its high watermark")
        _compare_replicas(rep, p, hw, by_broker, expect_replicas)
        for snap in by_broker.values():
            for off, value in snap.records.items():
                if off < hw:
                    at[(p, off)].add(value)
                key = value.decode(errors="replace") if value is not None else "<null>"
                s = by_id.get(key)
                if s is not None and s.outcome == "fail":
                    rep.aborted_reads.append(f"{key} ({s.error}) in broker {snap.broker}'s replica at p{p}:{off}")

    for (p, off), values in sorted(at.items()):
        if len(values) > 1:
            rep.inconsistent.append(f"p{p}:{off} holds {sorted(v or b'' for v in values)}")
    return rep


def _resent_under_new_epochs(copies: list[tuple[int, int] | None]) -> bool:
    """Copies (in offset order) written by one producer id, each under a newer epoch than the one before."""
    if any(c is None for c in copies):
        return False
    return all(a[0] == b[0] and b[1] > a[1] for a, b in itertools.pairwise(copies))  # type: ignore[index]


def _compare_replicas(rep: Report, p: int, hw: int, by_broker: dict[int, ReplicaSnapshot],
                      expect_replicas: int | None) -> None:
    if expect_replicas is not None and len(by_broker) != expect_replicas:
        rep.replica_divergence.append(f"p{p}: {len(by_broker)} replicas on disk ({sorted(by_broker)}), "
                                      f"expected {expect_replicas}")
    if not by_broker:
        return
    start = max(s.log_start for s in by_broker.values())
    below = {b: [x for x in s.batches if x.base_offset < hw and x.last_offset >= start]
             for b, s in by_broker.items()}
    ref_broker, ref = next(iter(below.items()))
    rep.replicas_compared += len(by_broker)
    rep.batches_compared += sum(len(v) for v in below.values())
    for bid, snap in by_broker.items():
        if snap.leo < hw:
            rep.replica_divergence.append(f"p{p}: broker {bid}'s replica ends at {snap.leo}, below the HW {hw}")
        mine = below[bid]
        if bid != ref_broker and mine != ref:
            diff = next((i for i, (a, b) in enumerate(zip(ref, mine, strict=False)) if a != b), min(len(ref),
                                                                                                     len(mine)))
            a = ref[diff] if diff < len(ref) else None
            b = mine[diff] if diff < len(mine) else None
            rep.replica_divergence.append(f"p{p} below HW {hw}: broker {ref_broker} has {a}, broker {bid} has {b}")
        _check_epochs(rep, p, hw, snap)
    histories = {bid: [e for e in s.epochs if e[1] < hw] for bid, s in by_broker.items()}
    ref_h = histories[ref_broker]
    for bid, h in histories.items():
        # a replica whose log starts later may have lost the earliest entries with its segments: compare the
        # entries both still cover
        common = max(by_broker[bid].log_start, by_broker[ref_broker].log_start)
        if _from(h, common) != _from(ref_h, common):
            rep.epoch_problems.append(f"p{p}: epoch history below HW {hw} differs: broker {ref_broker} {ref_h}, "
                                      f"broker {bid} {h}")


def _from(history: list[tuple[int, int]], offset: int) -> list[tuple[int, int]]:
    """The entries covering offsets >= `offset` (the one in force at `offset` clamped to it)."""
    out = []
    for i, (epoch, start) in enumerate(history):
        nxt = history[i + 1][1] if i + 1 < len(history) else None
        if nxt is not None and nxt <= offset:
            continue
        out.append((epoch, max(start, offset)))
    return out


def _check_epochs(rep: Report, p: int, hw: int, snap: ReplicaSnapshot) -> None:
    e = snap.epochs
    for (e1, s1), (e2, s2) in itertools.pairwise(e):
        if not (e2 > e1 and s2 >= s1):
            rep.epoch_problems.append(f"p{p} broker {snap.broker}: epoch cache not monotonic: {e}")
            return
    if not e:
        if any(b.base_offset < hw for b in snap.batches):
            rep.epoch_problems.append(f"p{p} broker {snap.broker}: batches below HW but an empty epoch cache")
        return
    for b in snap.batches:
        if b.base_offset >= hw or b.base_offset < e[0][1]:
            continue
        cached = next(ep for ep, start in reversed(e) if start <= b.base_offset)
        if cached != b.leader_epoch:
            rep.epoch_problems.append(f"p{p} broker {snap.broker}: batch at {b.base_offset} has leader epoch "
                                      f"{b.leader_epoch}, the epoch cache says {cached} ({e})")
            return


def latency_figures(sends: list[Send]) -> dict[str, float]:
    """p50/p99/max seconds from produce() to acknowledgement, and the longest gap between acknowledgements on
    one partition (the unavailability a user saw)."""
    lat = sorted(s.acked_at - s.sent_at for s in sends if s.outcome == "ok" and s.acked_at is not None)
    out: dict[str, float] = {}
    if lat:
        out["p50_ms"] = round(1000 * statistics.median(lat), 1)
        out["p99_ms"] = round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1)
        out["max_ms"] = round(1000 * lat[-1], 1)
    gaps = []  # (gap, partition, start)
    by_p: dict[int, list[float]] = defaultdict(list)
    for s in sends:
        if s.outcome == "ok" and s.acked_at is not None:
            by_p[s.partition].append(s.acked_at)
    for p, times in by_p.items():
        times.sort()
        gaps.extend((b - a, p, a) for a, b in itertools.pairwise(times))
    if gaps:
        gap, p, start = max(gaps)
        out["max_ack_gap_s"] = round(gap, 2)
        # where: the partition and the gap's start, in seconds after the first send (to find it in the logs)
        at = time.time() - (time.monotonic() - start)
        wall = time.strftime("%H:%M:%S", time.localtime(at)) + f",{int(at * 1000) % 1000:03d}"  # as the logs
        out["max_ack_gap_at"] = f"p{p} +{start - min(s.sent_at for s in sends):.1f}s ({wall})"
    return out
