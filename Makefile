# Two set-up commands for a fresh machine: `make run` and `make test`. Both create .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
CONTRIB := $(wildcard plugins_contrib/*/pyproject.toml)

.PHONY: run test install bench parity lint clean

$(STAMP): pyproject.toml $(CONTRIB)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,cuda]'
	for p in $(dir $(CONTRIB)); do $(PIP) install -q "./$$p" || exit 1; done
	touch $(STAMP)

install: $(STAMP)

# Runs a real model (magika) through the providers chosen by examples/providers.toml and prints
# what ran where.
run: $(STAMP)
	$(VENV)/bin/ep-core run --zoo magika --config examples/providers.toml --show-assignment

test: $(STAMP)
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -n 2 --dist loadgroup -q

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

parity: $(STAMP)
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m ep_core.tools.parity.regenerate docs/parity

lint: $(STAMP)
	$(VENV)/bin/ruff check ep_core ep_cpu_reference ep_cuda_numba plugins_contrib tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
