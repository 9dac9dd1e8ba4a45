"""Transaction bookkeeping while cleaning (Kafka's CleanedTransactionMetadata).

The cleaner never sees an open transaction (it stops at the last stable offset), so every
transactional batch it reads belongs to a transaction that was either aborted (listed in the
transaction indexes) or committed. This object walks along with the cleaner and answers two
questions per batch: may this data batch go because its transaction aborted, and may this marker
go because no data of its transaction is left. An ABORT marker that still has data behind it is
kept and re-indexed in the cleaned segment's transaction index.
"""

from __future__ import annotations

import heapq
import itertools

from kafkalite.records.control import ControlRecordType, parse_control_type
from kafkalite.storage.txn_index import AbortedTxn, TransactionIndex


class _AbortedTxnState:
    __slots__ = ("last_observed_batch_offset", "txn")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    def __init__(self) -> None:
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = itertools.count()
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._aborted, (txn.first_offset, next(self._seq), txn))

    def _consume_aborted_up_to(self, offset: int) -> None:
        heap = self._aborted
        while heap and heap[0][0] <= offset:
            txn = heapq.heappop(heap)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))

    def on_control_batch_read(self, last_offset: int, producer_id: int, first_record_key: bytes | None) -> bool:
        """True if this control batch may be discarded (its transaction left no data behind).

        `first_record_key` is the key of the batch's first control record; None for a batch the
        cleaner already emptied, which is always discardable.
        """
        self._consume_aborted_up_to(last_offset)
        if first_record_key is None:
            return True
        kind = parse_control_type(first_record_key)
        if kind == ControlRecordType.ABORT:
            state = self._ongoing_aborted.pop(producer_id, None)
            if state is not None and state.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False

    def on_batch_read(self, last_offset: int, producer_id: int, transactional: bool) -> bool:
        """True if this data batch belongs to an aborted transaction (and so may be discarded)."""
        if self._aborted:
            self._consume_aborted_up_to(last_offset)
        if not transactional:
            return False
        state = self._ongoing_aborted.get(producer_id)
        if state is not None:
            state.last_observed_batch_offset = last_offset
            return True
        self._ongoing_committed.add(producer_id)
        return False
