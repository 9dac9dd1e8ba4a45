# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates (or refreshes, when pyproject.toml changed) the virtualenv in .venv: `make demo` with the
# `spark` extra (Spark itself needs Java 17+, which `kafkalite demo` checks first), `make test` with the
# dev tools, which include the extra.
PYTHON ?= python3
VENV ?= .venv
SPARK_STAMP := $(VENV)/.installed-spark
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: demo test test-fast bench lint clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip

$(SPARK_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e '.[spark]'
	touch $(SPARK_STAMP)

$(DEV_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	touch $(DEV_STAMP) $(SPARK_STAMP)

demo: $(SPARK_STAMP)
	$(VENV)/bin/kafkalite demo

test: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest -q

# The inner loop for contributors: no Spark, no real-client matrix, no multi-process fault tests (< 1 min).
test-fast: $(DEV_STAMP)
	$(VENV)/bin/python -m pytest -q -m "not spark and not clients and not slow and not cluster"

bench: $(DEV_STAMP)
	$(VENV)/bin/python -m bench

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) kafkalite-data
