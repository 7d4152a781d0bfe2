# The two commands: `make run` starts the mini control plane, `make test` runs the
# tests. Each creates .venv and installs the project into it when needed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

EXTRAS := mysql,postgresql,otel,test
CONSTRAINTS := constraints.txt

.PHONY: run test lint bench soak clean constraints

# The versions in constraints.txt are the ones the tests last passed on: a release
# upstream changes nothing here until `make constraints` takes it in.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "pcisim needs Python >= 3.11, $(PYTHON) is " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade -c $(CONSTRAINTS) pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	touch $(STAMP)

# The whole control plane in one process on the embedded defaults (SQLite under
# ./state, the in-process transport); ARGS="--nodes 4" and the like pass through.
run: $(STAMP)
	$(BIN)/pcisim up $(ARGS)

# One pytest worker per core (PYTEST_WORKERS=0: none, the tests in this process):
# each worker has databases, queues and a conductor of its own.
PYTEST_WORKERS ?= auto

test: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

# Benchmarks print ratios against references measured in the same run; QUICK=1 for seconds.
bench: $(STAMP)
	$(BIN)/python -m bench $(if $(QUICK),--quick)

# The PCI state machine for many examples (SOAK_SECONDS=600), then the figures of what it did.
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(SOAK_SECONDS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Resolve the newest releases in a scratch virtualenv and write them to constraints.txt;
# then `make test`, and commit the file if it passes.
constraints:
	rm -rf .venv-latest
	$(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade pip
	.venv-latest/bin/python -m pip install --quiet -e '.[$(EXTRAS)]'
	{ sed -n '/^#/p' $(CONSTRAINTS); .venv-latest/bin/python -m pip freeze --all --exclude-editable; } > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf .venv-latest

clean:
	rm -rf $(VENV) .venv-latest bench/.nova-venv state build .pytest_cache .hypothesis .ruff_cache *.egg-info bench/results.json
	find . -name __pycache__ -type d -not -path "./.git/*" -prune -exec rm -rf {} +
