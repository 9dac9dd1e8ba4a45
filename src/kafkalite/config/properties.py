"""Reading `server.properties` exactly as Java's `Properties.load` does (escapes, `\\uXXXX`, continuation lines).

Kafka loads the file with `java.util.Properties`; operators copy files between the two, so a value with an
escaped `=` or a path split over lines must mean the same thing here. The `javaproperties` package implements
that grammar; this module only adds file handling and an error that names the file.
"""

from __future__ import annotations

from pathlib import Path

from kafkalite.errors import InvalidConfigError


def parse_properties(text: str) -> dict[str, str]:
    """Keys and values of a `.properties` text; a key given twice keeps its last value, as in Java."""
    # imported on first use: it brings xml and urllib along (40 ms of every start of every command)
    import javaproperties

    return dict(javaproperties.loads(text))


def read_properties(path: str | Path) -> dict[str, str]:
    """The file's properties. Java reads ISO-8859-1; a file that is valid UTF-8 is read as UTF-8 so paths
    and names written in an editor keep their characters (see docs/design.md, deviations)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidConfigError(f"cannot read the config file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        return parse_properties(text)
    except ValueError as exc:  # a malformed \uXXXX escape
        raise InvalidConfigError(f"cannot read the config file {path}: {exc}") from None
