"""The broker backends without Spark: option parsing, read_committed filtering, and the behaviour a
Spark task relies on against a real `kafkalite serve` (leader routing, restarts, data loss mid-read)."""

from __future__ import annotations

import string

import pytest

pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'kafkalite[spark]'")
pa = pytest.importorskip("pyarrow")
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.client import KafkaClient, parse_bootstrap_servers
from kafkalite.protocol import ApiKey
from kafkalite.records import ControlRecordType, SimpleRecord, build_batch, build_end_txn_marker
from kafkalite.records.compression import CompressionType
from kafkalite.spark.arrow_decode import RawChunk, decode_chunk
from kafkalite.spark.arrow_encode import build_batches
from kafkalite.spark.broker_records import drop_aborted
from kafkalite.spark.broker_settings import BrokerSettings
from kafkalite.spark.errors import BrokerError, DataLossError, OptionError, UnknownTopicError
from kafkalite.spark.reading import OffsetRange, read_range
from kafkalite.spark.specs import BrokerSpec
from tests.support import T0
from tests.support.brokers import BrokerProcess, free_port, running_broker

# --- parsing -------------------------------------------------------------------------------------------

hostnames = st.text(string.ascii_lowercase + string.digits + "-.", min_size=1, max_size=20).filter(
    lambda h: h[0] not in "-." and ":" not in h)
ipv6 = st.ip_addresses(v=6).map(str)
ports = st.integers(1, 65535)


@given(st.lists(st.tuples(st.one_of(hostnames, ipv6), ports, st.booleans(), st.sampled_from(["", " ", "  "])),
                min_size=1, max_size=4))
def test_bootstrap_lists_parse_back(entries):
    text = ",".join(f"{pad}{'PLAINTEXT://' if prefixed else ''}{f'[{h}]' if ':' in h else h}:{p}{pad}"
                    for h, p, prefixed, pad in entries)
    assert parse_bootstrap_servers(text) == [(h, p) for h, p, _, _ in entries]


@pytest.mark.parametrize("bad", ["", " , ", "host", "host:", ":9092", "host:0", "host:65536", "host:port"])
def test_bad_bootstrap_lists_are_option_errors(bad):
    with pytest.raises(ValueError):
        parse_bootstrap_servers(bad)
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        BrokerSpec(bad)


names = st.sampled_from(["request.timeout.ms", "socket.connection.setup.timeout.ms", "default.api.timeout.ms",
                         "retry.backoff.ms", "max.partition.fetch.bytes", "fetch.max.bytes", "max.request.size"])


@given(names, st.one_of(st.integers(-10, (1 << 31) + 10).map(str), st.text(max_size=6)))
def test_numeric_settings_are_checked(name, raw):
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    minimum = 0 if name in ("default.api.timeout.ms", "retry.backoff.ms") else 1
    if value is not None and minimum <= value < 1 << 31:
        settings = BrokerSettings.parse("h:1", {name: raw})
        assert value in (settings.request_timeout_ms, settings.connect_timeout_ms, settings.api_timeout_ms,
                         settings.retry_backoff_ms, settings.max_partition_fetch_bytes, settings.fetch_max_bytes,
                         settings.max_request_size)
    else:
        with pytest.raises(OptionError, match=f"kafka.{name} must be an integer"):
            BrokerSettings.parse("h:1", {name: raw})


def test_settings_words_and_defaults():
    default = BrokerSettings.parse("h:1", {})
    assert (default.isolation_level, default.acks, default.fetch_bytes) == (0, -1, 4 << 20)
    assert BrokerSettings.parse("h:1", {"isolation.level": " READ_COMMITTED"}).isolation_level == 1
    assert [BrokerSettings.parse("h:1", {"acks": a}).acks for a in ("all", "-1", "1", "0")] == [-1, -1, 1, 0]
    assert BrokerSettings.parse("h:1", {"fetch.max.bytes": "1000"}).fetch_bytes == 1000
    with pytest.raises(OptionError, match=r"kafka\.acks"):
        BrokerSettings.parse("h:1", {"acks": "2"})
    with pytest.raises(OptionError, match="SASL_TLS is not supported"):
        BrokerSettings.parse("h:1", {"security.protocol": "SASL_TLS"})
    with pytest.raises(OptionError, match=r"sasl\.mechanism=GSSAPI is not supported"):  # Kafka's default mechanism
        BrokerSettings.parse("h:1", {"security.protocol": "SASL_SSL"})
    assert BrokerSettings.parse("h:1", {"security.protocol": "plaintext", "linger.ms": "5"}) == default


# --- read_committed: aborted transactions dropped as Kafka's consumer drops them ----------------------

steps = st.lists(st.tuples(st.sampled_from([-1, 1, 2, 3]), st.sampled_from(["data", "commit", "abort"]),
                           st.integers(1, 3)), max_size=30)


def _log(events: list[tuple[int, str, int]]) -> tuple[bytes, list[dict], set[int], list[int]]:
    """Batches for the steps, the broker's aborted-transaction list, the offsets read_committed keeps,
    and the base offset of each batch. Transactions still open at the end are aborted."""
    out = bytearray()
    offset = 0
    open_txn: dict[int, tuple[int, list[int]]] = {}  # pid -> (first offset, its data offsets)
    aborted: list[dict] = []
    kept: set[int] = set()
    bases = []

    def end(pid: int, kind: ControlRecordType) -> None:
        nonlocal offset
        first, offsets = open_txn.pop(pid)
        bases.append(offset)
        out.extend(build_end_txn_marker(kind, pid, 0, timestamp=T0, base_offset=offset))
        if kind == ControlRecordType.ABORT:
            aborted.append({"producer_id": pid, "first_offset": first, "last_offset": offset})
        else:
            kept.update(offsets)
        offset += 1

    for pid, action, n in events:
        if action == "data" or pid < 0:
            recs = [SimpleRecord(None, b"%d" % (offset + i), T0) for i in range(n)]
            bases.append(offset)
            out.extend(build_batch(recs, base_offset=offset, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                                   base_sequence=0 if pid >= 0 else -1, is_transactional=pid >= 0))
            if pid < 0:
                kept.update(range(offset, offset + n))
            else:
                open_txn.setdefault(pid, (offset, []))[1].extend(range(offset, offset + n))
            offset += n
        elif pid in open_txn:
            end(pid, ControlRecordType.COMMIT if action == "commit" else ControlRecordType.ABORT)
    for pid in sorted(open_txn):
        end(pid, ControlRecordType.ABORT)
    return bytes(out), aborted, kept, bases


@given(steps, st.data())
def test_drop_aborted_keeps_exactly_the_committed_records(events, data):
    log, aborted, kept, bases = _log(events)
    if not bases:
        return
    # a fetch may start at any batch; the broker lists the aborted transactions that end at or after it
    first = data.draw(st.integers(0, len(bases) - 1))
    start = bases[first]
    chunk = log[sum(len(b) for b in _split(log)[:first]):]
    listed = [{"producer_id": a["producer_id"], "first_offset": a["first_offset"]} for a in aborted
              if a["last_offset"] >= start]
    rb = decode_chunk(RawChunk(drop_aborted(chunk, listed), "test"), "t", 0, start, 1 << 40, False)
    got = [] if rb is None else rb.column("offset").to_pylist()
    assert got == sorted(o for o in kept if o >= start)


def _split(log: bytes) -> list[bytes]:
    from kafkalite.records import iter_batches

    return [bytes(b.buffer) for b in iter_batches(log)]


def test_drop_aborted_returns_the_same_buffer_when_nothing_is_dropped():
    data = bytes(build_batch([SimpleRecord(None, b"x", T0)]))
    assert drop_aborted(data, []) is data
    assert drop_aborted(data, [{"producer_id": 5, "first_offset": 0}]) is data  # not transactional


# --- against a real broker ------------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, partitions: int, batches: int, per: int = 5) -> None:
    with KafkaClient(bootstrap) as c:
        c.create_topic(topic, partitions)
        for p in range(partitions):
            for b in range(batches):
                c.produce(topic, p, bytes(build_batch([SimpleRecord(b"k", b"%d-%d" % (b, i), T0 + b)
                                                       for i in range(per)])))


def test_leaders_are_found_through_metadata_not_the_bootstrap_address(tmp_path):
    port = free_port()
    # the broker listens on 127.0.0.1 but tells clients to use "localhost"; the query names a dead
    # address first, then 127.0.0.1
    broker = BrokerProcess(tmp_path / "data", {"advertised.listeners": f"PLAINTEXT://localhost:{port}"},
                           port=port).start()
    try:
        _produce(broker.bootstrap, "t", 2, 4)
        spec = BrokerSpec(f"127.0.0.1:{free_port()}, {broker.bootstrap}")
        src = spec.open_source()
        try:
            assert src.list_topics() == {"t": [0, 1]}
            assert src.offset_bounds([("t", 1)])[("t", 1)].latest == 20
            assert src.cluster.any_broker().host == "127.0.0.1"
            assert {c.host for c in src.cluster.client.connections().values()} == {"localhost"}
            with pytest.raises(UnknownTopicError, match="partition t-2 does not exist"):
                src.offset_bounds([("t", 2)])
            with pytest.raises(UnknownTopicError, match="topic nope does not exist"):
                src.earliest_offset(("nope", 0))
        finally:
            src.close()
        offsets = [o for rb in read_range(OffsetRange(spec, "t", 0, 3, 17, False, True))
                   for o in rb.column("offset").to_pylist()]
        assert offsets == list(range(3, 17))
    finally:
        assert broker.stop() == 0, broker.output()


def test_source_and_sink_carry_on_across_a_broker_restart(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _produce(broker.bootstrap, "t", 1, 3)
        spec = BrokerSpec(broker.bootstrap, (("retry.backoff.ms", "20"),))
        src = spec.open_source()
        sink = spec.open_sink()
        assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 15
        assert sink.partition_count("t") == 1
        broker.stop()
        broker = BrokerProcess(broker.data_dir, port=broker.port).start()
        stage = sink.open_stage("job")
        for batch, n in build_batches(None, pa.array([b"a", b"b", b"c"]), None, T0, CompressionType.GZIP, 1 << 16):
            stage.add(("t", 0), batch, n)
        assert stage.finish({"t": 1}).records == 3
        assert src.offset_bounds([("t", 0)])[("t", 0)].latest == 18  # reconnected, and the write landed
        assert sink.create_topic("t", 4) == 1  # created meanwhile by someone else: its partition count wins
        src.close()
        sink.close()
    finally:
        assert broker.stop() == 0, broker.output()


def test_unreachable_cluster_fails_fast_naming_the_address():
    nowhere = f"127.0.0.1:{free_port()}"
    with pytest.raises(BrokerError, match=f"kafka.bootstrap.servers={nowhere}"):
        BrokerSpec(nowhere).open_source()
    sink = BrokerSpec(nowhere).open_sink()
    sink.abort("job", [None])  # the driver's abort and commit need no connection
    with pytest.raises(BrokerError, match="check the address"):
        sink.partition_count("t")


def test_log_start_moving_during_a_read_is_data_loss(tmp_path):
    with running_broker(tmp_path / "data") as b:
        _produce(b.bootstrap, "a", 1, 20)  # 100 records in batches of 5
        _produce(b.bootstrap, "b", 1, 20)
        spec = BrokerSpec(b.bootstrap, (("max.partition.fetch.bytes", "1"),))  # one batch per fetch

        def read(topic: str, fail: bool, new_start: int) -> list[int]:
            got: list[int] = []
            for rb in read_range(OffsetRange(spec, topic, 0, 0, 100, False, fail)):
                got += rb.column("offset").to_pylist()
                if len(got) == 5:  # retention strikes while the task is reading
                    with KafkaClient(b.bootstrap) as c:
                        resp = c.request(ApiKey.DELETE_RECORDS, {"topics": [{"name": topic, "partitions": [
                            {"partition_index": 0, "offset": new_start}]}], "timeout_ms": 5000})
                        assert resp["topics"][0]["partitions"][0]["error_code"] == 0
            return got

        with pytest.raises(DataLossError, match=r"offsets 1\d to 59 of a-0 are gone"):
            read("a", True, 60)
        got = read("b", False, 60)
        assert got[:5] == list(range(5)) and got[-40:] == list(range(60, 100))
        assert got == sorted(set(got)) and len(got) < 100
