"""The core install (no `spark` extra) runs the broker, the storage engine and the CLI, and `kafkalite.spark`
says which extra to install. Run in subprocesses where pyspark, pyarrow and numba cannot be imported: a meta-path
finder refuses them, as if they were not installed."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
import textwrap

import kafkalite

BLOCK = textwrap.dedent("""
    import sys

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("pyspark", "pyarrow", "numba", "llvmlite", "py4j"):
                raise ImportError(f"No module named {name!r} (blocked by the test)", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
""")
HINT = "pip install 'kafkalite[spark]'"


def run_blocked(code: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code), *argv], capture_output=True,
                          text=True, timeout=120)


def run_cli_blocked(*argv: str) -> subprocess.CompletedProcess:
    return run_blocked("import runpy; sys.argv[0] = 'kafkalite'; runpy.run_module('kafkalite.cli.main', "
                       "run_name='__main__')", *argv)


def test_cli_help_without_the_extra():
    for command in ("serve", "topics", "groups", "produce", "consume", "dump-log", "demo"):
        out = run_cli_blocked(command, "--help")
        assert out.returncode == 0, out.stderr
        assert f"usage: kafkalite {command}" in out.stdout


def test_every_module_outside_spark_imports_without_the_extra():
    modules = sorted(m.name for m in pkgutil.walk_packages(kafkalite.__path__, "kafkalite.")
                     if not m.name.startswith("kafkalite.spark."))
    assert "kafkalite.broker.server" in modules and "kafkalite.storage.log" in modules
    out = run_blocked("""
        import importlib
        for name in sys.argv[1:]:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m.partition(".")[0] in ("pyspark", "pyarrow", "numba"))
        assert not leaked, leaked
        print("imported", len(sys.argv) - 1)
    """, *modules)
    assert out.returncode == 0, out.stderr
    assert f"imported {len(modules)}" in out.stdout


def test_spark_entry_points_name_the_extra():
    out = run_blocked("""
        import kafkalite.spark
        assert kafkalite.spark.FORMAT == "kafkalite"
        assert kafkalite.spark.missing_extra() == ["pyspark", "pyarrow", "numba"], kafkalite.spark.missing_extra()
        for call in (lambda: kafkalite.spark.register(None), lambda: kafkalite.spark.local_session("x"),
                     kafkalite.spark.check_prerequisites):
            try:
                call()
            except ImportError as e:
                print("ERROR", e)
            else:
                raise AssertionError("no error")
    """)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3, out.stdout
    for line in lines:
        assert line.startswith("ERROR kafkalite.spark needs pyspark, pyarrow, numba") and line.endswith(HINT), line


def test_demo_without_the_extra_says_what_to_install(tmp_path):
    out = subprocess.run([sys.executable, "-c", BLOCK + "import runpy; sys.argv[0] = 'kafkalite'; "
                          "runpy.run_module('kafkalite.cli.main', run_name='__main__')", "demo"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [f"kafkalite demo: kafkalite.spark needs pyspark, pyarrow, numba "
                                               f"(the optional extra 'spark', left out of the core install): {HINT}"]
    assert not (tmp_path / "kafkalite-data").exists()
