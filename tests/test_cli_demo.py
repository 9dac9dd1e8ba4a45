"""The README's main command, run as a user runs it, twice in a row: events -> Spark streaming -> compaction."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs java")
def test_demo_runs_twice(tmp_path):
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "demo", "--records", "4000", "--users", "50"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Wrote 3,000 page views" in out.stdout
        assert "read exactly 1,000 rows" in out.stdout
        assert "-> 50, one per user" in out.stdout
        compacted = re.search(r"\((\d+) of (\d+) partition\(s\) had older aggregates to drop\)", out.stdout)
        assert compacted is not None and int(compacted.group(1)) == int(compacted.group(2)) >= 1, out.stdout
        assert "every event counted exactly once: True" in out.stdout
    data = tmp_path / "kafkalite-data"
    assert (data / "events-0").is_dir() and (data / "user-stats-0").is_dir()
    assert "<svg" in (data / "demo-report.html").read_text()
    check = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "dump-log", *map(str, sorted(
        (data / "events-1").glob("*.log")))], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout
