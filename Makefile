# seer-rl: `make run` and `make test` set themselves up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The CPU build of torch lies on this machine's disk; a plain `torch` would pull a CUDA build.
TORCH := torch==2.13.0

.PHONY: setup test lint run bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py actors/drafts/_suffix_tree.cpp
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev,ray]'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check transport actors pipeline tests examples
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q --timeout=300

run: setup
	$(BIN)/seer run

bench: setup
	$(BIN)/seer bench transport --json runs/bench-transport.json

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
