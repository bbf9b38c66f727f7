# The README's two commands, and what they need. Everything installs into .venv
# from this repository's pyproject.toml; a second run installs only what changed.
PYTHON ?= python3
VENV ?= .venv
# What `install` installs: host,dev here; the Dockerfile passes host or agent.
EXTRAS ?= host,dev
BIN := $(VENV)/bin
STAMP := $(VENV)/.nnsweep-installed

.PHONY: install quickstart test test-fast lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[$(EXTRAS)]'
	@touch $(STAMP)

# The main job on the embedded defaults: local Ray, sqlite MLflow, built-in digits model.
quickstart: install
	$(BIN)/nnsweep run sweeps/quickstart.yaml

# Every test, including the slow, integration and Ray ones (this is what CI runs).
test: install
	$(BIN)/ruff check nnsweep tests benchmarks
	$(BIN)/python -m pytest

# The fast unit tests only, for the edit-test loop.
test-fast: install
	$(BIN)/python -m pytest -m "not slow and not integration and not ray"

lint: install
	$(BIN)/ruff check nnsweep tests benchmarks
	$(BIN)/ruff format --check nnsweep tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .nnsweep mlflow.db mlartifacts .pytest_cache .mypy_cache .ruff_cache
