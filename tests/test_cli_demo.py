"""The README's main command, run as a user runs it, twice in a row."""

from __future__ import annotations

import subprocess
import sys


def test_demo_runs_twice(tmp_path):
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "demo", "--records", "3000"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Wrote 3000 page views" in out.stdout
        assert "log end offset 3000" in out.stdout
        assert "problems found: 0" in out.stdout
    assert (tmp_path / "kafkalite-data" / "events-0").is_dir()
