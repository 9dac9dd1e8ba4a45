"""File and directory naming (reference cases O1-O4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.storage import names


def test_o1_parse_and_delete_name_roundtrip():
    assert names.parse_topic_partition_name("test_topic-143") == ("test_topic", 143)
    assert names.parse_topic_partition_name(names.delete_dir_name("foo.bar-testtopic", 42)) == ("foo.bar-testtopic", 42)
    assert names.parse_topic_partition_name(names.future_dir_name("t", 1)) == ("t", 1)
    assert names.parse_topic_partition_name(names.stray_dir_name("t-x", 7)) == ("t-x", 7)


@pytest.mark.parametrize("bad", ["", "test_topic1999", "-1999", "test_topic-", "test_topic-1999a", "non_kafka_dir",
                                 "non_kafka_dir-delete", "test_topic1999.-delete"])
def test_o2_rejected_names(bad):
    with pytest.raises(ValueError):
        names.parse_topic_partition_name(bad)


def test_o3_delete_dir_names():
    assert re.fullmatch(r"foo-3\.[0-9a-z]{32}-delete", names.delete_dir_name("foo", 3))
    long_name = names.delete_dir_name("n" + "o" * 248, 5)
    assert len(long_name) == 255
    assert re.fullmatch(r"n[o]{212}-5\.[0-9a-z]{32}-delete", long_name)


def test_o4_segment_file_names():
    p = names.log_file(Path("/d"), 23423423)
    assert p.name == "00000000000023423423.log"
    for f in (p, names.offset_index_file(Path("/d"), 23423423), names.time_index_file(Path("/d"), 23423423)):
        assert names.offset_from_file_name(f.name) == 23423423
    assert names.snapshot_file(Path("/d"), 5, ".deleted").name == "00000000000000000005.snapshot.deleted"
    with pytest.raises(ValueError):
        names.offset_from_file_name("١٢.snapshot")


@given(st.text(max_size=40))
def test_parse_never_raises_anything_else(name):
    try:
        topic, partition = names.parse_topic_partition_name(name)
    except ValueError:
        return
    assert topic and isinstance(partition, int)
