# The README's two commands, and what they need. Everything installs into .venv
# from this repository's pyproject.toml; a second run installs only what changed.
PYTHON ?= python3
VENV ?= .venv
# What `install` installs: host,litert,dev here (litert: ~0.9 GB); the Dockerfile passes host or agent.
EXTRAS ?= host,litert,dev
BIN := $(VENV)/bin
STAMP := $(VENV)/.nnsweep-installed

# Debian packages the tests need: Chromium for the browser tests of the report and
# the MLflow UI; Arm NN (CpuRef backend, TFLite parser, PyArmNN in /usr/bin/python3)
# for the armnn runtime; PostgreSQL for the team-mode test (a database the test starts).
# Only missing ones are installed (needs root or sudo).
APT_PACKAGES ?= chromium g++ python3-pyarmnn libarmnn-cpuref-backend22 libarmnntfliteparser22 postgresql
SUDO := $(shell test "$$(id -u)" = 0 || echo sudo)

.PHONY: install system-deps quickstart test test-fast lint clean arm-sim arm-sim-build arm-sim-stop

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -e '.[$(EXTRAS)]'
	@touch $(STAMP)

system-deps:
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# The main job on the embedded defaults: local Ray, sqlite MLflow, built-in digits model.
quickstart: install
	$(BIN)/nnsweep run sweeps/quickstart.yaml

# An emulated aarch64 board (Debian arm64 under qemu-user, docs/how-to/emulated-board.md), cached in
# /var/cache/nnsweep-arm-sim: `make arm-sim` builds it once (with every runtime: 49 min
# measured on a busy 2-core machine, mostly pip unpacking torch's aarch64 CUDA wheels
# under emulation; NNSWEEP_ARM_SIM_AGENT=lite: 5 min) and joins the head at ARM_SIM_HEAD
# as device arm64-sim; `make arm-sim-stop`.
ARM_SIM_HEAD ?= 127.0.0.1:6379
ARM_SIM := $(SUDO) env NNSWEEP_TOKEN_FILE=$(HOME)/.ray/auth_token NNSWEEP_ARM_SIM_AGENT=$(NNSWEEP_ARM_SIM_AGENT) \
	bash device_agents/arm_sim.sh
arm-sim:
	$(ARM_SIM) start $(ARM_SIM_HEAD)
arm-sim-stop:
	$(ARM_SIM) stop
# `make test` builds or reuses the board for the `emulation` tests wherever it can (root
# on x86_64 Linux), with the lite agent (no PyTorch or ExecuTorch: minutes on a new
# machine, see benchmarks/results/arm_sim.md); a board built with every runtime is reused as it is.
# NNSWEEP_ARM_SIM_TESTS=0 leaves the board out (its tests then skip, saying why).
NNSWEEP_ARM_SIM_TESTS ?= 1
export NNSWEEP_ARM_SIM_TESTS
arm-sim-build:
	@if [ "$(NNSWEEP_ARM_SIM_TESTS)" != 1 ]; then \
		echo "arm-sim-build: skipped (NNSWEEP_ARM_SIM_TESTS=$(NNSWEEP_ARM_SIM_TESTS))"; \
	elif [ "$$(id -u)" != 0 ] || [ "$$(uname -m)" != x86_64 ]; then \
		echo "arm-sim-build: skipped (needs root on x86_64 Linux; the emulation tests skip too)"; \
	else NNSWEEP_ARM_SIM_AGENT=$${NNSWEEP_ARM_SIM_AGENT:-lite} bash device_agents/arm_sim.sh build; fi

# Every test, including the slow, integration, Ray and emulation ones (this is what CI runs).
# The self-contained tests run in TEST_WORKERS processes at once (pytest-xdist); the ones that
# start Ray, servers, whole sweeps or the board run after them one at a time, as on a user's
# machine: nothing else runs beside a cluster's join or a sweep's measurements.
TEST_WORKERS ?= 2
ONE_AT_A_TIME := integration or ray or emulation
# A skip of a test whose real parts the machine must have (tests/conftest.py MUST_RUN) fails it.
test: install system-deps arm-sim-build
	$(BIN)/ruff check nnsweep dashboards tests benchmarks
	NNSWEEP_STRICT_SKIPS=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not ($(ONE_AT_A_TIME))" --durations=20
	NNSWEEP_STRICT_SKIPS=1 $(BIN)/python -m pytest -m "$(ONE_AT_A_TIME)" --durations=30

# The fast unit tests only, for the edit-test loop.
test-fast: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m "not slow and not ($(ONE_AT_A_TIME))"

lint: install
	$(BIN)/ruff check nnsweep dashboards tests benchmarks
	$(BIN)/ruff format --check nnsweep dashboards tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .nnsweep mlflow.db mlartifacts reports .pytest_cache .mypy_cache .ruff_cache
