"""kafkalite benchmarks: `python -m bench [name ...]` (or `make bench`)."""
