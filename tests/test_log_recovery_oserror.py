"""An OSError during recovery (EFBIG from a real file-size limit, EMFILE from a real descriptor limit) fails the
load; it never empties segments. Before the fix, the loader took any OSError for a corrupt segment and truncated
it, then failed on the next one: the records of the first were gone. (An address-space limit made the same point
while recovery mapped each rebuilt index; it writes them with `pwrite` now and maps none.)"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from kafkalite.records import SimpleRecord, build_batch
from kafkalite.storage.log import Log
from kafkalite.storage.log_config import LogConfig

CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 64}
N = 200

LIMITS = {
    # a rebuilt index is preallocated to 10 MiB: under a smaller file-size limit that fails with EFBIG (the
    # signal a process gets for it ignored, as a broker's would have to be)
    "file-size": "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                 "resource.setrlimit(resource.RLIMIT_FSIZE, ((EXTRA - 2) << 20, resource.RLIM_INFINITY))",
    "descriptors": "resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir('/proc/self/fd')) + EXTRA, 4096))",
}


def _keys(path) -> list[bytes]:
    with Log(path, LogConfig.from_props(CONFIG)) as log:
        return [r.key for b in log.batches(0) for r in b.records()]


@pytest.mark.slow
@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_an_os_error_during_recovery_empties_no_segment(tmp_path, limit):
    original = tmp_path / "original-0"
    with Log(original, LogConfig.from_props(CONFIG)) as log:
        for i in range(N):
            log.append_as_leader(build_batch([SimpleRecord(b"k%d" % i, b"v" * 200, 1700000000000 + i)]))
    assert len(list(original.glob("*.log"))) > 5
    failures = 0
    for extra in range(3, 20, 2):  # limits that bite at different segments
        part = tmp_path / f"t-{extra}"
        shutil.copytree(original, part)
        for index in part.glob("*.index"):  # recovery must rebuild every offset index, mapping each
            index.unlink()
        (part / ".lock").unlink(missing_ok=True)
        script = textwrap.dedent("""
            import os, resource, sys
            from kafkalite.storage.log import Log
            from kafkalite.storage.log_config import LogConfig
            EXTRA = {extra}
            {limit}
            try:
                Log({path!r}, LogConfig.from_props({config!r}))
            except OSError as exc:
                print("failed", exc.errno)
        """).format(extra=extra, limit=LIMITS[limit], path=str(part), config=CONFIG)
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        failures += result.stdout.startswith("failed")
        assert _keys(part) == [b"k%d" % i for i in range(N)], (extra, result.stdout, result.stderr)
    assert failures, "no limit made recovery fail: the test proves nothing"
