# The README's commands. Everything installs into .venv with pip; nothing is downloaded at run time.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
export OMP_NUM_THREADS ?= 2

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.installed  ## run 3 flywheel rounds of the built-in tiny CPU config
	$(BIN)/flywheel run --config configs/tiny-cpu.toml --run-id demo-$$(date +%Y%m%d-%H%M%S)

test: $(VENV)/.installed  ## run the test suite
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed
	$(BIN)/ruff check flywheel tests bench

bench: $(VENV)/.installed
	$(BIN)/python bench/round_overhead.py

clean:
	rm -rf $(VENV) flywheel-data
