"""The README's main command, run as a user runs it, twice in a row: events -> Spark streaming -> compaction;
and what it says when Java is missing or too old."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalite.spark import missing_extra


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
    report = (data / "demo-report.html").read_text()
    for shown in ("user-stats-0", "00000000000000000000.log", "micro-batches", "rows/s", "records before"):
        assert shown in report
    check = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "dump-log", *map(str, sorted(
        (data / "events-1").glob("*.log")))], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout


def run_demo(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "demo"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def env_without_java(tmp_path: Path, **extra: str) -> dict[str, str]:
    """PATH is an empty directory (the demo is started by absolute path), JAVA_HOME as given or unset."""
    (tmp_path / "empty-bin").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    return {**env, "PATH": str(tmp_path / "empty-bin"), **extra}


def fake_java(tmp_path: Path, version: str) -> Path:
    home = tmp_path / f"jdk-{version}"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    return home


def assert_one_line(out: subprocess.CompletedProcess, *expected: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("kafkalite demo: Spark needs Java 17+")
    assert "apt-get install openjdk-17-jre-headless" in lines[0] and "JAVA_HOME" in lines[0]
    for text in expected:
        assert text in lines[0], lines[0]


needs_extra = pytest.mark.skipif(bool(missing_extra()), reason="the Java check comes after the spark extra check")


@needs_extra
def test_demo_without_java_says_what_to_install(tmp_path):
    out = run_demo(tmp_path, env_without_java(tmp_path))
    assert_one_line(out, "no `java` was found (PATH)")
    assert not (tmp_path / "kafkalite-data").exists()  # checked before anything is written


@needs_extra
def test_demo_with_java_home_lacking_java(tmp_path):
    out = run_demo(tmp_path, env_without_java(tmp_path, JAVA_HOME=str(tmp_path / "no-jdk")))
    assert_one_line(out, f"no `java` was found (JAVA_HOME={tmp_path / 'no-jdk'})")


@needs_extra
@pytest.mark.parametrize(("version", "major"), [("11.0.2", 11), ("1.8.0_392", 8)])
def test_demo_with_old_java(tmp_path, version, major):
    home = fake_java(tmp_path, version)
    out = run_demo(tmp_path, env_without_java(tmp_path, JAVA_HOME=str(home)))
    assert_one_line(out, f"is Java {major}")
