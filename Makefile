# Two entry points for a fresh machine: `make demo` and `make test`.
# Each creates (or refreshes, when pyproject.toml changed) the virtualenv in .venv.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/kafkalite demo

test: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/python -m pytest -q

bench: $(STAMP)
	$(VENV)/bin/python -m bench

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench

clean:
	rm -rf $(VENV) kafkalite-data
