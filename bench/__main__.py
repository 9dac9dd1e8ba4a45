"""Run benchmarks: `python -m bench` (all) or `python -m bench append recovery`.

Each prints its rate and the ratio to a limit of this machine measured in the same run.
Set BENCH_MIB (data size, default 256) and BENCH_REPEATS (default 5) to trade time for noise.
"""

from __future__ import annotations

import sys

from bench import (
    broker,
    cleaner,
    cluster,
    cores,
    latency,
    log,
    manager,
    protocol,
    replication,
    sasl,
    scale,
    spark,
    storage,
)


def main(argv: list[str]) -> int:
    suites = {**storage.ALL, **log.ALL, **broker.ALL, **protocol.ALL, **cleaner.ALL, **manager.ALL, **spark.ALL,
              **cluster.ALL, **replication.ALL, **sasl.ALL, **latency.ALL, **cores.ALL, **scale.ALL}
    chosen = argv or list(suites)
    unknown = [c for c in chosen if c not in suites]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {sorted(suites)}", file=sys.stderr)
        return 2
    results: dict[str, tuple[str, str, str]] = {}
    for name in chosen:
        suites[name](results)
    width = max(len(k) for k in results)
    print(f"{'benchmark'.ljust(width)} | result | ratio to this machine's limit | target")
    for k, (rate, ratio, target) in results.items():
        print(f"{k.ljust(width)} | {rate} | {ratio} | {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
