# trainbench: `make quickstart` runs the CPU quickstart and prints its table; `make test` runs
# lint, types and every test. Both set up what they need first (a venv in .venv and, as root,
# Open MPI from Debian when mpirun is missing).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: quickstart test lint unit integration system-deps clean

system-deps:
	@if ! command -v mpirun >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) or run make as root" >&2; exit 2; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null; \
	fi
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || { echo "chromium not found (report.html screenshot tests): apt-get install chromium, or run make as root" >&2; exit 2; }

$(STAMP): setup.cfg pyproject.toml constraints.txt | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[torch,plots,dev]'
	touch $(STAMP)

quickstart: $(STAMP)
	$(PY) -m toolkit.submit --grid examples/quickstart.yaml
	$(PY) -m toolkit.collect results/quickstart

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy toolkit topology parsers benchmarks

unit: $(STAMP)
	$(VENV)/bin/pytest -q tests/unit

integration: $(STAMP) system-deps
	$(VENV)/bin/pytest -q tests/integration

test: lint $(STAMP)
	$(VENV)/bin/pytest -q tests

clean:
	rm -rf $(VENV) results
