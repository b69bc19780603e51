"""The posterior benchmark. make reference-network: the task read as train.py reads the preset, the JAX network
equal to the torch one, the convergence checks on constructed draws, and the driver end to end at a tiny NUTS budget
(refused by the checks: nothing written; accepted under loosened checks: a reference that a run of the preset is
scored against). The contenders: every one a valid train.py command at every budget, paying for all its chains."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from studies.accuracy.reference import ReferenceRejected
from studies.benchmark import reference
from studies.benchmark.task import check_layout, load_task
from tests.conftest import ROOT, train
from tests.formats import write_mnist

pytest.importorskip("numpyro")


@pytest.fixture(scope="module")
def fashion_root(tmp_path_factory) -> Path:
    """Fashion-MNIST's four idx files, generated (12 training and 8 test images): the OOD set's real format."""
    root = tmp_path_factory.mktemp("fashion")
    write_mnist(root / "FashionMNIST" / "raw", train=12, test=8, gz=True)
    return root


def test_the_task_is_the_presets_posterior_and_the_networks_agree(fashion_root):
    task, model = load_task(0.2, (f"ood.root={fashion_root}",))
    assert (task.num_data, len(task.test_y), len(task.ood_x)) == (1000, 1000, 8)
    assert task.train_x.shape == (1000, 49) and task.layers == ((32, 49), (10, 32)) and task.dimension == 1930
    assert task.temperature == 0.2 and task.prior_precision == pytest.approx(1000 * 5e-4)
    assert np.bincount(task.train_y).tolist() == [100] * 10
    assert check_layout(task, model, np.random.default_rng(1)) < 1e-4


def test_the_potential_is_csgs_loss_over_t(fashion_root):
    """U(theta) / T of the NUTS chains equals what csg's samplers target: the summed cross-entropy of the training
    set plus (N wd / 2) |theta|^2, over T, at the torch model's own weights."""
    import torch

    from studies.benchmark.task import flatten_state, split

    for temperature in (1.0, 0.2):
        task, model = load_task(temperature, (f"ood.root={fashion_root}",))
        x, tail = torch.from_numpy(task.train_x), split(model)[1]
        with torch.no_grad():
            loss = torch.nn.functional.cross_entropy(tail(x).double(), torch.from_numpy(task.train_y), reduction="sum")
            prior = 0.5 * task.num_data * task.weight_decay * sum((p.double() ** 2).sum() for p in model.parameters())
        ours = float(reference.potential(task)(flatten_state(model)))
        assert ours == pytest.approx(float((loss + prior) / temperature), rel=1e-6)


def test_floors_shrink_with_members_and_vanish_for_identical_draws():
    rng = np.random.default_rng(0)
    probs = _draws(rng, 4, 100)
    found = reference.floors(probs, sizes=(1, 5, 40), repeats=20)
    assert found["1"]["total_variation"] > found["5"]["total_variation"] > found["40"]["total_variation"] > 0
    same = np.broadcast_to(probs[:1, :1], probs.shape)  # every draw the same function
    assert reference.floors(same, sizes=(1, 5), repeats=5)["1"]["total_variation"] < 1e-6


def test_a_verdict_shows_its_effect_and_whether_it_is_within_the_margin():
    from types import SimpleNamespace

    from studies.benchmark.report import effect, floor_of

    small = SimpleNamespace(metric="tv", verdict="hurts", difference=0.0013)
    large = SimpleNamespace(metric="tv", verdict="hurts", difference=0.0246)
    assert effect(small) == "hurts (+0.0013, within the margin 0.005)" and effect(large) == "hurts (+0.0246)"
    assert effect(SimpleNamespace(metric="tv", verdict="inconclusive", difference=0.001)) == "inconclusive (+0.0010)"
    sizes = {"5": {"total_variation": 0.05}, "12": {"total_variation": 0.03}, "48": {"total_variation": 0.01}}
    assert floor_of(sizes, 12) == (12, 0.03) and floor_of(sizes, 40) == (48, 0.01)  # exact, else the nearest


def _draws(rng, chains, draws, shift=0.0):
    logits = rng.standard_normal((1, 1, 50, 3)) * 2 + rng.standard_normal((chains, draws, 50, 3)) * 0.3
    logits[0] += shift  # one chain elsewhere
    p = np.exp(logits)
    return p / p.sum(-1, keepdims=True)


def test_convergence_accepts_agreeing_chains_and_names_what_fails():
    rng = np.random.default_rng(0)
    good = reference.convergence(_draws(rng, 4, 400), _draws(rng, 4, 400))
    assert good["accepted"] and good["failed"] == [] and good["rhat_test"]["share_at_most_1.01"] >= 0.95
    assert good["halves"]["total_variation"] < reference.HALVES_TV_MAX
    stuck = reference.convergence(_draws(rng, 4, 400, shift=np.array([3.0, 0.0, -3.0])), None)
    assert not stuck["accepted"] and "rhat_ood" not in stuck
    assert any(reason.startswith("rhat_test") for reason in stuck["failed"])
    assert max(stuck["chains_tv_to_pooled"]) > 0.1
    frozen = reference.convergence(np.broadcast_to(_draws(rng, 1, 1), (2, 20, 50, 3)), None)  # chains that never move
    assert not frozen["accepted"] and frozen["rhat_test"]["count"] == 0
    assert frozen["failed"][0] == "rhat_test: no probability moved across the draws (no R-hat to compute)"


@pytest.mark.parametrize("option, allowed", [("chains=1", "a whole number >= 2"), ("samples=5", "a whole number >= 20"),
                                             ("temperatures=0", "comma-separated numbers > 0")])
def test_a_nuts_setting_too_small_for_the_checks_is_one_line_before_sampling(tmp_path, option, allowed):
    from csg.errors import ConfigError
    from studies.benchmark.run import run_reference_network
    from studies.experiments.job import Job

    job = Job(target="reference-network", out=tmp_path / "out", out_given=True, scale="full", launcher="local",
              seeds=None, report_only=False, runs=None, preset=None, add=(), stamp="now", overrides=(option,))
    key, value = option.split("=")
    with pytest.raises(ConfigError, match=f"^{key}='{value}' is not allowed: {allowed}"):
        run_reference_network(job)
    assert not (tmp_path / "out").exists()


def _reproduce(out: Path, *options: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "reference-network", "--out",
                           str(out), "chains=2", "warmup=20", "samples=20", "max_tree_depth=3", "workers=1",
                           *options], capture_output=True, text=True, timeout=600, cwd=out.parent)


def test_a_reference_that_fails_its_checks_writes_nothing(tmp_path, fashion_root):
    done = _reproduce(tmp_path / "out", f"ood.root={fashion_root}", "temperatures=1")
    lines = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 1 and len(lines) == 1 and "not accepted: rhat_test" in lines[0], done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "data").exists()  # no draws either
    bad = _reproduce(tmp_path / "out", "samples=5")  # the command's exit status and line (the checks: below)
    assert bad.returncode == 2 and bad.stderr.startswith("error: samples='5' is not allowed: a whole number >= 20")


def test_an_accepted_reference_scores_a_run_of_the_preset(tmp_path, fashion_root, monkeypatch):
    """In-process with the checks loosened (a tiny budget cannot pass them): the files, and a run scored by them."""
    from studies.benchmark.run import run_reference_network
    from studies.experiments.job import Job

    monkeypatch.setattr(reference, "RHAT_SHARE", 0.0)
    monkeypatch.setattr(reference, "RHAT_WORST", np.inf)
    monkeypatch.setattr(reference, "HALVES_TV_MAX", 1.0)
    job = Job(target="reference-network", out=tmp_path / "out", out_given=True, scale="full", launcher="local",
              seeds=None, report_only=False, runs=None, preset=None, add=(), stamp="now",
              overrides=("chains=2", "warmup=20", "samples=20", "max_tree_depth=3", "workers=1", "temperatures=0.2",
                         f"ood.root={fashion_root}", f"draws_dir={tmp_path / 'draws'}"))
    lines = run_reference_network(job)
    folder = tmp_path / "out" / "reference"
    assert any("mnist_mlp_T0.2.npz" in line for line in lines)
    with np.load(folder / "mnist_mlp_T0.2.npz", allow_pickle=False) as archive:
        assert archive["test_probs"].shape == (1000, 10) and archive["ood_probs"].shape == (8, 10)
        assert np.allclose(archive["test_probs"].sum(1), 1, atol=1e-5)
        assert float(archive["temperature"]) == 0.2 and int(archive["num_data"]) == 1000
    assert np.load(tmp_path / "draws" / "draws_T0.2.npy").shape == (2, 20, 1930)
    facts = json.loads((folder / "reference_network.json").read_text())["0.2"]
    assert facts["settings"]["samples"] == 20 and facts["gradient_evaluations_sampling"] > 0
    text = (folder / "reference_network.md").read_text()
    assert "| 0.2 | mnist_mlp_T0.2.npz | 2 x (20 + 20) |" in text and "| T | S = 1 | S = 5 | S = 8 | S = 10 | S = 12 |" in text and "S = 48" not in text
    assert facts["gradient_evaluations_warmup"] > 0 and 0 <= facts["chains"][0]["max_depth_share"] <= 1
    run = tmp_path / "run"
    process = train(["experiment=posterior_benchmark", "trainer.epochs=8", "sampler.cycles=2",
                     "sampler.samples_per_cycle=1", f"ood.root={fashion_root}", "logger=none",
                     f"evaluation.reference={folder / 'mnist_mlp_T0.2.npz'}"], run, tmp_path)
    assert process.returncode == 0, process.stderr
    scores = json.loads((run / "metrics.json").read_text())["reference"]
    assert 0 < scores["test"]["agreement"] <= 1 and 0 <= scores["test"]["total_variation"] < 1
    assert set(scores["ood"]) == {"agreement", "total_variation"} and scores["temperature"] == 0.2
    # a reference of another posterior (another training set) is refused before training
    other = train(["experiment=posterior_benchmark", "data.train_per_class=50", "trainer.epochs=8", "sampler.cycles=2",
                   "sampler.samples_per_cycle=1",
                   f"ood.root={fashion_root}", "logger=none", f"evaluation.reference={folder / 'mnist_mlp_T0.2.npz'}"],
                  tmp_path / "other", tmp_path)
    assert other.returncode == 2 and "made on 1000 training examples, the run has 500" in other.stderr
    assert not (tmp_path / "other" / "samples").exists()


def test_every_contender_is_a_train_command_at_every_budget_paying_for_all_its_chains(fashion_root):
    from csg.checks import check_train_command
    from csg.paths import CONFIGS
    from studies.benchmark.contenders import BUDGETS, CONTENDERS, overrides

    for name, contender in CONTENDERS.items():
        for budget in BUDGETS.values():
            words = overrides(name, budget, 3, 0.2, extra=(f"ood.root={fashion_root}",))
            assert check_train_command(words, CONFIGS) is None, (name, budget)
            value = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words}
            assert int(value["trainer.epochs"]) * contender.chains == budget and value["seed"] == "3"
            assert int(value.get("sampler.chains", 1)) == contender.chains
            if contender.temperature_follows:
                assert value["sampler.temperature"] == "0.2"
            else:  # its own: 0 for the optimisers and the noise-off control
                assert value.get("sampler.temperature", "0") == "0"
    assert "sampler.temperature=0" in overrides("Snapshot-SGDM", 200, 0, 0.2)  # the control: noise off
    # every run's samples fit its cycles by train.py's own collection rule (a cycle need not end on an epoch end)
    from csg.engine.build import plan_collection
    from csg.engine.settings import schedule_settings
    from csg.schedules import Cyclical
    from studies.benchmark.task import compose

    for name, contender in CONTENDERS.items():
        for budget in BUDGETS.values():
            words = overrides(name, budget, 3, 0.2)
            cfg = compose(0.2, tuple(w for w in words if not w.startswith(("experiment=", "sampler.temperature="))))
            epochs, cycles = int(cfg.trainer.epochs), int(cfg.sampler.cycles)
            assert float(cfg.sampler.explore) == contender.explore, name
            plan_collection(schedule_settings(cfg), Cyclical(1.0, epochs * 10, cycles, float(cfg.sampler.explore)), 10)
    with pytest.raises(ValueError, match="does not split over 4 chains"):
        overrides("cSGHMC x4", 42, 0, 0.2)


def test_a_contender_runs_and_is_scored_against_a_reference(tmp_path, fashion_root):
    """Two contenders at the smallest budget, in this process: rows with their members, cost and reference scores."""
    from studies.benchmark.contenders import run_contender

    labels = load_task(0.2, (f"ood.root={fashion_root}",))[0].test_y
    flat = tmp_path / "flat.npz"
    np.savez(flat, test_probs=np.full((1000, 10), 0.1), test_labels=labels, ood_probs=np.full((8, 10), 0.1))
    rows = [run_contender(name, 40, 0, 0.2, tmp_path / name.replace(" ", "_"), reference=flat,
                          extra=(f"ood.root={fashion_root}",)) for name in ("cSGHMC", "cSGHMC x4")]
    for row in rows:
        assert row["gradient_evaluations"] == 400 and row["members"] >= 2  # 40 epochs of 10 batches over all chains
        assert 0 <= row["agreement"] <= 1 and 0 < row["tv"] < 1 and 0 < row["ood_tv"] < 1
    assert rows[0]["temperature"] == 0.2 and rows[1]["members"] == 4 * 2  # 4 chains x 2 cycles x 1 sample


@pytest.mark.parametrize("curve, start, best, bracketed", [
    ([5, 4, 3, 2, 3, 4], 0, 3, True),            # walks up to the minimum and brackets it
    ([5, 4, 3, 2, 3, 4], 5, 3, True),            # and down
    ([1, 2, 3, 4], 2, 0, False),                 # still falling at the grid's low end: an edge
    ([4, 3, 2, 1], 1, 3, False),                 # and at its high end
    ([3, 2, np.nan, np.inf], 1, 1, True),        # a diverged neighbour (NaN, inf) brackets from above
    ([2, 2, 2], 1, 0, False),                    # ties: the smaller step, at the end
])
def test_the_step_search_brackets_the_best_or_says_it_could_not(curve, start, best, bracketed):
    from studies.benchmark.tuning import search

    calls = []

    def objective(index):
        calls.append(index)
        return curve[index]

    found = search(objective, len(curve), start)
    assert (found.best, found.bracketed, found.edge) == (best, bracketed, not bracketed)
    assert len(calls) == len(set(calls))  # each step run once
    assert all(abs(found.best - i) > 1 or i in found.scores for i in range(len(curve)))  # its neighbours ran


def test_the_held_out_digits_are_disjoint_from_training_and_test_and_score_a_contender(tmp_path):
    import torch

    from csg.data import build_data
    from csg.data.mnist import mnist5k_heldout
    from studies.benchmark.tuning import validation_batches, validation_nll

    images, labels = mnist5k_heldout(100, 100)
    assert images.shape == (3000, 1, 28, 28) and np.bincount(labels).tolist() == [300] * 10
    data = build_data("mnist5k", batch_size=100, train_per_class=100)
    seen = {bytes(x.numpy().tobytes()) for loader in (data.train_eval, data.test) for batch, _ in loader for x in batch}
    held = validation_batches()
    assert sum(len(y) for _, y in held) == 3000
    assert not any(bytes(x.numpy().tobytes()) in seen for batch, _ in held for x in batch)
    assert torch.allclose(held[0][0].mean(), torch.tensor(0.0), atol=0.2)  # normalised as the run's loaders
    nll = validation_nll("cSGHMC", 40, 0.2, 0.1, tmp_path, seeds=(0,), batches=held[:1])
    assert 0 < nll < math.log(10) + 1
    assert validation_nll("SGLD", 40, 0.2, 1e6, tmp_path, seeds=(0,), batches=held[:1]) == math.inf  # diverges


def test_verdicts_pair_csghmc_with_each_method_in_one_family_oriented_by_metric():
    from studies.benchmark import report

    rng = np.random.default_rng(0)
    rows = []
    for seed in range(10):
        shared = rng.normal(0, 0.01)
        for method, shift in (("cSGHMC", 0.0), ("SGLD", 0.05), ("cSGHMC, noise off", 0.0)):
            noise = rng.normal(0, 0.002)
            rows.append({"budget": "1x", "method": method, "seed": seed, "tv": 0.2 + shift + shared + noise,
                         "agreement": 0.9 - shift + shared + noise, "nll": 0.4 + shared + noise,
                         "ece": 0.05 + noise})
    import pandas as pd

    found = report.verdicts(pd.DataFrame(rows)).set_index(["baseline", "metric"])
    assert len(found) == 2 * 4 and set(found.method) == {"cSGHMC"}
    # cSGHMC is 0.05 closer on TV and 0.05 higher on agreement than SGLD: both "helps", whichever way is better
    assert found.loc[("SGLD", "tv"), "verdict"] == "helps" and found.loc[("SGLD", "agreement"), "verdict"] == "helps"
    assert found.loc[("SGLD", "tv"), "difference"] < 0 < found.loc[("SGLD", "agreement"), "difference"]
    assert found.loc[("cSGHMC, noise off", "tv"), "verdict"] == "equivalent"  # within its stated margin, 0.005
    text = "\n".join(report.reading(found.reset_index()))
    assert "against SGLD: cSGHMC is better on top-1 agreement" in text


def test_a_method_is_read_beside_the_floor_of_its_member_count():
    from studies.benchmark import report

    floors = {"1": {"total_variation": 0.1}, "5": {"total_variation": 0.05}, "12": {"total_variation": 0.03}}
    assert report.floor_of(floors, 12) == (12, 0.03) and report.floor_of(floors, 4) == (5, 0.05)
    assert report.floor_of(floors, 8) == (5, 0.05) and report.floor_of(floors, 40) == (12, 0.03)


def test_the_benchmark_tunes_runs_scores_and_reports_every_contender(tmp_path, fashion_root):
    """The study end to end at a tiny budget: tuning rows for each contender, the paired noise-off control at
    cSGHMC's step, and a report with every verdict, against a constructed reference."""
    import pandas as pd

    from studies.benchmark import report, study

    labels = load_task(0.2, (f"ood.root={fashion_root}",))[0].test_y
    flat = tmp_path / "flat.npz"
    np.savez(flat, test_probs=np.full((1000, 10), 0.1), test_labels=labels, ood_probs=np.full((8, 10), 0.1))
    protocol = study.Protocol("test", contenders=("cSGHMC", "SGHMC", "posteriors cSGLD", "torch-uncertainty cSGLD",
                                                  "laplace-torch LL-KFAC"),
                              budgets={"tiny": 20},
                              seeds=(100, 101),
                              tuning_seeds=(0,), factors=(0.5, 1.0, 2.0), workers=1,
                              overrides=(f"ood.root={fashion_root}",))
    tuning, rows, seconds = study.run_study(protocol, tmp_path / "runs", flat, log=lambda line: None)
    said = []   # a second call with the same runs folder reads every finished task instead of running it
    again = study.run_study(protocol, tmp_path / "runs", flat, log=said.append)
    pd.testing.assert_frame_equal(pd.DataFrame(again[1]), pd.DataFrame(rows))   # NaN members (Laplace) too
    assert again[0] == tuning and len(said) == 5 and all("read from" in line for line in said)
    tuning, runs = pd.DataFrame(tuning), pd.DataFrame(rows)
    assert set(tuning.method) == {"cSGHMC", "SGHMC", "posteriors cSGLD", "torch-uncertainty cSGLD",
                                  "laplace-torch LL-KFAC"}
    assert tuning.groupby("method").chosen.sum().eq(1).all() and (tuning.validation_nll > 0).all()
    assert sorted(runs.method.unique()) == ["SGHMC", "cSGHMC", "cSGHMC, noise off", "laplace-torch LL-KFAC",
                                            "posteriors cSGLD", "torch-uncertainty cSGLD"]
    assert len(runs) == 6 * 2 and runs.columns.is_unique
    for name in ("posteriors cSGLD", "torch-uncertainty cSGLD"):
        peer = runs[runs.method == name]
        assert (peer.members == 4).all() and peer.tv.between(0, 1).all() and peer.ood_tv.between(0, 1).all()
    laplace = runs[runs.method == "laplace-torch LL-KFAC"]
    assert laplace.members.isna().all() and laplace.tv.between(0, 1).all() and (laplace.error_pct < 90).all()
    off, base = runs[runs.method == "cSGHMC, noise off"], runs[runs.method == "cSGHMC"]
    assert off.lr0.tolist() == base.lr0.tolist() and (runs.gradient_evaluations == 200).all()
    facts = {"file": "flat.npz", "checks": {"rhat_test": {"max": 1.004}, "floors_test": {
        "1": {"total_variation": 0.1}, "5": {"total_variation": 0.05}}}}
    path = report.write(tmp_path / "out", protocol, tuning, runs, facts, seconds, "make posterior-benchmark")
    text = path.read_text()
    assert "| tiny | SGHMC |" in text and "| tiny | cSGHMC, noise off |" in text
    assert "/ 1.0040" in text and "every check passed" in text
    found = pd.read_csv(tmp_path / "out" / report.VERDICTS)
    assert len(found) == 5 * 5 and set(found.metric) == set(report.METRICS)  # OOD TV judged too
    assert "expected TV of S exact draws" in text and "floor" not in text and "cannot do better" not in text
    assert "cSGHMC is csg's recipe: 4 cosine cycles" in text and "held at its start (0.095 lr0)" in text
    assert "| laplace-torch LL-KFAC | a Gaussian |" in text
    assert (tmp_path / "out" / report.FIGURE).stat().st_size > 0


def test_a_bad_benchmark_option_is_one_line_before_anything_runs(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "posterior-benchmark", "--out",
                           str(tmp_path / "out"), "contenders=SGLD,Nope"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 2 and len(errors) == 1 and "contenders" in errors[0] and "cSGHMC" in errors[0]
    assert "Traceback" not in done.stderr and list(tmp_path.iterdir()) == []
    merge = subprocess.run([sys.executable, str(ROOT / "scripts" / "reproduce.py"), "posterior-benchmark", "--out",
                            str(tmp_path / "out"), "contenders=SGLD", "merge=true"], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    errors = [line for line in merge.stderr.splitlines() if line.startswith("error")]
    assert merge.returncode == 2 and len(errors) == 1 and "merge" in errors[0] and "finished benchmark" in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_the_laplace_peer_targets_csgs_cold_posterior_on_the_last_layer(fashion_root):
    """laplace-torch's posterior precision is H / temperature + prior precision: temperature T and prior N wd / T
    make it (H + N wd) / T, csg's exp(-U / T) on the last layer."""
    from studies.benchmark import peers

    members, _, task, _ = peers._laplace(10, 0, 0.2, 0.1, (f"ood.root={fashion_root}",))
    fitted = members[0].source
    assert fitted.temperature == 0.2 and fitted.n_data == task.num_data == 1000
    assert math.isclose(float(fitted.prior_precision), task.num_data * task.weight_decay / 0.2)


def test_a_method_added_by_merge_replaces_only_its_own_rows(tmp_path):
    import pandas as pd

    from studies.benchmark import report

    runs = pd.DataFrame([{"method": m, "seed": s, "tv": 0.1 * i, "study_seconds": 600.0}
                         for i, m in enumerate(("cSGHMC", "SGLD", "torch-uncertainty cSGLD")) for s in (0, 1)])
    tuning = pd.DataFrame([{"method": m, "lr0": 0.1} for m in ("cSGHMC", "SGLD", "torch-uncertainty cSGLD")])
    runs.to_csv(tmp_path / report.RUNS, index=False)
    tuning.to_csv(tmp_path / report.TUNING, index=False)
    new_runs = pd.DataFrame([{"method": "torch-uncertainty cSGLD", "seed": s, "tv": 0.9} for s in (0, 1)])
    new_tuning = pd.DataFrame([{"method": "torch-uncertainty cSGLD", "lr0": 0.4}])
    t, r, seconds = report.merged(tmp_path, new_tuning, new_runs, ("torch-uncertainty cSGLD",), 60.0)
    assert seconds == 600.0 and (r.added_seconds == 60.0).all() and (r.added_methods == "torch-uncertainty cSGLD").all()
    assert r[r.method == "torch-uncertainty cSGLD"].tv.tolist() == [0.9, 0.9]
    assert r[r.method == "SGLD"].tv.tolist() == pytest.approx([0.1, 0.1]) and len(r) == 6
    assert t.set_index("method").lr0.to_dict() == {"cSGHMC": 0.1, "SGLD": 0.1, "torch-uncertainty cSGLD": 0.4}
    assert "added by a run of their own" in report._added(r) and "1.0 min" in report._added(r)


def test_a_step_at_the_grids_edge_is_named_in_the_reading():
    import pandas as pd

    from studies.benchmark import report

    tuning = pd.DataFrame([{"method": m, "budget": "1x", "lr0": lr, "validation_nll": v, "chosen": c, "bracketed": b}
                           for m, lr, v, c, b in (("cSGHMC", 0.1, 0.5, True, True), ("SGLD", 1.6, 0.4, True, False))])
    text = "\n".join(report.edge_lines(tuning))
    assert "in 1 of the 2 method-budget cells" in text and "SGLD at 1x" in text and "cSGHMC" not in text
    assert report.edge_lines(tuning[tuning.method == "cSGHMC"]) == []


def test_snapshot_at_csghmcs_step_is_the_noise_off_control_compared_once_and_the_noise_is_read_first():
    import pandas as pd

    from studies.benchmark import report

    rng = np.random.default_rng(1)
    rows = []
    for seed in range(8):
        tv = 0.08 + rng.normal(0, 0.001)
        for method, shift, lr0 in (("cSGHMC", 0.002, 0.4), ("cSGHMC, noise off", 0.0, 0.4),
                                   ("Snapshot-SGDM", 0.0, 0.4), ("SGLD", 0.01, 0.1)):
            rows.append({"budget": "1x", "budget_epochs": 200, "method": method, "seed": seed, "lr0": lr0,
                         "tv": tv + shift + rng.normal(0, 1e-4), "agreement": 0.95, "nll": 0.4, "ece": 0.03})
    runs = pd.DataFrame(rows)
    assert report.duplicates(runs) == {("1x", "Snapshot-SGDM")}
    found = report.verdicts(runs)
    assert set(found.baseline) == {"cSGHMC, noise off", "SGLD"}   # the same runs enter the family once
    text = "\n".join(report.noise_lines(runs, found))
    assert "1x: total variation hurts (+0.0020, within the margin 0.005)" in text and "compared once" in text
    assert report.twin_lines(runs) == []   # SGLD is 0.01 away on every seed
    twin = pd.concat([runs, runs[runs.method == "cSGHMC, noise off"].assign(method="cycSWAG", tv=lambda f: f.tv + 5e-4)])
    assert "cycSWAG at 1x (at most 0.0005)" in "\n".join(report.twin_lines(twin))
    other = runs.assign(lr0=np.where(runs.method == "Snapshot-SGDM", 0.8, runs.lr0))
    assert report.duplicates(other) == set() and "Snapshot-SGDM" in set(report.verdicts(other).baseline)
