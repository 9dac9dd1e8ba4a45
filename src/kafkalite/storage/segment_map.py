"""The ordered map of a partition's segments, by base offset (the log and its loader share it)."""

from __future__ import annotations

from typing import Any

from sortedcontainers import SortedDict

from kafkalite.storage.segment import LogSegment


class SegmentMap(SortedDict):
    """The log's segments by base offset, remembering the last one (the active segment).

    Every append asks for the active segment, and `peekitem(-1)` costs about a microsecond; the
    remembered one is dropped by any change to the map, whoever makes it (roll, truncation, the
    loader, the cleaner's segment swaps), so it can never be stale.
    """

    _active: LogSegment | None = None

    @property
    def last_segment(self) -> LogSegment:
        active = self._active
        if active is None:
            active = self._active = self.peekitem(-1)[1]
        return active

    def __setitem__(self, key: int, value: LogSegment) -> None:
        self._active = None
        super().__setitem__(key, value)

    def __delitem__(self, key: int) -> None:
        self._active = None
        super().__delitem__(key)

    def clear(self) -> None:
        self._active = None
        super().clear()

    def pop(self, key: int, *default: Any) -> Any:
        self._active = None
        return super().pop(key, *default)

    def popitem(self, index: int = -1) -> tuple[int, LogSegment]:
        self._active = None
        return super().popitem(index)

    def setdefault(self, key: int, default: Any = None) -> Any:
        self._active = None
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._active = None
        super().update(*args, **kwargs)

    # SortedDict's own methods reach these through private aliases (`|=` and the constructor call
    # `_update`; `update` calls `_setitem`), which would bypass the overrides above
    _setitem = __setitem__
    _update = update
