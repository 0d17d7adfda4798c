# The two commands of the README: `make demo` and `make test`. Each does its own set-up.
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo up test test-unit test-all test-repeat compat docker-build docker-test docker-down constraints clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) scripts/demo.py

# The embedded cluster + a real Airflow with the example DAGs and the MeLoN UI plugin, until Ctrl-C.
up: setup
	.venv/bin/melon up

# The Python suite runs on WORKERS pytest-xdist workers (at most 2; 0 runs it in one process): the suite mostly
# waits on clusters and Airflow, so two share the 2 cores. tests/conftest.py gives each worker its own ports and keeps
# a module's tests, and all the tests on the session's Airflow, on one worker (--dist loadgroup).
WORKERS ?= 2
XDIST = -n $(WORKERS) --dist loadgroup

# JUnit tests of the ApplicationMaster (no cluster, under a minute), ruff's lint and layout and mypy's types
# (pyproject.toml) first, then the Python suite.
test: setup
	mvn -q -B -f appmaster/pom.xml test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m pytest -q -rs --durations=30 -p no:cacheprovider --timeout=900 $(XDIST) $(PYTEST_ARGS) tests \
	  --ignore=tests/docker

test-unit: setup
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# Flake measurement: the integration, e2e and fault suites N times in one go, a table of test -> passes/fails
# printed, written to tests/results/ (not committed) and summed up in one row for benchmarks/results/test-rounds.md
# to commit.
# SUITES= narrows it, LOAD=1 keeps a core busy;
# each round runs on WORKERS workers, as `make test` does.
N ?= 3
SUITES ?= tests/faults tests/e2e tests/integration
test-repeat: setup
	$(PY) scripts/test_repeat.py --rounds $(N) --suites "$(SUITES)" --workers $(WORKERS) $(if $(LOAD),--load)

# Everything: MELON_TEST_ALL=1 turns any skipped test into a failure (tests/conftest.py), so a missing chromium or
# dataset cannot pass silently (a PyTorch test never skips: `make setup` installs the [pytorch] extra).
test-all: setup
	MELON_TEST_ALL=1 $(PY) -m pytest -q -p no:cacheprovider --timeout=1800 tests --ignore=tests/docker

# Each supported Airflow minor line (newest patch): a venv .venv-compat/<line> pinned by compat/constraints-<line>.txt,
# the unit tests and a real-Airflow e2e subset on it (scripts/compat.sh; docs/compatibility.md). LINES="3.0" for one.
LINES ?= 3.0 3.1 3.2 3.3
compat: setup
	LINES="$(LINES)" bash scripts/compat.sh

# The docker/ deployment: images from a debootstrapped Debian base (podman), compose stack, tests from outside.
docker-build: setup
	@bash scripts/setup-docker.sh
	bash docker/build.sh

docker-test: setup
	@bash scripts/setup-docker.sh
	bash docker/test.sh $(PYTEST_ARGS)

docker-down:
	bash -c 'source docker/engine.sh && cd docker && "$${MELON_COMPOSE[@]}" -p melon down -v'

# Refresh the pinned Python set on purpose (commit the diff): resolves from setup.cfg in a clean venv.
constraints:
	rm -rf .venv-constraints && python3 -m venv .venv-constraints
	.venv-constraints/bin/pip install -q --upgrade pip
	.venv-constraints/bin/pip install -q '.[tensorflow,pytorch,test,pack,docs,celery]'
	{ grep '^#' constraints.txt; .venv-constraints/bin/pip freeze --exclude-editable | grep -v '^airflow-provider-melon'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf .venv-constraints

clean:
	-$(PY) -m airflow_provider_melon.cli minicluster stop
	rm -rf appmaster/target appmaster/am/target appmaster/launcher/target .melon-minicluster
