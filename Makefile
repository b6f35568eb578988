# tpucared: `make demo` runs the daemon against the built-in emulator; `make test` runs the checks;
# `make image` builds the container image with podman (deploy/image.sh; IMAGE=name:tag to rename).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
IMAGE ?= localhost/tpucared:latest

.PHONY: demo test lint typecheck pytest bench bench-quick image clean

# The emulator is its own distribution (emulator/): one pip call installs both from this clone.
$(STAMP): pyproject.toml emulator/pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./emulator -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tpucared demo $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

bench-quick: $(STAMP)
	$(BIN)/python -m bench.run --quick

image:
	bash deploy/image.sh $(IMAGE)

clean:
	rm -rf $(VENV) build dist *.egg-info emulator/build emulator/*.egg-info .mypy_cache .ruff_cache .pytest_cache
