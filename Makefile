# csg: set-up, tests, the embedded demo. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: help install demo test clean table4 cyclical-mcmc bench-synthetic

help:
	@echo "make install  create $(VENV) and install csg with pinned versions (constraints.txt)"
	@echo "make demo     cSGHMC on the embedded MNIST subset with the MLP (CPU, about a minute)"
	@echo "make test     run the test suite (installs first if needed)"
	@echo "make table4   cSG-MCMC Table 4, Figures 2 and 5 (25 Gaussians; CPU, under a minute)"
	@echo "make cyclical-mcmc   Wang et al. 2024 Figures 1 and 2, and cSGLD on the same targets (CPU, a few minutes)"
	@echo "make bench-synthetic speed of the synthetic studies"
	@echo "make clean    remove run directories (runs/, multirun/) and caches"

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test]"
	@touch $(STAMP)

NOW := $(shell date +%Y-%m-%d_%H-%M-%S)
DEMO_DIR := runs/demo/$(NOW)

demo: $(STAMP)
	$(BIN)/python train.py hydra.run.dir=$(DEMO_DIR)
	$(BIN)/python scripts/run_table.py $(DEMO_DIR) results/demo.md

table4: $(STAMP)
	$(BIN)/python train.py synthetic=table4 synthetic.output_dir=results/csgmcmc hydra.run.dir=runs/table4/$(NOW)

cyclical-mcmc: $(STAMP)
	$(BIN)/python train.py synthetic=wang_mixture1d synthetic.output_dir=results/on_cyclical_mcmc hydra.run.dir=runs/wang_mixture1d/$(NOW)
	$(BIN)/python train.py synthetic=wang_mog25 synthetic.output_dir=results/on_cyclical_mcmc hydra.run.dir=runs/wang_mog25/$(NOW)

bench-synthetic: $(STAMP)
	$(BIN)/python scripts/bench_synthetic.py

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf runs multirun outputs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
