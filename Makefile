# seer-rl: `make run` and `make test` set themselves up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# STAMP: what `make run` needs (CPU torch, the package and matplotlib for the run's PNGs);
# DEV_STAMP: what `make test` adds (test tools and every other extra: `seer serve`'s ASGI
# stack, the SGLang client, transformers, reasoning-gym, Ray, SGLang's router, wandb,
# TensorBoard) and SGLang's wheel for the schema tests
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# The CPU build of torch lies on this machine's disk; a plain `torch` would pull a CUDA build.
TORCH := torch==2.13.0
# pyproject.toml's extras: `make run` draws its report's PNGs; `make test` covers every extra
RUN_EXTRAS := plot
TEST_EXTRAS := dev,serve,sglang,hf,tasks,ray,router,wandb,tensorboard

# SGLang's wheel, without dependencies: the tests judge `seer serve` (and the SGLang backend)
# with its own /generate schema (sglang/api/v1/api_types.py). A cache, never committed.
SGLANG_VERSION := 0.5.23
SGLANG_WHEEL_DIR := .cache/sglang-wheel
# the wheel itself is the stamp: present = downloaded (pip writes it whole or not at all)
SGLANG_STAMP := $(SGLANG_WHEEL_DIR)/sglang-$(SGLANG_VERSION)-cp311-cp311-manylinux_2_34_x86_64.whl

# pip byte-compiles what it installs one file at a time; compiling afterwards on every core
# is the same work in about half the wall time (set-up is a large part of `make run` on a
# fresh clone). compileall exits 1 on torch's few Python-3.12-only test files, which pip
# skips silently too: its status is ignored, the import of anything we use is not.
COMPILE := $(BIN)/python -m compileall -q -j 0 $(VENV)/lib > /dev/null || true

.PHONY: setup test lint run bench clean

setup: $(DEV_STAMP) $(SGLANG_STAMP)

$(SGLANG_STAMP): | $(STAMP)
	mkdir -p $(SGLANG_WHEEL_DIR)
	$(BIN)/pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
		--python-version 3.11 --platform manylinux_2_34_x86_64 \
		sglang==$(SGLANG_VERSION) -d $(SGLANG_WHEEL_DIR) \
		|| { echo "make setup: could not download SGLang $(SGLANG_VERSION)'s wheel (PyPI" \
			"unreachable?); the schema tests need it in $(SGLANG_WHEEL_DIR)" >&2; exit 1; }
	test -f $@

$(STAMP): pyproject.toml setup.py actors/drafts/_suffix_tree.cpp
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --no-compile $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -e '.[$(RUN_EXTRAS)]'
	$(COMPILE)
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -e '.[$(RUN_EXTRAS),$(TEST_EXTRAS)]'
	$(COMPILE)
	touch $(DEV_STAMP)

lint: setup
	$(BIN)/ruff check transport actors pipeline tests examples
	$(BIN)/mypy

# two workers (pytest-xdist), each module on one of them, the slowest first (tests/conftest.py);
# a test that outlives its timeout, even in a C call that a signal cannot interrupt, takes its
# worker down and is reported, not waited on
test: lint
	$(BIN)/pytest -q -n 2 --dist loadfile --timeout=300 --timeout-method=thread --durations=15

run: $(STAMP)
	$(BIN)/seer run

bench: $(STAMP)
	$(BIN)/seer bench transport --json runs/bench-transport.json

clean:
	rm -rf $(VENV) runs .cache .pytest_cache .mypy_cache .ruff_cache
