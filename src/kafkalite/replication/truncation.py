"""Where a follower truncates its log to agree with the leader's (KIP-101, KIP-279): one pure function.

Kafka's AbstractFetcherThread.getOffsetTruncationState (2.8/3.x), fed by the leader's answer to
OffsetsForLeaderEpoch or by a Fetch answer's diverging epoch; the ReplicaFetcher asks and applies.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkalite.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

EndOffsetFor = Callable[[int], tuple[int, int]]


def truncation_offset(leader_epoch: int, leader_end: int, local_end_offset_for: EndOffsetFor, local_leo: int,
                      high_watermark: int) -> tuple[int, bool]:
    """Where a follower truncates given the leader's (epoch, end offset) for the epoch it asked about or
    last fetched (Kafka's AbstractFetcherThread.getOffsetTruncationState, 2.8/3.x): (offset, done).
    `local_end_offset_for` is the follower's own LeaderEpochCache.end_offset_for at its LEO. Not done means
    the follower never had the leader's epoch: it truncates to the end of its own largest epoch below and
    asks again with its new latest epoch (KIP-279), until both histories agree."""
    if leader_end == UNDEFINED_EPOCH_OFFSET:  # the leader knows no such epoch: back to the initial offset
        return min(high_watermark, local_leo), True
    if leader_epoch == UNDEFINED_EPOCH:  # a pre-KIP-279 answer: the offset alone
        return min(leader_end, local_leo), True
    f_epoch, f_end = local_end_offset_for(leader_epoch)
    if f_end == UNDEFINED_EPOCH_OFFSET:  # every epoch here is older than the leader's answer
        return min(leader_end, local_leo), True
    if f_epoch != leader_epoch:
        return min(f_end, local_leo), False
    return min(leader_end, f_end, local_leo), True
