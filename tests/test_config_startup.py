"""`kafkalite serve` start-up against real processes: misspelt keys warned about, bad values and security
settings refused with one line naming key and rule, and start-up failures that say what is wrong."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from tests.support.brokers import BrokerProcess, free_port

# The settings of Kafka 3.9's config/kraft/server.properties (its comments left out).
KAFKA_KRAFT_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def serve(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
    """Run `kafkalite serve` that is expected to refuse to start; a broker that starts anyway is killed at
    the timeout and reported with return code None."""
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli.main", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, None, out, err)


def overrides(**props: object) -> list[str]:
    out = []
    for k, v in props.items():
        out += ["--override", f"{k.replace('_', '.')}={v}"]
    return out


def assert_refused(r: subprocess.CompletedProcess, *expected: str) -> None:
    """Exit code 1, one line on stdout naming the problem, no traceback, no shutdown of what never ran."""
    text = r.stdout + r.stderr
    assert r.returncode == 1, text
    lines = r.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafkalite serve: "), text
    for e in expected:
        assert e in lines[0], text
    assert "Traceback" not in text and "clean-shutdown marker" not in text and "shut down" not in text, text


@pytest.mark.slow
def test_misspelt_keys_are_warned_about_with_the_nearest_name(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"listners": "PLAINTEXT://127.0.0.1:1", "log.retention.hourz": 5,
                                          "num.network.threads": 3}).start()
    try:
        out = b.output()
    finally:
        assert b.stop() == 0
    assert "WARNING" in out and "'listners'" in out and "did you mean listeners?" in out, out
    assert "'log.retention.hourz'" in out and "did you mean log.retention.hours?" in out, out
    assert "num.network.threads is accepted but has no effect" in out, out


@pytest.mark.slow
@pytest.mark.parametrize("key,value,rule", [
    ("socket.request.max.bytes", "-5", "Value must be at least 1"),
    ("node.id", "-1", "Value must be at least 0"),
    ("listeners", "PLAINTEXT://127.0.0.1:70000", "port 70000"),
    ("num.partitions", "zero", "Expected value to be a number"),
    ("log.segment.bytes", "10", "Value must be between 14 and"),
])
def test_bad_values_are_refused_naming_key_value_and_rule(tmp_path, key, value, rule):
    r = serve(*overrides(listeners=f"PLAINTEXT://127.0.0.1:{free_port()}"), "--override", f"log.dirs={tmp_path}",
              "--override", f"{key}={value}", timeout_s=20)
    assert_refused(r, f"Invalid value {value} for configuration {key}", rule)


@pytest.mark.slow
def test_the_same_dir_twice_in_log_dirs_is_refused(tmp_path):
    d = tmp_path / "data"
    r = serve("--override", f"log.dirs={d},{tmp_path}/./data/", "--override",
              f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", timeout_s=20)
    assert_refused(r, "log.dirs", str(d), "same directory")
    assert "another process" not in r.stdout


@pytest.mark.slow
def test_a_data_dir_that_is_a_file_is_named(tmp_path):
    f = tmp_path / "data"
    f.write_text("not a dir")
    for target in (f, f / "sub"):
        r = serve("--override", f"log.dirs={target}", "--override",
                  f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", timeout_s=20)
        assert_refused(r, str(target), "not a directory")
        assert "port" not in r.stdout


@pytest.mark.slow
def test_a_port_in_use_is_named_and_no_data_dir_is_touched(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = serve("--override", f"log.dirs={tmp_path / 'd'}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                  timeout_s=20)
    assert_refused(r, f"127.0.0.1:{port}", "already in use")
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_a_locked_data_dir_says_so(tmp_path):
    b = BrokerProcess(tmp_path / "data").start()
    try:
        r = serve("--override", f"log.dirs={b.data_dir}", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                  timeout_s=20)
    finally:
        assert b.stop() == 0
    assert_refused(r, str(b.data_dir), "is held by pid")


@pytest.mark.slow
def test_a_properties_file_with_escapes_and_continuations_is_read_as_java_does(tmp_path):
    port = free_port()
    data = tmp_path / "dätä dir"
    props = tmp_path / "server.properties"
    # `\u00e4` is ä; a backslash at the end continues the line; `\:` is an escaped colon in a value.
    props.write_text("# comment\n"
                     f"listeners = PLAINTEXT://127.0.0.1\\:{port}\n"
                     f"log.dirs={tmp_path}/d\\u00e4t\\u00e4 \\\n"
                     "    dir\n"
                     "num.partitions\\\n"
                     "  =3\n")
    b = BrokerProcess(tmp_path / "unused", port=port)
    b.args = [sys.executable, "-m", "kafkalite.cli.main", "serve", "--config", str(props)]
    b.start()
    try:
        assert "WARNING" not in b.output(), b.output()
    finally:
        assert b.stop() == 0
    assert (data / "meta.properties").exists()


@pytest.mark.slow
def test_serve_help_shows_listeners_data_dir_config_and_overrides():
    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "serve", "--help"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0
    for text in ("--config", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", "log.dirs=/", "examples:",
                 "server.properties", "SASL_SSL"):
        assert text in r.stdout, r.stdout


@pytest.mark.slow
def test_every_override_in_the_serve_help_is_a_setting_the_broker_takes():
    """The help's examples must stay true: each example's --override settings pass the broker's validation
    (the help once said TLS and SASL settings were refused, long after they worked)."""
    from kafkalite.broker.config import BrokerConfig

    r = subprocess.run([sys.executable, "-m", "kafkalite.cli.main", "serve", "--help"], capture_output=True,
                       text=True, timeout=30)
    examples = r.stdout.split("examples:", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    commands = [line for line in examples.splitlines() if line.strip().startswith("kafkalite serve")]
    assert len(commands) >= 5, examples
    for command in commands:
        props = dict(kv.split("=", 1) for kv in re.findall(r"--override (\S+)", command))
        BrokerConfig.load(None, props)  # raises InvalidConfigError naming the key otherwise


@pytest.mark.slow
def test_stock_kafka_server_properties_starts_with_warnings(tmp_path):
    """Kafka's own KRaft server.properties (trimmed of comments) runs, the KRaft-only keys warned about."""
    port, cport = free_port(), free_port()
    props = tmp_path / "server.properties"
    props.write_text(KAFKA_KRAFT_PROPERTIES.replace("9092", str(port)).replace("9093", str(cport))
                     .replace("://:", "://127.0.0.1:").replace("/tmp/kraft-combined-logs", str(tmp_path / "logs")))
    b = BrokerProcess(tmp_path / "unused", port=port)
    b.args = [sys.executable, "-m", "kafkalite.cli.main", "serve", "--config", str(props)]
    b.start()
    try:
        out = b.output()
    finally:
        assert b.stop() == 0
    assert "process.roles is accepted but has no effect" in out, out
    assert "Unknown configuration" not in out, out
