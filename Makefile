# trainbench: `make quickstart` runs the CPU quickstart and prints its table; `make test` runs
# lint, types and every test; `make check` lint, types and tests/unit only, the quick loop while
# changing the code. They set up what they need first (a venv in .venv and, as root, Open MPI
# from Debian when mpirun is missing). `make test` builds the three venvs side by side, then runs
# tests/unit and tests/integration in one run on two workers: the cluster tests on one, the
# rest beside them (INTEGRATION_WORKERS=0: tests/unit on every core, then tests/integration
# one test at a time).
SHELL := /bin/bash
# The venvs take about 11 GB; pip's cache of the wheels it downloads (OneFlow and its CUDA 11
# libraries alone are 2 GB) would add to that on a machine that installs them once.
export PIP_NO_CACHE_DIR := 1
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: quickstart test check lint unit integration docs system-deps clean oneflow-env litgpt-env

system-deps:
	@if ! command -v mpirun >/dev/null; then \
	  if [ "$$(id -u)" != 0 ]; then echo "mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin libopenmpi-dev) or run make as root" >&2; exit 2; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev >/dev/null && apt-get clean; \
	fi
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null && apt-get clean; } || { echo "chromium not found (report.html screenshot tests): apt-get install chromium, or run make as root" >&2; exit 2; }

$(STAMP): setup.cfg pyproject.toml constraints.txt | system-deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[torch,plots,dev]'
	touch $(STAMP)

# OneFlow 0.9.0 has wheels for CPython 3.10 only: a second venv, found per case by
# toolkit/executors/python_env.py. PYTHON310 is a CPython 3.10 (found on PATH, else pyenv's).
# flowvision 0.2.2 is an sdist whose setup.py imports pkg_resources, which the newest setuptools
# (what an isolated build gets) no longer has: it is built first, against the venv's own
# setuptools < 81 (keep its version equal to setup.cfg's pin). About 1 min and 4.3 GB.
ONEFLOW_VENV := .venv-oneflow
# Its third-party packages (the 4 GB) install while .venv builds; the project itself only after
# .venv's editable install has ended: each editable install writes trainbench.egg-info in this
# folder, and two at once could read each other's half-written files. The packages are read
# from setup.cfg (install_requires and the oneflow extra), so they are named once.
ONEFLOW_DEPS := $(ONEFLOW_VENV)/.dependencies
ONEFLOW_STAMP := $(ONEFLOW_VENV)/.installed
PYTHON310 ?= $(shell for p in python3.10 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.10*/bin/python3.10 2>/dev/null | sort -V | tail -n 1); do \
  "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null && { echo "$$p"; break; }; done)

$(ONEFLOW_DEPS): setup.cfg pyproject.toml | system-deps
	@if [ -z "$(PYTHON310)" ]; then echo "OneFlow 0.9.0 needs CPython 3.10 and none was found (not on PATH, not in pyenv): install it (pyenv install 3.10) or set PYTHON310=/path/to/python3.10" >&2; exit 2; fi
	$(PYTHON310) -m venv $(ONEFLOW_VENV)
	$(ONEFLOW_VENV)/bin/python -m pip install -q --upgrade pip 'setuptools>=64,<81' wheel
	$(ONEFLOW_VENV)/bin/python -m pip install -q --no-build-isolation flowvision==0.2.2
	$(ONEFLOW_VENV)/bin/python -c 'import configparser; c = configparser.ConfigParser(); c.read("setup.cfg"); print(c["options"]["install_requires"], c["options.extras_require"]["oneflow"])' > $(ONEFLOW_VENV)/requirements.txt
	$(ONEFLOW_VENV)/bin/python -m pip install -q -r $(ONEFLOW_VENV)/requirements.txt
	touch $(ONEFLOW_DEPS)

$(ONEFLOW_STAMP): $(ONEFLOW_DEPS) $(STAMP)
	$(ONEFLOW_VENV)/bin/python -m pip install -q -e '.[oneflow]'
	touch $(ONEFLOW_STAMP)

oneflow-env: $(ONEFLOW_STAMP)

# litgpt 0.5.13 from PyPI: the real third-party training program that
# tests/integration/test_command_thirdparty.py runs, unmodified, as a `model: command` case. Its
# huggingface-hub<1.4 conflicts with the main venv's (transformers 5 needs 2.x), so it has a venv
# of its own: litgpt and its dependencies at the versions pinned in
# tests/envs/litgpt-requirements.txt (installed as listed, without resolving), and the main venv's
# torch lent to it by links (tests/envs/share_torch.py) rather than installed twice.
# About 20 s and 210 MB.
LITGPT_VENV := .venv-litgpt
LITGPT_STAMP := $(LITGPT_VENV)/.installed

$(LITGPT_STAMP): tests/envs/litgpt-requirements.txt tests/envs/share_torch.py $(STAMP)
	rm -rf $(LITGPT_VENV)
	$(PY) -m venv $(LITGPT_VENV)
	$(LITGPT_VENV)/bin/python -m pip install -q --no-deps -r tests/envs/litgpt-requirements.txt
	$(PY) tests/envs/share_torch.py $(LITGPT_VENV)
	touch $(LITGPT_STAMP)

litgpt-env: $(LITGPT_STAMP)

quickstart: $(STAMP)
	$(PY) -m toolkit.submit --grid examples/quickstart.yaml
	$(PY) -m toolkit.collect results/quickstart

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy toolkit topology parsers benchmarks

# The documentation site (docs/, mkdocs.yml) into site/; the tests build it strictly too
# (tests/unit/architecture/test_docs_site.py): a broken link fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# tests/unit on every core, a file to a worker (its module fixtures built once); the unit tests
# share no fixed path or port (the PostgreSQL store tests start a server per worker, on a free
# port). tests/integration runs on two xdist workers: every module that uses a local Slurm
# cluster is one work unit (tests/integration/conftest.py), so one worker runs the clusters one
# at a time (many of those tests wait on Slurm) while the other runs the modules that train
# with mpirun here. INTEGRATION_WORKERS=0 runs them one test at a time, in file order.
INTEGRATION_WORKERS ?= 2
UNIT_PYTEST := $(VENV)/bin/pytest -q --numprocesses=logical --dist loadfile
INTEGRATION_PYTEST := $(VENV)/bin/pytest -q $(if $(filter-out 0,$(INTEGRATION_WORKERS)),--numprocesses=$(INTEGRATION_WORKERS) --dist loadgroup)

unit: $(STAMP)
	$(UNIT_PYTEST) tests/unit

check: lint unit

integration: $(STAMP) $(ONEFLOW_STAMP) $(LITGPT_STAMP) system-deps
	$(INTEGRATION_PYTEST) tests/integration

# The venvs build side by side (OneFlow's packages while .venv's download, lint while the other
# two finish); --output-sync keeps each one's output together. One pytest runs the unit and the
# integration tests (tests/integration/conftest.py's scheduler): the worker that does not run
# the cluster tests takes the other integration modules, then the unit tests, so they cost no
# time of their own; one run shows every failure and ends with the slowest tests.
test:
	$(MAKE) --no-print-directory --jobs=4 --output-sync=target lint $(STAMP) $(ONEFLOW_STAMP) $(LITGPT_STAMP)
ifeq ($(INTEGRATION_WORKERS),0)
	status=0; \
	$(UNIT_PYTEST) --durations=15 tests/unit || status=$$?; \
	$(INTEGRATION_PYTEST) --durations=30 tests/integration || status=$$?; \
	exit $$status
else
	$(VENV)/bin/pytest -q --numprocesses=$(INTEGRATION_WORKERS) --dist loadgroup --durations=40 \
	  tests/unit tests/integration
endif

clean:
	rm -rf $(VENV) $(ONEFLOW_VENV) $(LITGPT_VENV) results site
