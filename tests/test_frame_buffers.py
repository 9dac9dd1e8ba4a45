"""`broker.frame_buffers.FrameBuffers`: receive buffers reused only once no view of their last frame is alive.

The broker receives request frames into one such set shared by its connections and each replica fetcher its
answers; `test_broker_channel` checks through a real broker that pipelined requests on several connections are
written exactly as sent.
"""

from __future__ import annotations

from kafkalite.broker.frame_buffers import FrameBuffers
from kafkalite.protocol.connection import FrameDecoder


def test_frame_buffers_are_reused_only_once_no_view_of_them_is_alive():
    bufs = FrameBuffers(keep=2, min_size=100)
    a = bufs(1000)
    a[:5] = b"first"
    kept = a[:5]  # a view of the frame outliving it (as a record batch kept by someone would)
    del a
    b = bufs(1000)
    assert bufs.allocated == 2 and bufs.reused == 0  # the first buffer is still viewed: not handed out
    del b
    c = bufs(900)
    assert bufs.reused == 1 and bytes(kept) == b"first"  # the free one came back; the viewed one untouched
    del c, kept
    held = (bufs(1000), bufs(1000))  # both free again: no new allocation, two buffers in use at once
    assert len(held) == 2
    assert bufs.allocated == 2 and bufs.reused == 3
    assert isinstance(bufs(10), bytearray) and bufs.allocated == 2  # small frames are not pooled


def test_a_frame_beyond_the_kept_buffers_gets_a_buffer_of_exactly_its_size():
    """With every kept buffer in use, the next frame's buffer is not kept and must still be exactly the frame's
    size: the decoder reads until its buffer is full, so a longer one (the slack kept buffers are made with) took
    the next frame's first bytes into this one and hung the broker's connection loop."""
    bufs = FrameBuffers(keep=2, min_size=100)
    held = [bufs(1000), bufs(1000)]
    extra = bufs(1000)
    assert len(extra) == 1000 and bufs.allocated == 3
    assert len(held) == 2


def test_frames_over_max_size_are_not_kept():
    bufs = FrameBuffers(keep=2, min_size=100, max_size=10_000)
    big = bufs(20_000)
    assert isinstance(big, bytearray) and len(big) == 20_000 and bufs.allocated == 0


def test_a_decoder_on_shared_buffers_hands_out_whole_frames_of_their_own_sizes():
    """Two connections' decoders on one set of buffers, frames of varying sizes, the earlier frames' views kept
    alive at random: every frame is its own bytes, of its own length."""
    import random

    rng = random.Random(5)
    bufs = FrameBuffers(keep=3, min_size=64)
    decoders = [FrameDecoder(None, bufs), FrameDecoder(None, bufs)]
    kept: list[tuple[memoryview, bytes]] = []
    for i in range(200):
        dec = decoders[i % 2]
        payload = rng.randbytes(rng.randint(1, 5000))
        data = len(payload).to_bytes(4, "big") + payload
        got = None
        pos = 0
        while got is None:
            buf = dec.recv_buffer()
            n = min(len(buf), rng.randint(1, 3000), len(data) - pos)
            buf[:n] = data[pos:pos + n]
            pos += n
            got = dec.received(n)
        assert pos == len(data) and bytes(got) == payload
        if rng.random() < 0.3:
            kept.append((got, payload))
        if len(kept) > 4:
            kept.pop(rng.randrange(len(kept)))
        assert all(bytes(v) == p for v, p in kept)
    assert bufs.reused > 50
