# jobtap: `make demo` runs the whole thing on one machine; `make test` runs the test suite.
# `make test` also type-checks the SDK (mypy --strict, settings in pyproject.toml).
# Both set up what they need first (system packages on Debian, .venv with jobtap).
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test demo lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml deploy/setup-dev.sh
	sh deploy/setup-dev.sh
	touch $@

# Tests run side by side (pytest-xdist, each with its own redis-server on a free
# port); most of their time is spent waiting on processes, so 4 share 2 cores.
# The tests of the one real Slurm form one group and run on one worker in turn.
PYTEST_WORKERS ?= 4

test: setup
	$(BIN)/ruff check collector workers sdk cli acl sim integrations psij-descriptors snakemake_executor_plugin_jobtap_slurm tests bench
	$(BIN)/mypy
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

demo: setup
	$(BIN)/jobtap demo

lint: setup
	$(BIN)/ruff check collector workers sdk cli acl sim integrations psij-descriptors snakemake_executor_plugin_jobtap_slurm tests bench
	$(BIN)/ruff format --check collector workers sdk cli acl sim integrations psij-descriptors snakemake_executor_plugin_jobtap_slurm tests bench
	$(BIN)/mypy

bench: setup
	$(BIN)/python -m bench.cycle --jobs 100000
	$(BIN)/python -m bench.apply

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
