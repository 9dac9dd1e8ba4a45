"""kafkalite.client in a process holding many files (a Spark executor, a test run): connections whose
descriptor numbers are 1024 or more must work. select.select refuses them (FD_SETSIZE); a client that used
it for its "did the broker close this idle connection?" check failed every request with "filedescriptor
out of range in select()"."""

from __future__ import annotations

import os
import resource

import pytest

from kafkalite.client import KafkaClient
from kafkalite.records import SimpleRecord, build_batch
from tests.support.brokers import running_broker

HIGH = 1100


@pytest.mark.slow
def test_client_works_with_descriptors_above_1024(tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < HIGH + 100:
        pytest.skip(f"the open-file limit ({hard}) is below {HIGH + 100}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH + 100), hard))
    held = []
    try:
        with running_broker(tmp_path / "data") as b:
            while True:  # push this process's next descriptors past 1024
                fd = os.open(os.devnull, os.O_RDONLY)
                held.append(fd)
                if fd >= HIGH:
                    break
            with KafkaClient(b.bootstrap, timeout_s=30) as c:
                c.create_topic("fds", 1)
                batch = build_batch([SimpleRecord(None, b"v%d" % i) for i in range(3)])
                for _ in range(3):  # each request checks the idle connection first
                    assert c.produce("fds", 0, batch)["error_code"] == 0
                got = [r.value for _o, bt in c.consume("fds", 0, 0, until=9) for r in bt.records()]
                assert got == [b"v0", b"v1", b"v2"] * 3
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
