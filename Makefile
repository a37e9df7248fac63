# The two set-up commands: `make run` and `make test`. Each creates .venv if missing and installs into it.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# On a machine without an NVIDIA driver, take the CPU build of torch that lies on these machines first:
# a bare `torch` requirement would otherwise pull a multi-GB CUDA build.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
TORCH_CPU ?= torch==2.13.0

.PHONY: run test lint clean

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
	$(VENV)/bin/wavealign sweep

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) wavealign-runs .pytest_cache
