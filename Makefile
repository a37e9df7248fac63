# The two set-up commands: `make run` and `make test`. Each creates .venv if missing and installs into it.
# Then `make report` (the figures and one HTML page of the runs) and `make ui` (the MLflow UI on them).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# On a machine without an NVIDIA driver, take the CPU build of torch that lies on these machines first:
# a bare `torch` requirement would otherwise pull a multi-GB CUDA build.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_CPU ?= torch==2.13.0
RUN_ROOT ?= wavealign-runs

.PHONY: run report ui test lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
ifneq ($(HAS_GPU),1)
	$(PY) -m pip install -q $(TORCH_CPU)
endif
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/wavealign sweep run_root=$(RUN_ROOT)

report: $(STAMP)
	$(VENV)/bin/wavealign report --run-root $(RUN_ROOT)

ui: $(STAMP)
	$(VENV)/bin/mlflow ui --backend-store-uri sqlite:///$(abspath $(RUN_ROOT))/mlflow.db

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) wavealign-runs .pytest_cache
