"""SASL login benchmarks: SCRAM-SHA-256 logins per second.

`sasl`: logins against a real broker process (`kafkalite serve`, one asyncio loop: one core), each a new TCP
connection doing SaslHandshake + two SaslAuthenticate round trips, from client threads in this process (the
client's PBKDF2 runs in hashlib without the GIL). `sasl-server`: the broker's own CPU per login, the
authenticator (security/sasl.py over scramp) timed alone, with the client's work outside the clock. The target
is 200 logins per second on one core; the ratio is to that target.
"""

from __future__ import annotations

import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

from bench.common import scratch_dir
from kafkalite.security.sasl import SaslClientExchange, SaslServerAuthenticator
from kafkalite.security.scram import credential_for
from kafkalite.security.transport import ClientSecurity, connect
from tests.support.brokers import BrokerProcess, free_port

SECONDS = float(os.environ.get("BENCH_SASL_SECONDS", "3"))
TARGET = 200.0
MECH = "SCRAM-SHA-256"


def bench_sasl_server(results: dict) -> None:
    cred = credential_for(MECH, "bench-secret")
    server_s = 0.0
    n = 0
    t_end = time.perf_counter() + SECONDS
    while time.perf_counter() < t_end:
        client = SaslClientExchange(MECH, "bench", "bench-secret")
        first = client.first()
        t0 = time.perf_counter()
        auth = SaslServerAuthenticator([MECH], {}, lambda u, m: cred)
        auth.handshake(1, MECH)
        out = auth.authenticate(1, first)
        server_s += time.perf_counter() - t0
        final = client.step(out.body["auth_bytes"])
        assert final is not None
        t0 = time.perf_counter()
        out = auth.authenticate(1, final)
        server_s += time.perf_counter() - t0
        assert auth.authenticated
        client.step(out.body["auth_bytes"])
        n += 1
    rate = n / server_s
    results["sasl-server: SCRAM-SHA-256 login, broker CPU only (4096 iterations)"] = (
        f"{rate:,.0f} logins/s", f"{rate / TARGET:.1f}x the target", ">= 200/s")


def bench_sasl(results: dict) -> None:
    d = scratch_dir()
    port, admin_port = free_port(), free_port()
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret";')
    broker = BrokerProcess(d / "data", {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{admin_port}",
        "security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": f"PLAIN,{MECH}", "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas},
        port=port).start()
    try:
        from kafkalite.cli.main import main as cli

        cli(["configs", "--bootstrap-server", f"127.0.0.1:{admin_port}", "--alter", "--entity-type", "users",
             "--entity-name", "bench", "--add-config", f"{MECH}=[iterations=4096,password=bench-secret]"])
        security = ClientSecurity("SASL_PLAINTEXT", None, MECH, "bench", "bench-secret")

        def worker(deadline: float) -> int:
            n = 0
            while time.perf_counter() < deadline:
                connect("127.0.0.1", port, security, 10).close()
                n += 1
            return n
        connect("127.0.0.1", port, security, 10).close()  # warm up
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            counts = list(pool.map(worker, [t0 + SECONDS] * 4))
        rate = sum(counts) / (time.perf_counter() - t0)
        results["sasl: SCRAM-SHA-256 logins to a broker (new connection each)"] = (
            f"{rate:,.0f} logins/s", f"{rate / TARGET:.1f}x the target", ">= 200/s")
    finally:
        broker.stop()
        shutil.rmtree(d, ignore_errors=True)


ALL = {"sasl": bench_sasl, "sasl-server": bench_sasl_server}
