"""Reusable receive buffers for large frames (see FrameBuffers)."""

from __future__ import annotations


class FrameBuffers:
    """Buffers that large frames are received into, reused from frame to frame (a FrameDecoder's `allocate`). A new
    bytearray per frame costs its zeroing (bytearray(n) writes n zeros: 6 % of the broker's perf samples producing 1 MiB
    requests), and for big ones the page faults of fresh memory and its unmapping when freed. A buffer is handed out
    again only when no view of the frame it last held is alive (`_unexported`), whatever path kept one: a produce
    request's batches are written to the segment from views and an append keeps none (producer state and the epoch
    cache keep numbers), nor does a follower's append of a fetched answer.

    A replica fetcher keeps two (two requests in flight); the broker keeps a few for all its connections' requests.
    Frames under `min_size` come from malloc's arenas (nothing to save), frames over `max_size` are not kept (one
    huge request must not pin its memory)."""

    def __init__(self, keep: int = 2, min_size: int = 1 << 20, max_size: int = 1 << 62) -> None:
        self.keep = keep
        self.min_size = min_size
        self.max_size = max_size
        self._buffers: list[bytearray] = []
        self.reused = 0
        self.allocated = 0

    def __call__(self, size: int) -> bytearray | memoryview:
        if size < self.min_size or size > self.max_size:
            return bytearray(size)
        spare = None
        for i, buf in enumerate(self._buffers):
            if _unexported(buf):
                if len(buf) >= size:
                    self.reused += 1
                    return memoryview(buf)[:size]
                spare = i
        self.allocated += 1
        if spare is None and len(self._buffers) >= self.keep:
            return bytearray(size)  # every kept buffer is in use: this one is not kept
        buf = bytearray(size + (size >> 4))  # room for the next frame being a little larger
        if spare is not None:
            self._buffers[spare] = buf
        else:
            self._buffers.append(buf)
        return memoryview(buf)[:size]


def _unexported(buf: bytearray) -> bool:
    """True when no view of `buf` is alive. A bytearray refuses to change its size while any buffer export
    exists (every memoryview of it, and every slice of those, holds one), so shrinking it by a byte tells;
    growing it back stays within its allocation, so neither step moves or copies the contents."""
    try:
        del buf[-1:]
    except BufferError:
        return False
    buf.append(0)
    return True
