"""Paper tables 1-3 and Figures 1 and 3: sweeps, aggregation, missing runs, and the figure-3 analyses."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from studies.experiments import fig1, fig3, sweeps, table_report, tables
from tests.conftest import ROOT

NUM_TRAIN = {"mnist5k": 4000, "cifar10": 50000, "cifar100": 50000, "imagenet": 1281167}


def _run(root, name, *, sampler, data="mnist5k", seed=0, error=None, nll=0.3, top5=1.0, chains=1, epochs=80,
         schedule="cyclical", cycles=4, update_rule="sgld", extra=None):
    """A hand-made run directory: .hydra/config.yaml, and metrics.json unless ``error`` is None."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    config = {"sampler": {"name": sampler, "update_rule": update_rule, "chains": chains, "cycles": cycles},
              "data": {"name": data}, "model": {"name": "mlp"}, "seed": seed, "trainer": {"epochs": epochs},
              **(extra or {})}
    OmegaConf.save(OmegaConf.create(config), run / ".hydra" / "config.yaml")
    if error is not None:
        metrics = {"ensemble": {"test_error_pct": error, "nll": nll, "top5_error_pct": top5}, "schedule": schedule,
                   "chains": chains, "epochs": epochs, "cycles": cycles, "seed": seed}
        (run / "metrics.json").write_text(json.dumps(metrics))
    return run


def test_table1_aggregates_mean_stderr_and_lists_missing_runs(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "a", sampler="sgd", seed=0, error=10.0)
    _run(runs, "b", sampler="sgd", seed=1, error=12.0)
    _run(runs, "c", sampler="csgld", seed=0, error=7.0)
    _run(runs, "d", sampler="csghmc", seed=1)  # started, never finished
    table, missing = table_report.report("table1", runs, tmp_path / "out", "smoke", epochs=80, seeds="0,1")
    sgd = table[(table.method == "SGD") & (table.metric == "test_error_pct") & (table.paper_data == "cifar10")].iloc[0]
    assert sgd["mean"] == pytest.approx(11.0) and sgd["stderr"] == pytest.approx(1.0) and sgd.seeds == 2
    assert sgd.paper == pytest.approx(5.29) and math.isnan(sgd.difference)  # no difference across data sets
    csgld = table[(table.method == "cSGLD") & (table.metric == "test_error_pct")].iloc[0]
    assert csgld["mean"] == 7.0 and math.isnan(csgld["stderr"]) and csgld.seeds == 1
    # 10 methods (the paper's 8 and the 2 constant-step baselines) x 2 seeds expected; sgd 0, sgd 1 and csgld 0 exist
    assert len(missing) == 17 and {"sampler": "csgld", "data": "mnist5k", "seed": "1"} in missing
    assert {"sampler": "sgd", "data": "mnist5k", "seed": "0"} not in missing
    written = (tmp_path / "out" / "table1.md").read_text()
    assert "SMOKE SCALE" in written and "Missing runs (17" in written and "sampler=csghmc data=mnist5k seed=1" in written
    assert "Unfinished run directories" in written and str(runs / "d") in written
    assert pd.read_csv(tmp_path / "out" / "table1.csv").shape[0] == len(table)


def test_table1_comparisons_pair_seeds_and_give_the_shared_functions_verdicts(tmp_path):
    """cSGLD 2.5 points below SGLD on every seed: helps; cSGHMC against SGHMC, differences of either sign: inconclusive."""
    runs = tmp_path / "runs"
    noise = (0.9, -1.1, 1.3, -0.7)
    for seed, shake in enumerate(noise):
        base = 5.0 + 3.0 * seed  # seeds differ more than the methods' gap: only pairing by seed shows it
        _run(runs, f"sgld{seed}", sampler="sgld", seed=seed, error=base + 2.5, nll=0.3)
        _run(runs, f"csgld{seed}", sampler="csgld", seed=seed, error=base + 0.02 * shake, nll=0.2)
        _run(runs, f"sghmc{seed}", sampler="sghmc", seed=seed, error=base, nll=0.25, update_rule="sghmc")
        _run(runs, f"csghmc{seed}", sampler="csghmc", seed=seed, error=base + shake, nll=0.25 + 0.05 * shake,
             update_rule="sghmc")
    table_report.report("table1", runs, tmp_path / "out", "smoke", epochs=80, seeds="0,1,2,3")
    verdicts = pd.read_csv(tmp_path / "out" / "table1_comparisons.csv")
    error = verdicts[verdicts.metric == "test_error_pct"].set_index(["method", "baseline"])
    assert error.loc[("cSGLD", "SGLD"), "verdict"] == "helps" and error.loc[("cSGLD", "SGLD"), "n"] == 4
    assert error.loc[("cSGLD", "SGLD"), "difference"] == pytest.approx(-2.5 + 0.02 * np.mean(noise))
    assert error.loc[("cSGHMC", "SGHMC"), "verdict"] == "inconclusive"
    assert len(verdicts) == 4  # no Snapshot runs: those two claims have nothing to compare, in either metric
    assert (verdicts.confidence == 0.95).all()  # one Holm family of 4, simultaneous 95 % intervals
    assert error.loc[("cSGLD", "SGLD"), "high"] == 0  # compatible with Holm: a rejected interval ends at 0
    # the committed per-run CSV is enough to recompute the verdicts
    from studies.experiments.comparisons import compare

    again = compare(pd.read_csv(tmp_path / "out" / "table1_runs.csv"), tables.TABLES["table1"].claims,
                    tables.TABLES["table1"].metrics)
    assert list(again.verdict) == list(verdicts.verdict)
    text = (tmp_path / "out" / "table1.md").read_text()
    section = text[text.index("## Comparisons"):]
    assert "Holm-corrected" in section and "test error % 0.5" in section and "detectable" in section
    assert "| mnist5k | test error % | cSGLD | SGLD | 0 1 2 3 |" in section and "| helps |" in section
    assert "an ordering, not a verdict" not in section


def test_a_one_seed_table_gives_an_ordering_and_no_verdict(tmp_path):
    runs = tmp_path / "runs"
    for sampler, nll in (("sgdm", 0.25), ("sghmc", 0.32), ("snapshot_sgdm", 0.2), ("csghmc", 0.19)):
        _run(runs, sampler, sampler=sampler, error=5.0, nll=nll, cycles=3)
    table_report.report("table3", runs, tmp_path / "out", "smoke", epochs=60)
    text = (tmp_path / "out" / "table3.md").read_text()
    section = text[text.index("## Comparisons"):]
    assert "One seed: an ordering, not a verdict." in section
    assert "| mnist5k | NLL | cSGHMC | SGHMC | 0 | 0.1900 | 0.3200 | -0.1300 | cSGHMC |" in section
    assert not any(word in text for word in ("helps", "hurts", "equivalent", "inconclusive", "Holm"))


def test_full_scale_difference_is_ours_minus_the_paper(tmp_path):
    _run(tmp_path / "runs", "a", sampler="csghmc", data="cifar100", error=21.0, update_rule="sghmc")
    table, _ = table_report.report("table1", tmp_path / "runs", tmp_path / "out", "full", epochs=200, seeds="0")
    row = table[(table.metric == "test_error_pct")].iloc[0]
    assert row.paper_data == "cifar100" and row.difference == pytest.approx(21.0 - 20.5)
    assert "difference" in (tmp_path / "out" / "table1.md").read_text()


def test_table2_labels_chains_schedule_and_budget(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "a", sampler="sgld", data="cifar10", error=5.0, chains=4, epochs=100, schedule="decreasing", cycles=1)
    _run(runs, "b", sampler="csghmc", data="cifar10", error=4.0, chains=1, epochs=200, update_rule="sghmc")
    table, _ = table_report.report("table2", runs, tmp_path / "out", "full", epochs=200, seeds="0")
    errors = table[table.metric == "test_error_pct"].set_index("method")
    assert errors.loc["Decreasing+Parallel SGLD (100/400)", "paper"] == pytest.approx(5.11)
    assert errors.loc["Cyclical+Single SGHMC (200/200)", "paper"] == pytest.approx(4.27)


def test_table3_reports_nll_top1_and_top5(tmp_path):
    _run(tmp_path / "runs", "a", sampler="csghmc", data="imagenet", error=23.0, nll=0.9, top5=6.5, cycles=3)
    table, _ = table_report.report("table3", tmp_path / "runs", tmp_path / "out", "full", epochs=120)
    values = table.set_index("metric")
    assert values.loc["top1_pct", "mean"] == pytest.approx(77.0) and values.loc["top5_pct", "mean"] == pytest.approx(93.5)
    assert values.loc["test_nll", "paper"] == pytest.approx(0.8882)


def test_sweeps_expand_to_the_papers_grids():
    table2 = sweeps.expected_runs(sweeps.expand(tables.TABLES["table2"], "smoke", 160))
    assert len(table2) == 8 and {r.get("trainer.epochs") for r in table2} == {None, "80"}
    assert len(sweeps.expected_runs(sweeps.expand(tables.TABLES["table1"], "full", 200))) == 10 * 2 * 3


@pytest.mark.parametrize("spec", [*tables.TABLES.values(), fig3.SPEC], ids=lambda s: s.name)
@pytest.mark.parametrize("scale", tables.SCALES)
def test_every_run_of_every_sweep_composes_validates_and_fits_its_samples(spec, scale):
    """No training: each run's config is composed as train.py would, checked, and its samples planned."""
    from hydra import compose, initialize_config_dir

    from csg.checks.config import validate
    from csg.engine.build import build_schedule, plan_collection
    from csg.engine.settings import schedule_settings

    if scale not in spec.presets:
        pytest.skip(f"{spec.name} has no {scale} scale")
    preset = spec.presets[scale]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        epochs = compose("config", overrides=[f"experiment={preset}"]).trainer.epochs
        for run in sweeps.expected_runs(sweeps.expand(spec, scale, epochs, seeds="0")):
            cfg = compose("config", overrides=[f"experiment={preset}", *(f"{k}={v}" for k, v in run.items())])
            if cfg.evaluation.get("reference") and not (ROOT / cfg.evaluation.reference).is_file():
                cfg.evaluation.reference = None   # a reference the user makes (make reference-cifar10): not in a clone
            validate(cfg)
            batches = -(-NUM_TRAIN[cfg.data.name] // cfg.data.batch_size)
            schedule = build_schedule(schedule_settings(cfg), cfg.trainer.epochs * batches)
            points = plan_collection(schedule_settings(cfg), schedule, batches)
            assert len(points) == cfg.sampler.cycles * cfg.sampler.samples_per_cycle, run
            assert cfg.study == spec.name


# make table1 SCALE=smoke end to end through the driver (every method through Hydra multirun, the table, its
# -report variant listing a missing seed's runs): tests/launch/test_own_project.py, whose README runs it with a
# user's sampler added as an eleventh row.


def test_failed_sweep_is_a_one_line_error(tmp_path):
    command = [sys.executable, str(ROOT / "scripts" / "reproduce.py"), "table3", "--scale", "smoke",
               "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "sampler.cycles=0"]
    process = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert process.returncode != 0 and "Traceback" not in process.stderr
    assert process.stderr.strip().splitlines()[-1].startswith("error: the multirun `sampler=sgdm")


def test_figure1_schedules_restart_and_decrease(tmp_path):
    frame = fig1.schedules(epochs=8, batches=10, points=80)
    cyclical = frame[frame.schedule.str.startswith("cyclical")].set_index("iteration").lr
    decreasing = frame[frame.schedule.str.startswith("decreasing")].set_index("iteration").lr
    assert cyclical.loc[0] == pytest.approx(0.5) and cyclical.loc[20] == pytest.approx(0.5)  # 4 cycles of 20
    assert decreasing.is_monotonic_decreasing and decreasing.iloc[-1] == pytest.approx(0.01, rel=0.05)
    path = fig1.render(tmp_path)
    assert path.exists() and path.with_suffix(".pdf").exists()


def _mlp_states(count):
    from csg.models import create_model

    states = []
    for seed in range(count):
        torch.manual_seed(seed)
        states.append(create_model("mlp", num_classes=10, input_shape=(1, 4, 4)).state_dict())
    return states


def test_pairwise_distances_match_flattened_weights():
    states = _mlp_states(3)
    flat = torch.stack([torch.cat([v.reshape(-1) for v in sd.values()]).double() for sd in states])
    assert np.allclose(fig3.pairwise_distances(states), torch.cdist(flat, flat).numpy(), atol=1e-8)


def test_mds_recovers_a_planar_configuration():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(8, 2)) * [3.0, 1.0]
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)
    embedded = fig3.mds_embedding(distances)
    assert np.allclose(np.linalg.norm(embedded[:, None] - embedded[None], axis=-1), distances, atol=1e-2)


def test_interpolation_ends_midpoint_and_integer_buffers():
    first = {"w": torch.ones(2), "steps": torch.tensor(7)}
    second = {"w": torch.zeros(2), "steps": torch.tensor(3)}
    assert torch.equal(fig3.interpolate(first, second, 1.0)["w"], first["w"])
    assert torch.equal(fig3.interpolate(first, second, 0.0)["w"], second["w"])
    half = fig3.interpolate(first, second, 0.5)
    assert torch.allclose(half["w"], torch.full((2,), 0.5)) and int(half["steps"]) == 3


def test_interpolation_errors_end_at_each_models_own_error():
    from csg.evaluation import predict_probs
    from csg.models import create_model

    generator = torch.Generator().manual_seed(0)
    loader = [(torch.randn(50, 1, 4, 4, generator=generator), torch.randint(0, 10, (50,), generator=generator))]
    first, second = _mlp_states(2)
    model = create_model("mlp", num_classes=10, input_shape=(1, 4, 4))
    errors = fig3.interpolation_errors(model, first, second, loader, torch.device("cpu"), lambdas=(0.0, 0.5, 1.0))
    for state, expected in ((second, errors[0]), (first, errors[2])):
        model.load_state_dict(state)
        probs, targets = predict_probs(model, loader, torch.device("cpu"))
        assert 100 * (probs.argmax(1) != targets).double().mean().item() == pytest.approx(expected)


def test_cycles_sweep_averages_seeds_per_method_and_m(tmp_path):
    runs = tmp_path / "runs"
    for seed, error in ((0, 6.0), (1, 8.0)):
        _run(runs, f"c{seed}", sampler="csgld", seed=seed, error=error, cycles=2)
    _run(runs, "s", sampler="snapshot_sgd", error=9.0, cycles=5)
    missing = fig3.report(runs, tmp_path / "out", "smoke", epochs=80, seeds="0")
    cycles = pd.read_csv(tmp_path / "out" / "fig3_cycles.csv").set_index(["method", "cycles"])
    assert cycles.loc[("cSGLD", 2), "mean"] == pytest.approx(7.0) and cycles.loc[("cSGLD", 2), "n"] == 2
    assert cycles.loc[("Snapshot-SGD", 5), "mean"] == pytest.approx(9.0)
    assert {"sampler": "sgld", "sampler.samples_per_cycle": "12", "data": "mnist5k", "seed": "0"} in missing
    assert (tmp_path / "out" / "fig3.png").exists() and (tmp_path / "out" / "fig3.pdf").exists()
    assert pd.read_csv(tmp_path / "out" / "fig3_cycles_runs.csv").shape[0] == 3
    assert (tmp_path / "out" / "fig3_comparisons.csv").read_text().strip() == ""  # no M with both methods
    _run(runs, "s2", sampler="snapshot_sgd", error=8.5, cycles=2)  # M = 2, seed 0 of both: one pair, one seed
    fig3.report(runs, tmp_path / "out", "smoke", epochs=80, seeds="0")
    compared = pd.read_csv(tmp_path / "out" / "fig3_comparisons.csv").iloc[0]
    assert (compared.M, compared.n, compared.difference) == (2, 1, pytest.approx(6.0 - 8.5))
    text = (tmp_path / "out" / "fig3.md").read_text()
    assert "One seed: an ordering, not a verdict." in text and "(c) from seeds 0, 1" in text


def test_wandb_names_identify_table_method_and_seed():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=table1_smoke", "logger=wandb", "sampler=csgld", "seed=2"])
    assert cfg.logger.group == "table1/mnist5k/csgld" and cfg.logger.run_name == "table1_csgld_mnist5k_seed2"
    assert list(cfg.logger.tags) == ["table1", "csgld", "mnist5k"]


def test_official_code_preset_changes_only_the_stage_split():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        paper = compose("config", overrides=["experiment=table1", "sampler=csghmc", "data=cifar10"])
        code = compose("config", overrides=["experiment=table1_official_code", "sampler=csghmc", "data=cifar10"])
    assert paper.sampler.explore == 0.8 and code.sampler.explore == 0.9
    assert (paper.sampler.lr0, paper.trainer.epochs, paper.model.name) == (code.sampler.lr0, code.trainer.epochs,
                                                                           code.model.name)


def test_icsgld_table1_sweeps_drop_what_a_scale_lacks_and_match_boolean_overrides():
    spec = tables.TABLES["icsgld_table1"]
    smoke, full = sweeps.expand(spec, "smoke", 40), sweeps.expand(spec, "full", 500)
    assert [bool(s) for s in smoke] == [True, True, True, True, False, False]  # no WRN at smoke scale
    assert len(sweeps.expected_runs(smoke)) == 5 and len(sweeps.expected_runs(full)) == 5 * 4 * 5
    assert "trainer.epochs=160" in smoke[0] and "trainer.epochs=2000" in full[0]  # T4: 4 x the budget
    assert set(spec.processes) == {3, 4, 5}  # the interacting chains' sweeps
    run = pd.Series({"status": "done", "sampler.name": "csghmc", "sampler.hold_sampling_lr": True})
    assert sweeps.missing_runs(pd.DataFrame([run]), [{"sampler": "csghmc", "sampler.hold_sampling_lr": "true"}]) == []
