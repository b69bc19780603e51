"""cSG-MCMC Tables 1-3 and ICSGLD Table 1 as sweeps of train.py: :data:`TABLES`.

Each table is a :class:`~studies.experiments.sweeps.TableSpec`: its presets, the Hydra multiruns that produce
its runs, how a run maps to a row label of the paper's table, its metrics (the columns) and the comparisons the
paper makes. :mod:`studies.experiments.table_report` writes a table from the runs under a directory;
:mod:`studies.experiments.added` records a user's method run beside the paper's (``--add``).
"""

from __future__ import annotations

import pandas as pd

from studies.experiments.comparisons import Claim
from studies.experiments.sweeps import Metric, TableSpec, Tuning

SCALES = ("full", "smoke")

LABELS = {"sgd": "SGD", "sgdm": "SGDM", "snapshot_sgd": "Snapshot-SGD", "snapshot_sgdm": "Snapshot-SGDM",
          "sgld": "SGLD", "csgld": "cSGLD", "sghmc": "SGHMC", "csghmc": "cSGHMC",
          "sgld_constant": "SGLD (constant step)", "sghmc_constant": "SGHMC (constant step)"}

# Which baseline each row is: the step-size schedule of each sampler preset (configs/sampler/<name>.yaml's
# `schedule`, which tests/studies/test_baselines.py checks), in the words of a table's "step size" column.
SCHEDULES = {"sgd": "decreasing", "sgdm": "decreasing", "snapshot_sgd": "cyclical", "snapshot_sgdm": "cyclical",
             "sgld": "decreasing", "csgld": "cyclical", "sghmc": "decreasing", "csghmc": "cyclical",
             "sgld_constant": "constant", "sghmc_constant": "constant", "cycswag": "cyclical", "msgd": "cyclical",
             "resghmc": "step", "icsghmc": "step"}
STEP_WORDS = {"decreasing": "decreasing", "constant": "constant", "cyclical": "cyclical", "step": "step decay"}
STEP_NOTES = {
    "decreasing": "decreasing: a (b + k)^-0.55 from lr0 down to 0.01, no noise in the first 75 % of the epochs "
                  "(the paper's SGLD and SGHMC baselines, and SGD, SGDM)",
    "constant": "constant: half the recipe's lr0 (the cosine cycle's mean step) for the whole run, the decreasing "
                "baseline's stages and samples otherwise (ours, not the paper's: `sampler=sgld_constant`, "
                "`sghmc_constant`)",
    "cyclical": "cyclical: cosine cycles from lr0 (eq. 1), restarted each cycle",
    "step decay": "step decay: lr0, x 0.2 at 50 % and 75 % of the run",
}


def _step_of(names: dict[str, str]):
    """A row label -> the words of its step size, for rows labelled ``names[sampler]`` ('-': not a preset's)."""
    by_label = {label: STEP_WORDS[SCHEDULES[name]] for name, label in names.items() if name in SCHEDULES}
    return lambda label: by_label.get(label, "-")

POINTS = ("half a percentage point, 5 of the smoke scale's 1000 test images (50 of CIFAR's 10000): below the binomial "
          "standard error of one method's value on 1000 images (about 0.7 points at 5 % error)")
PER_IMAGE = "0.01 nats per test image, 5 % of a smoke-scale NLL of 0.2"
ERROR = Metric("test_error_pct", "test error %", lambda r: r["metrics.ensemble.test_error_pct"], margin=0.5,
               margin_note=POINTS)
NLL = Metric("test_nll", "NLL", lambda r: r["metrics.ensemble.nll"], digits=4, margin=0.01, margin_note=PER_IMAGE)
TOP1 = Metric("top1_pct", "top-1 %", lambda r: 100.0 - r["metrics.ensemble.test_error_pct"], digits=3,
              lower_is_better=False, margin=0.5, margin_note=POINTS)
TOP5 = Metric("top5_pct", "top-5 %", lambda r: 100.0 - r["metrics.ensemble.top5_error_pct"], digits=3,
              lower_is_better=False, margin=0.5, margin_note=POINTS)


def _table2_label(run: pd.Series, budget: int) -> str:
    schedule = "Cyclical" if run["metrics.schedule"] == "cyclical" else "Decreasing"
    chains, epochs = int(run["metrics.chains"]), int(run["metrics.epochs"])
    kind = "Parallel" if chains > 1 else "Single"
    sampler = "SGHMC" if str(run["sampler.update_rule"]) == "sghmc" else "SGLD"
    return f"{schedule}+{kind} {sampler} ({_cost(epochs, chains, budget)})"


def _cost(epochs: int, chains: int, budget: int) -> str:
    """The paper's cost column at full scale ("#epochs per chain / #epochs in all chains", 200 epochs)."""
    per_chain = round(200 * epochs / budget)
    return f"{per_chain}/{per_chain * chains}"


ICSGLD_LABELS = {"csghmc": "cycSGHMC T4", "cycswag": "cycSWAG T4", "msgd": "M-SGD P4", "resghmc": "reSGHMC P4",
                 "icsghmc": "ICSGHMC P4"}
ACCURACY = Metric("test_acc_pct", "accuracy %", lambda r: 100.0 - r["metrics.ensemble.test_error_pct"],
                  lower_is_better=False, margin=0.5, margin_note=POINTS)
NLL_SUM = Metric("test_nll_sum", "NLL (sum)", lambda r: r["metrics.ensemble.nll"] * r["metrics.num_test"], digits=0,
                 margin=0.01, margin_note=PER_IMAGE + ", times the number of test images", per_example=True)
BRIER_OOD = Metric("brier_pct", "Brier on OOD %", lambda r: 100.0 * r["metrics.ood.ensemble.brier_ood"], digits=3,
                   paper_dataset="svhn_ood", margin=0.1,
                   margin_note="0.1 points, the size of the paper's standard errors of this column (0.04-0.15)")


AGREEMENT = Metric("agreement", "agreement", lambda r: r["metrics.reference.test.agreement"], digits=4,
                   lower_is_better=False, margin=0.005,
                   margin_note="0.005: 50 of the 10,000 test images, a fifth of the agreement that separates Izmailov "
                               "et al.'s SGHMC (0.9198) from their SGHMC-CLR (0.9267)")
TV = Metric("total_variation", "total variation", lambda r: r["metrics.reference.test.total_variation"], digits=4,
            margin=0.005, margin_note="0.005: half the total variation that separates Izmailov et al.'s SGHMC "
                                      "(0.109) from their SGHMC-CLR (0.099)")
ECE = Metric("ece", "ECE", lambda r: r["metrics.ensemble.ece"], digits=4, margin=0.005,
             margin_note="half a percentage point of calibration error")
BENCHMARK_LABELS = {"csghmc": "cSGHMC", "csgld": "cSGLD", "sghmc_constant": "SGHMC (constant step)",
                    "sgld_constant": "SGLD (constant step)", "snapshot_sgdm": "cSGHMC, noise off (Snapshot-SGDM)"}
# the benchmark's 4-chain rows, each chain a quarter of the budget: equal gradients in all
BENCHMARK_X4 = {"csghmc_x4": ("sampler=csghmc", "sampler.chains=4", "sampler.cycles=1",
                              "trainer.epochs={quarter_epochs}"),
                "ensemble_x4": ("sampler=snapshot_sgdm", "sampler.chains=4", "sampler.cycles=1",
                                "sampler.samples_per_cycle=1", "trainer.epochs={quarter_epochs}")}
# Izmailov et al. (2021)'s names of the methods they scored against their HMC (csg/resources/paper_tables.csv)
BENCHMARK_PAPER = {"cSGHMC": "SGHMC-CLR", "SGHMC (constant step)": "SGHMC", "SGLD (constant step)": "SGLD",
                   "Deep ensemble (4)": "Deep ensemble"}


def _benchmark_label(run: pd.Series, budget: int) -> str:
    """A run's row: its sampler, and for 4 chains the parallel cSGHMC or (noise off, one cycle) the deep ensemble."""
    name, chains = str(run["sampler.name"]), int(run["metrics.chains"])
    if chains > 1:
        return f"Deep ensemble ({chains})" if name == "snapshot_sgdm" else f"{BENCHMARK_LABELS[name]} x{chains}"
    return BENCHMARK_LABELS[name]


def _table2_step(label: str) -> str:
    return {"Cyclical": "cyclical", "Decreasing": "decreasing"}.get(label.split("+", 1)[0], "-")


def _icsgld_step(label: str) -> str:
    return _step_of(ICSGLD_LABELS)(label.split(" / ")[0])


def _icsgld_label(run: pd.Series, budget: int) -> str:
    return f"{ICSGLD_LABELS[run['sampler.name']]} / {run['model.name']}"


def _table2_paper_method(label: str) -> tuple[str, str]:
    """("Cyclical+Parallel SGLD", "total 200/800"): the paper's rows differ in the cost of their note."""
    method, cost = label.rsplit(" (", 1)
    return method, f"total {cost.rstrip(')')}"


TABLES: dict[str, TableSpec] = {
    "table1": TableSpec(
        name="table1",
        title="cSG-MCMC Table 1: test error (%) of ResNet-18 on CIFAR-10 and CIFAR-100",
        presets={"full": "table1", "smoke": "table1_smoke"},
        data={"full": "cifar10,cifar100", "smoke": "mnist5k"},
        paper_data=("cifar10", "cifar100"),
        seeds={"full": "0,1,2", "smoke": "0,1,2"},
        sweeps=(("sampler=sgd,sgdm,snapshot_sgd,snapshot_sgdm,sgld,csgld,sghmc,csghmc,sgld_constant,sghmc_constant",
                 "data={data}", "seed={seeds}"),),
        label=lambda run, budget: LABELS[run["sampler.name"]],
        metrics=(ERROR, NLL),
        add_sweep=0,
        claims=tuple(Claim(method, baseline, ("test_error_pct", "test_nll")) for method, baseline in (
            ("cSGLD", "SGLD"), ("cSGHMC", "SGHMC"), ("cSGLD", "Snapshot-SGD"), ("cSGHMC", "Snapshot-SGDM"),
            ("cSGLD", "SGLD (constant step)"), ("cSGHMC", "SGHMC (constant step)"))),
        claims_text="The paper's claims (Section 5.2, Table 1): cSG-MCMC \"significantly outperforms Snapshot ensembles "
                    "and the traditional SG-MCMC\": cSGLD against SGLD and Snapshot-SGD, cSGHMC against SGHMC and "
                    "Snapshot-SGDM, in test error (the paper's column) and NLL (ours). The paper's SGLD and SGHMC "
                    "are decreasing-step baselines; ours add cSGLD and cSGHMC against constant-step SGLD and SGHMC "
                    "(not the paper's), in the same family.",
        step=_step_of(LABELS),
    ),
    "table2": TableSpec(
        name="table2",
        title="cSG-MCMC Table 2: test error (%) of 4 parallel chains against one, cyclical against decreasing",
        presets={"full": "table2", "smoke": "table2_smoke"},
        data={"full": "cifar10,cifar100", "smoke": "mnist5k"},
        paper_data=("cifar10", "cifar100"),
        seeds={"full": "0,1,2", "smoke": "0"},
        sweeps=(
            ("sampler=csgld,csghmc,sgld,sghmc", "sampler.chains=4", "data={data}", "seed={seeds}"),
            ("sampler=sgld,sghmc", "sampler.chains=4", "trainer.epochs={half_epochs}", "data={data}", "seed={seeds}"),
            ("sampler=csgld,csghmc", "sampler.chains=1", "data={data}", "seed={seeds}"),
        ),
        label=_table2_label,
        metrics=(ERROR, NLL),
        claims=tuple(Claim(method.format(s), baseline.format(s), ("test_error_pct", "test_nll"))
                     for method, baseline in (("Cyclical+Parallel {} (200/800)", "Decreasing+Parallel {} (200/800)"),
                                              ("Cyclical+Single {} (200/200)", "Decreasing+Parallel {} (100/400)"))
                     for s in ("SGLD", "SGHMC")),
        claims_text="The paper's claims (Section 5.2, Table 2): with 4 chains of the same length, the cyclical "
                    "schedule gives lower errors than the decreasing one; one cyclical chain beats 4 decreasing "
                    "chains of half its length (half the cost). Here in test error (the paper's column) and NLL (ours).",
        paper_method=_table2_paper_method,
        step=_table2_step,
        note="Cost: epochs per chain / epochs in all chains, in the paper's 200-epoch units at every scale.",
    ),
    "table3": TableSpec(
        name="table3",
        title="cSG-MCMC Table 3: ResNet-50 on ImageNet, NLL, top-1 and top-5 accuracy",
        presets={"full": "table3", "smoke": "table3_smoke"},
        data={"full": "imagenet", "smoke": "mnist5k"},
        paper_data=("imagenet",),
        seeds={"full": "0", "smoke": "0"},
        sweeps=(
            ("sampler=sgdm", "data={data}", "seed={seeds}"),
            ("sampler=sghmc", "sampler.samples_per_cycle=9", "data={data}", "seed={seeds}"),  # as many as cSGHMC
            ("sampler=snapshot_sgdm,csghmc", "sampler.cycles=3", "sampler.samples_per_cycle=3", "data={data}",
             "seed={seeds}"),
        ),
        label=lambda run, budget: LABELS[run["sampler.name"]],
        metrics=(NLL, TOP1, TOP5),
        add_sweep=2,  # an added method runs as cSGHMC does: 3 cycles of 3 samples
        claims=tuple(Claim("cSGHMC", baseline, ("test_nll",)) for baseline in ("SGHMC", "Snapshot-SGDM", "SGDM")),
        claims_text="The paper's claim (Section 5.2, Table 3): \"cSGHMC yields the lowest testing NLL\": cSGHMC against "
                    "SGHMC, Snapshot-SGDM and SGDM in NLL.",
        step=_step_of(LABELS),
    ),
    "posterior_benchmark_cifar10": TableSpec(
        name="posterior_benchmark_cifar10",
        title="The posterior benchmark at full scale: ResNet-20-FRN on CIFAR-10 against Izmailov et al. (2021)'s HMC",
        presets={"full": "posterior_benchmark_cifar10"},
        data={"full": "cifar10"},
        paper_data=("cifar10",),
        seeds={"full": "0,1,2,3,4"},
        sweeps=(*((f"sampler={name}", f"sampler.lr0={{{name}}}", "data={data}", "seed={seeds}")
                  for name in ("csghmc", "csgld", "sghmc_constant", "sgld_constant")),
                # the noise-off control, paired: cSGHMC's cycles at cSGHMC's tuned step
                ("sampler=snapshot_sgdm", "sampler.lr0={csghmc}", "data={data}", "seed={seeds}"),
                (*BENCHMARK_X4["csghmc_x4"], "sampler.lr0={csghmc_x4}", "data={data}", "seed={seeds}"),
                (*BENCHMARK_X4["ensemble_x4"], "sampler.lr0={ensemble_x4}", "data={data}", "seed={seeds}")),
        # each method's step picked on 5,000 held-out training images before any run of the table (issue 73)
        tuning=Tuning(methods={**{name: (f"sampler={name}",) for name in ("csghmc", "csgld", "sghmc_constant",
                                                                            "sgld_constant")},
                               **BENCHMARK_X4}, factors=(0.125, 0.25, 0.5, 1.0, 2.0), seeds="100,101", holdout=0.1),
        label=_benchmark_label,
        metrics=(AGREEMENT, TV, ERROR, NLL, ECE),
        claims=tuple(Claim("cSGHMC", baseline, ("agreement", "total_variation"))
                     for baseline in ("cSGLD", "SGHMC (constant step)", "SGLD (constant step)",
                                      "cSGHMC, noise off (Snapshot-SGDM)", "cSGHMC x4", "Deep ensemble (4)")),
        claims_text="The benchmark's question (issue 56): is cSGHMC's predictive closer to the posterior's than "
                    "each contender's at the same gradient budget? cSGHMC against every other row in top-1 "
                    "agreement and total variation with the HMC predictive (error, NLL and ECE are described, not "
                    "judged: lower is not closer to the posterior).",
        paper_method=lambda label: (BENCHMARK_PAPER.get(label, label), None),
        note="Every row spends the same gradients: one chain of the preset's epochs, or 4 chains of a quarter of "
             "them (cSGHMC x4: one cycle each; the deep ensemble: 4 SGD-momentum models at the recipe's momentum "
             "0.1 (v <- 0.1 v - lr g), one cosine decay each, the noise off). The samplers run the cSG-MCMC "
             "paper's CIFAR recipe (beta 0.8, 4 cycles of 3 samples; T = 1, no augmentation) at the step the "
             "tuning stage below picked for each (the noise-off control at cSGHMC's); the recipe's own lr0 0.5 is "
             "about 2 to 17 x Izmailov et al.'s steps. The paper's column is not like-for-like, for reading the scale only: it "
             "is Izmailov et al.'s method of that name (the table of their Section 9.1, ICML 2021, transcribed "
             "from an image of that table), whose SG-MCMC baselines trained on 40,960 of the 50,000 images, for "
             "50 to 250 x our epochs (their SGLD: 5 chains of 10,000 epochs; their deep ensemble: 50 models of 500 "
             "epochs, weight decay 10); their SGHMC-CLR, shown beside our cSGHMC, is SGHMC with a cyclical step "
             "that keeps its noise on throughout and keeps one sample a cycle, not the cSG-MCMC recipe. Their HMC "
             "chains' own agreement with the reference, 94.01 % (total variation 0.074), gives the scale of HMC's "
             "Monte Carlo error; it is not a floor for our rows, whose member counts differ (a smaller ensemble "
             "has the larger total variation).",
        full_scale="Izmailov et al.'s posterior (ResNet-20-FRN, CIFAR-10 without augmentation, T = 1; the prior as "
                   "the preset says) at the cSG-MCMC paper's budget of 200 epochs, not Izmailov et al.'s budgets.",
        gpus_per_run=1,
        paper="izmailov-icml2021",
        paper_model="resnet20_frn",
        processes={},
        step=lambda label: ("one cosine decay" if label.startswith("Deep ensemble") else "cyclical"
                            if label.startswith("cSG") else _step_of(BENCHMARK_LABELS)(label)),
    ),
    "icsgld_table1": TableSpec(
        name="icsgld_table1",
        title="ICSGLD Table 1: CIFAR-100 accuracy, NLL and Brier score out of distribution (SVHN)",
        presets={"full": "icsgld_table1", "smoke": "icsgld_table1_smoke"},
        data={"full": "cifar100", "smoke": "mnist5k"},
        paper_data=("cifar100",),
        seeds={"full": "0,1,2,3,4", "smoke": "0"},
        values={"full": {"models": "resnet20,resnet32,resnet56,wrn16_8", "resnets": "resnet20,resnet32,resnet56",
                         "wrn": "wrn16_8", "per_cycle": 5, "p4_samples": 100},
                "smoke": {"models": "mlp", "resnets": "mlp", "wrn": "", "per_cycle": 2, "p4_samples": 8}},
        sweeps=(
            ("sampler=csghmc", "sampler.cycles=10", "sampler.explore=0.85", "sampler.hold_sampling_lr=true",
             "sampler.samples_per_cycle={per_cycle}", "trainer.epochs={quad_epochs}", "model={models}", "data={data}",
             "seed={seeds}"),
            ("sampler=cycswag", "sampler.cycles=10", "sampler.samples_per_cycle={per_cycle}",
             "trainer.epochs={quad_epochs}", "model={models}", "data={data}", "seed={seeds}"),
            ("sampler=msgd", "model={models}", "data={data}", "seed={seeds}"),
            ("sampler=resghmc,icsghmc", "sampler.samples_per_cycle={p4_samples}", "model={resnets}", "data={data}",
             "seed={seeds}"),
            # WRN-16-8: the paper's correction 1000 and partition width 60 (per example: 0.02 and 0.0012)
            ("sampler=resghmc", "sampler.replica.correction=0.02", "sampler.samples_per_cycle={p4_samples}",
             "model={wrn}", "data={data}", "seed={seeds}"),
            ("sampler=icsghmc", "sampler.contour.width=0.0012", "sampler.samples_per_cycle={p4_samples}",
             "model={wrn}", "data={data}", "seed={seeds}"),
        ),
        label=_icsgld_label,
        metrics=(ACCURACY, NLL_SUM, BRIER_OOD),
        claims=tuple(Claim(f"ICSGHMC P4 / {model}", f"{baseline} / {model}", ("test_acc_pct", "test_nll_sum", "brier_pct"))
                     for model in ("mlp", "resnet20", "resnet32", "resnet56", "wrn16_8")
                     for baseline in ("cycSGHMC T4", "cycSWAG T4", "M-SGD P4", "reSGHMC P4")),
        claims_text="The paper's claim (Section 5.4, Table 1): ICSGHMC P4 \"consistently performs remarkable in both "
                    "ACC and NLL and performs comparable to M-SGD P4 in Brier scores\": ICSGHMC P4 against each of "
                    "cycSGHMC T4, cycSWAG T4, M-SGD P4 and reSGHMC P4 per model, in accuracy, NLL and Brier on OOD.",
        paper_method=lambda label: (label.split(" / ")[0], None),
        note="P4: 4 chains of the preset's epochs (interacting ones run as 4 processes); T4: one chain of 4 x the "
             "epochs. NLL is summed over the test set, as in the paper (10000 CIFAR images; 1000 digits at smoke "
             "scale). Brier on OOD: mean over OOD inputs of (1/C) sum_c p_c^2 (the authors' script). At smoke "
             "scale the paper's column is its ResNet-20 row. Step size: cycSGHMC and cycSWAG hold the step of their "
             "sampling stage's start to the cycle's end; M-SGD runs one cosine cycle per chain.",
        paper="icsgld-iclr2022",
        paper_model="resnet20",
        processes={3: 4, 4: 4, 5: 4},
        step=_icsgld_step,
    ),
}
