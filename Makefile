# Two set-up commands for a fresh machine: `make run` and `make test`. Both create .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
CONTRIB := $(wildcard plugins_contrib/*/pyproject.toml)
# The Numba-CUDA EP is its own distribution (ep_cuda_numba/pyproject.toml), installed editable.
CUDA_EP := ep_cuda_numba/pyproject.toml

.PHONY: run test install bench parity lint clean

$(STAMP): pyproject.toml $(CUDA_EP) $(CONTRIB)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,ray]'
	$(PIP) install -q -e ./ep_cuda_numba
	for p in $(dir $(CONTRIB)); do $(PIP) install -q "./$$p" || exit 1; done
	touch $(STAMP)

install: $(STAMP)

# Runs a real model (magika, a file-type classifier) on files of this repository through the
# providers of examples/providers.toml: what it said per file, what ran where, the session time.
# The first run compiles and caches an EPContext model (~/.cache/ep-core/ctx); later runs load it.
RUN_FILES := README.md Makefile pyproject.toml .gitignore .ci/run ep_core/__init__.py \
	ep_core/tools/parity/report.schema.json docs/parity/numba_cpu.html examples/providers.toml
run: $(STAMP)
	@$(VENV)/bin/ep-core run --zoo magika --config examples/providers.toml $(addprefix --input bytes=,$(RUN_FILES))

test: $(STAMP)
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -n 2 --dist loadgroup -q

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do $(PY) $$b || exit 1; done

parity: $(STAMP)
	NUMBA_ENABLE_CUDASIM=1 $(PY) -m ep_core.tools.parity.regenerate docs/parity

# Every check runs even when an earlier one fails; the target fails if any did. Import contracts
# read the EP distributions from their source (PYTHONPATH), not from their installs.
LINT_DIRS := ep_core ep_cpu_reference ep_cuda_numba plugins_contrib tests benchmarks .ci
lint: $(STAMP)
	@failed=""; \
	PYTHONPATH=plugins_contrib/ep_numba_cpu:ep_cuda_numba $(VENV)/bin/lint-imports --no-cache --no-logo || failed="$$failed lint-imports"; \
	$(VENV)/bin/ruff check $(LINT_DIRS) || failed="$$failed ruff-check"; \
	$(VENV)/bin/ruff format --check $(LINT_DIRS) || failed="$$failed ruff-format"; \
	$(PY) .ci/count_lines.py || failed="$$failed line-count"; \
	$(VENV)/bin/mypy || failed="$$failed mypy"; \
	if [ -n "$$failed" ]; then echo "make lint failed:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) build *.egg-info

# The heavy security suites (tests/security): every onnx node-test model mutated, more zoo
# mutations, three seeds, and the 2.004 GiB external-data model (writes 2 GiB to a temp folder).
.PHONY: security
security: $(STAMP)
	EP_CORE_SECURITY_FULL=1 EP_CORE_SECURITY_HEAVY=1 NUMBA_ENABLE_CUDASIM=1 $(PY) -m pytest -q -s -p no:cacheprovider tests/security
