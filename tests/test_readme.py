"""The README's examples work as printed: every ```python block runs on its own (fresh interpreter, empty
directory), every shell line that runs `kafkalite` parses with the real command-line parser, every `make` target
exists, and the Layout section names every package."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import kafkalite
from kafkalite.cli.main import build_parser
from kafkalite.spark import java_problem, missing_extra

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
SHELL = [code for lang, code in BLOCKS if lang in ("sh", "bash", "shell")]


def test_readme_keeps_the_two_commands():
    assert "make demo" in README and "make test" in README
    assert len(PYTHON) >= 3 and len(SHELL) >= 3


@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_block_runs_on_its_own(tmp_path, index):
    code = PYTHON[index]
    if "kafkalite.spark" in code and (missing_extra() or java_problem()):
        pytest.skip(f"block {index} uses Spark: {missing_extra() or java_problem()}")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"README python block {index}:\n{code}\n{out.stdout}\n{out.stderr}"


def shell_commands() -> list[list[str]]:
    """Each shell command as words, with comments dropped, continuation lines joined, here-document bodies
    skipped, and cut at the first redirection or pipe."""
    commands = []
    for block in SHELL:
        lines = block.replace("\\\n", " ").splitlines()
        heredoc_end = None
        for line in lines:
            if heredoc_end is not None:
                if line.strip() == heredoc_end:
                    heredoc_end = None
                continue
            if (m := re.search(r"<<-?\s*'?(\w+)'?", line)) is not None:
                heredoc_end = m.group(1)
            lexer = shlex.shlex(line, posix=True, punctuation_chars="|<>;&")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words = []
            for word in lexer:
                if word and set(word) <= set("|<>;&"):
                    break
                words.append(word)
            if words:
                commands.append(words)
    return commands


# Programs the README's shell blocks may run besides kafkalite, make and pip (the Security section makes its
# certificates with openssl and shows kcat as any Kafka client).
OTHER_PROGRAMS = ("python3", ".", "source", "openssl", "printf", "cat", "echo", "kcat", "for", "done")


def test_shell_lines_use_real_commands_and_options():
    parser = build_parser()
    makefile = (ROOT / "Makefile").read_text()
    seen = set()
    for words in shell_commands():
        program = words[0]
        if program.endswith("kafkalite"):
            assert program in ("kafkalite", ".venv/bin/kafkalite"), words
            try:
                args = parser.parse_args(words[1:])
            except SystemExit as e:
                pytest.fail(f"README command does not parse ({e}): {shlex.join(words)}")
            assert getattr(args, "func", None) is not None, words
            seen.add(words[1])
        elif program == "make":
            for target in words[1:]:
                assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no make target {target}"
        elif program.endswith("pip"):
            assert words[1] == "install", words
        elif not re.fullmatch(r"[A-Z_]+=\S*", program):  # a variable assignment (B=host:port,...)
            assert program in OTHER_PROGRAMS, f"unexpected command in README: {shlex.join(words)}"
    assert {"serve", "topics", "groups", "produce", "consume", "dump-log"} <= seen


def test_layout_names_every_package():
    layout = README.split("## Layout", 1)[1]
    src = Path(kafkalite.__file__).resolve().parent
    packages = sorted(p.parent.relative_to(src.parent) for p in src.rglob("__init__.py"))
    for package in packages:
        top = f"src/{package.as_posix()}/"
        nested = f"{package.parent.name}/{package.name}/"  # e.g. protocol/messages/, under its parent's entry
        assert top in layout or nested in layout, f"README's Layout does not mention {top}"
    assert "src/pyspark_kafkalite/" in layout
