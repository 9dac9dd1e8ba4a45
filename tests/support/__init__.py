"""What tests share: real broker processes (`brokers`), ZooKeeper and clusters (`zookeeper`, `cluster`), batch and
log builders (`batches`, `logs`), the cleaner's and coordinator's harnesses, protocol strategies for hypothesis,
the Spark helpers, and the replication fault harness (`proxy`, `workload`, `checker`).
Nothing here is a test; pytest collects only `tests/test_*.py`."""

T0 = 1700000000000  # a fixed "now" (2023-11-14) for tests on mock clocks
