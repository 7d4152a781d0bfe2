# The two commands: `make run` starts the mini control plane, `make test` runs the
# tests. Each creates .venv and installs the project into it when needed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test lint bench clean

$(STAMP): setup.cfg pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "pcisim needs Python >= 3.11, $(PYTHON) is " + sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[mysql,postgresql,test]'
	touch $(STAMP)

# Until the all-in-one control plane lands, `make run` migrates the embedded SQLite
# database and starts the conductor alone on the in-process transport.
run: $(STAMP)
	@echo "make run: the all-in-one control plane is not built yet; starting the conductor"
	@echo "alone on the embedded defaults (SQLite under ./state, kombu+memory://// transport)."
	$(BIN)/pcisim-manage $(ARGS) db sync
	$(BIN)/pcisim-conductor $(ARGS)

test: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

# Benchmarks print ratios against references measured in the same run; QUICK=1 for seconds.
bench: $(STAMP)
	$(BIN)/python -m bench $(if $(QUICK),--quick)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) state .pytest_cache
