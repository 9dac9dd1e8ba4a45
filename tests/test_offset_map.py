"""The cleaner's offset map (reference case M22)."""

from __future__ import annotations

import pytest

from kafkalite.cleaner.offset_map import OffsetMap, OffsetMapFullError


@pytest.mark.slow
@pytest.mark.parametrize("items", [10, 100, 1000, 5000])
def test_m22_every_key_retrievable(items):
    m = OffsetMap(items * 48)
    for i in range(items):
        m.put(str(i).encode(), i)
    assert all(m.get(str(i).encode()) == i for i in range(items))
    m.clear()
    assert all(m.get(str(i).encode()) == -1 for i in range(items))
    assert m.latest_offset == -1


def test_m22_full_map():
    m = OffsetMap(4096)
    assert m.slots == 170
    for i in range(m.slots):
        m.put(str(i).encode(), i)
    assert m.size == m.slots and m.utilization == 1.0
    assert m.get(b"new key") == -1
    assert m.get(str(m.slots - 1).encode()) == m.slots - 1 and m.latest_offset == m.slots - 1
    m.put(b"0", 500)  # an existing key can still move forward
    assert m.get(b"0") == 500
    with pytest.raises(OffsetMapFullError):
        m.put(b"new key", 501)
