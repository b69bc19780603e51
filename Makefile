# csg: set-up, tests, the embedded demo. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: help install demo test clean

help:
	@echo "make install  create $(VENV) and install csg with pinned versions (constraints.txt)"
	@echo "make demo     cSGHMC on the embedded MNIST subset with the MLP (CPU, about a minute)"
	@echo "make test     run the test suite (installs first if needed)"
	@echo "make clean    remove run directories (runs/, multirun/) and caches"

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	@touch $(STAMP)

DEMO_DIR := runs/demo/$(shell date +%Y-%m-%d_%H-%M-%S)

demo: $(STAMP)
	$(BIN)/python train.py hydra.run.dir=$(DEMO_DIR)
	$(BIN)/python scripts/run_table.py $(DEMO_DIR) results/demo.md

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf runs multirun outputs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
