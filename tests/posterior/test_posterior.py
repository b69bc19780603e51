"""csg.Posterior and csg.train: a finished run's posterior from Python, and train.py's run from Python."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

import csg
from csg.errors import ConfigError, CsgError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
# 2 epochs of 8 batches on the shipped digits, 200 test digits: about 2 s a run once the process is warm
SMALL = ["trainer.epochs=2", "sampler.cycles=2", "sampler.samples_per_cycle=1", "data.batch_size=500",
         "data.test_per_class=20", "logger=none", "trainer.progress=false"]
SWAG = ["sampler=cycswag", "trainer.epochs=4", "sampler.cycles=1", "sampler.explore=0.5", "sampler.samples_per_cycle=2",
        "sampler.swag.draws_per_cycle=3", "sampler.swag.rank=2", *SMALL[3:]]
METRICS = ("test_error_pct", "nll", "ece", "brier", "num_samples")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Three csg.train calls in this process, from a fresh working directory, into train.py's default run
    directories (runs/<date>/<time>_<sampler>_<data>_seed<seed>): two chains with harmonic weights, one chain
    with equal weights (the same sampler, data and seed: a second directory only if the time stamp is new),
    and cyclical SWAG."""
    cwd = tmp_path_factory.mktemp("work")
    root = logging.getLogger()
    before = list(root.handlers), root.level
    previous = os.getcwd()
    os.chdir(cwd)
    try:
        chains = csg.train([*SMALL, "sampler.chains=2", "evaluation.cycle_weights=harmonic"])
        after_one = list(root.handlers), root.level
        equal = csg.train(SMALL)
        swag = csg.train(SWAG)
    finally:
        os.chdir(previous)
    return SimpleNamespace(cwd=cwd, chains=chains, equal=equal, swag=swag, before=before, after_one=after_one,
                           after=(list(root.handlers), root.level))


def _metrics(posterior) -> dict:
    return json.loads((posterior.run_dir / "metrics.json").read_text())


def _one_line(error: BaseException, *fragments: str) -> str:
    message = str(error)
    assert "\n" not in message and message.strip() == message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# ------------------------------------------------------------------------------------------------- csg.train
def test_two_train_calls_make_two_run_directories_as_train_py_does(trained):
    runs = sorted((trained.cwd / "runs").glob("*/*"))
    dirs = [trained.chains.run_dir, trained.equal.run_dir, trained.swag.run_dir]
    assert sorted(dirs) == runs and len(set(dirs)) == 3
    assert [d.name.split("_", 1)[1] for d in dirs] == ["csghmc_mnist5k_seed0", "csghmc_mnist5k_seed0",
                                                       "cycswag_mnist5k_seed0"]
    for posterior, overrides in [(trained.chains, [*SMALL, "sampler.chains=2", "evaluation.cycle_weights=harmonic"]),
                                 (trained.equal, SMALL), (trained.swag, SWAG)]:
        run_dir = posterior.run_dir
        assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
        assert OmegaConf.load(run_dir / ".hydra" / "overrides.yaml") == overrides
        assert OmegaConf.load(run_dir / ".hydra" / "hydra.yaml").hydra.job.name == "train"
        log = (run_dir / "train.log").read_text()
        assert f"epoch {posterior.cfg.trainer.epochs}/{posterior.cfg.trainer.epochs}" in log
        metrics = _metrics(posterior)
        assert metrics["num_classes"] == 10 and metrics["input_shape"] == [1, 28, 28]
        assert posterior.metrics == metrics and posterior.device == torch.device(metrics["device"])
    assert not list(trained.cwd.glob(".hydra.pending*"))


def test_train_leaves_logging_and_hydra_as_they_were(trained):
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    assert trained.after_one == trained.before and trained.after == trained.before
    assert not HydraConfig.initialized() and not GlobalHydra.instance().is_initialized()
    log = trained.chains.run_dir / "train.log"
    size = log.stat().st_size
    logging.getLogger("csg").warning("after csg.train returned")  # goes to no run's train.log
    assert log.stat().st_size == size


def test_train_refuses_bad_input_in_one_line_before_making_a_run_directory(tmp_path, monkeypatch):
    from csg.launch.api import CommandRefused

    monkeypatch.chdir(tmp_path)
    cases = {
        "sampler=nuts": ["sampler=nuts is not allowed: one of ", "csghmc"],
        "sampler.lrr=0.1": ["sampler.lrr=0.1 is not allowed: sampler.lrr is not a key of the config", "lr0"],
        "sampler.explore=1.0": ["sampler.explore=1.0 is not allowed: a number in [0, 1)"],
        "-m": ["-m is not allowed: csg.train runs one job", "python train.py -m"],
        "synthetic=table4": ["synthetic=table4 is not allowed", "python train.py synthetic=table4"],
    }
    for override, fragments in cases.items():
        with pytest.raises(CommandRefused) as refused:
            csg.train([override, "seed=0,1"] if override == "-m" else [override])
        assert isinstance(refused.value, ConfigError) and isinstance(refused.value, CsgError)
        _one_line(refused.value, *fragments)
    with pytest.raises(ConfigError) as refused:
        csg.train("seed=1")  # a string, not a list of overrides
    _one_line(refused.value, "overrides='seed=1' is not allowed: a list of key=value strings")
    # found once the data are known (the collection plan), inside Hydra's job: the same one line, no directory
    with pytest.raises(ConfigError) as refused:
        csg.train([*SMALL[:2], "sampler.samples_per_cycle=2", *SMALL[3:], f"hydra.run.dir={tmp_path / 'run'}"])
    _one_line(refused.value, "sampler.samples_per_cycle=2 is not allowed: 1..1")
    assert sorted(tmp_path.iterdir()) == []  # no runs/, no run directory, no .hydra.pending


def test_a_run_that_stops_raises_train_pys_line_and_logs_it(tmp_path):
    from csg.errors import DivergenceError

    root = logging.getLogger()
    before = list(root.handlers)
    run_dir = tmp_path / "run"
    with pytest.raises(DivergenceError) as stopped:  # a CsgError raised in Python, not Hydra's SystemExit
        csg.train(["trainer.epochs=2", "sampler.cycles=1", "sampler.lr0=1e6", "sampler.samples_per_cycle=1",
                   "trainer.log_every_n_steps=2", *SMALL[3:], f"hydra.run.dir={run_dir}"])
    message = _one_line(stopped.value, "loss became")
    assert (run_dir / "train.log").read_text().splitlines()[-1].endswith(f"error: {message}")
    assert not (run_dir / "metrics.json").exists() and list(root.handlers) == before


# ------------------------------------------------------------------------------------------------- Posterior
@pytest.mark.parametrize("which", ["chains", "equal", "swag"])
def test_evaluate_equals_the_runs_metrics_json(trained, which):
    posterior = getattr(trained, which)
    saved = _metrics(posterior)
    again = csg.Posterior.load(posterior.run_dir, device=saved["device"])
    metrics = again.evaluate()
    assert set(METRICS) <= set(metrics)
    for key in saved["ensemble"]:
        assert abs(metrics[key] - saved["ensemble"][key]) <= 1e-9, key
    assert again.names == [s["file"] for s in saved["per_sample"]] and len(again) == saved["ensemble"]["num_samples"]
    assert again.weights == [s["weight"] for s in saved["per_sample"]]
    assert again.chains == [s["chain"] for s in saved["per_sample"]] and again.weighting == saved["cycle_weights"]


def test_members_of_two_chains_harmonic_weights_and_swag_draws(trained):
    chains, swag = trained.chains, trained.swag
    assert chains.weighting == "harmonic" and chains.chains == [0, 0, 1, 1]
    assert chains.names == [f"chain{c:02d}/sample_{i:04d}_cycle{i:02d}_epoch{i:04d}.pt" for c in (0, 1) for i in (0, 1)]
    assert swag.weighting == "equal" and swag.names == [f"swag_chain00_cycle00_draw{d:02d}" for d in range(3)]
    assert swag.weights == pytest.approx([1 / 3] * 3)
    assert chains.cycles == [0, 1, 0, 1] and swag.cycles == [0, 0, 0]
    for name, cycle, state in zip(chains.names, chains.cycles, chains.states(), strict=True):
        record = torch.load(chains.run_dir / "samples" / name, weights_only=True)  # the sample file's own record
        assert cycle == record["cycle"] and state.keys() == record["state_dict"].keys()
        assert all(torch.equal(state[k], v) and state[k].device.type == "cpu" for k, v in record["state_dict"].items())
    with pytest.raises(ConfigError, match=r"^data_root=.* None for data=mnist5k, which reads no data root"):
        csg.Posterior.load(chains.run_dir, data_root=trained.cwd)  # the shipped digits: no root to replace


def test_iteration_loads_one_sample_at_a_time_into_one_module(trained):
    for posterior in (trained.chains, trained.swag):
        seen, weights = [], []
        for model, weight in posterior:
            assert model is posterior.model and not model.training
            seen.append(torch.cat([p.detach().flatten().clone() for p in model.parameters()]))
            weights.append(weight)
        assert len(seen) == len(posterior) == len(weights)
        assert all(not torch.equal(seen[i], seen[j]) for i in range(len(seen)) for j in range(i))  # distinct samples
        assert weights == posterior.weights and sum(weights) == pytest.approx(1.0, abs=1e-12)
        again = [torch.cat([p.detach().flatten().clone() for p in model.parameters()]) for model, _ in posterior]
        assert all(torch.equal(a, b) for a, b in zip(seen, again, strict=True))  # the same members every time


def test_predict_is_the_weighted_average_of_the_members(trained):
    from csg.evaluation import evaluate_samples

    posterior = trained.chains
    assert len(set(posterior.weights)) > 1  # harmonic: unequal weights
    x, _ = next(iter(posterior.data.test))
    probs = posterior.predict(x)
    assert probs.dtype == torch.float32 and probs.device == posterior.device and probs.shape == (len(x), 10)
    assert torch.allclose(probs.sum(1), torch.ones(len(x), device=probs.device), atol=1e-5)
    with torch.no_grad():
        by_hand = sum(weight * torch.softmax(model(x.to(posterior.device)).double(), 1) for model, weight in posterior)
    assert torch.allclose(probs.double(), by_hand, atol=1e-6)
    # over a loader: the probabilities the run's evaluation averaged, bit for bit
    states = [{k: v.clone() for k, v in model.state_dict().items()} for model, _ in posterior]
    result = evaluate_samples(posterior.model, states, posterior.weights, posterior.data.test, posterior.device)
    everything = posterior.predict_loader(posterior.data.test)
    assert everything.dtype == torch.float32 and torch.equal(everything.cpu(), result.probs.float())
    assert torch.equal(posterior.predict_loader([x for x, _ in posterior.data.test]), everything)  # x batches alone
    assert torch.equal(posterior.predict_loader(iter(list(posterior.data.test))), everything)  # a one-pass iterator
    assert torch.allclose(everything[: len(x)], probs, atol=1e-6)


def test_keep_on_device_predicts_the_same(trained):
    kept = csg.Posterior.load(trained.swag.run_dir, device=trained.swag.device, keep_on_device=True)
    x, _ = next(iter(trained.swag.data.test))
    assert torch.equal(kept.predict(x), trained.swag.predict(x))
    assert torch.equal(kept.predict(x), kept.predict(x))  # the same draws every time
    assert kept.evaluate() == trained.swag.evaluate()


def test_evaluate_on_other_data(trained):
    posterior = trained.equal
    test = list(posterior.data.test)
    half = [(x[: len(x) // 2], y[: len(y) // 2]) for x, y in test]
    metrics = posterior.evaluate(half)
    probs = posterior.predict_loader(half)
    targets = torch.cat([y for _, y in half]).to(probs.device)
    assert metrics["num_samples"] == 2
    assert metrics["test_error_pct"] == pytest.approx(100 * (probs.argmax(1) != targets).double().mean().item())
    assert metrics["nll"] == pytest.approx(-probs.double().gather(1, targets[:, None]).log().mean().item(), rel=1e-6)


def test_the_model_is_built_without_the_data_and_the_data_only_when_needed(trained, tmp_path):
    state = torch.get_rng_state()
    posterior = csg.Posterior.load(trained.equal.run_dir, device=trained.equal.device)
    assert torch.equal(torch.get_rng_state(), state)  # building the model drew from a forked random state
    assert posterior._data is None and (posterior.num_classes, posterior.input_shape) == (10, (1, 28, 28))
    x = torch.zeros(3, 1, 28, 28)
    assert posterior.predict(x).shape == (3, 10) and posterior._data is None
    # a run whose metrics.json predates num_classes and input_shape: the data tell
    old = tmp_path / "old"
    shutil.copytree(trained.equal.run_dir, old)
    metrics = json.loads((old / "metrics.json").read_text())
    del metrics["num_classes"], metrics["input_shape"]
    (old / "metrics.json").write_text(json.dumps(metrics))
    fallback = csg.Posterior.load(old, device=trained.equal.device)
    assert fallback._data is not None and fallback.input_shape == (1, 28, 28)
    assert torch.equal(fallback.predict(x), posterior.predict(x))
    assert fallback.evaluate() == pytest.approx(metrics["ensemble"], abs=1e-9)


# ---------------------------------------------------------------- replica exchange and contour importance weights
def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            return compose("config", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def _fake_run(run_dir: Path, source, overrides: list[str], samples: dict[str, dict]) -> dict[str, dict]:
    """A finished run directory with ``overrides``' config whose samples are ``source``'s first sample perturbed,
    one per name, with the given extra record entries, each folder's manifest recording them; returns the state
    dicts by name."""
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(_compose([*overrides, *SMALL[3:]]), run_dir / ".hydra" / "config.yaml")
    metrics = json.loads((source.run_dir / "metrics.json").read_text())
    kept = {key: value for key, value in metrics.items() if key not in ("per_sample", "manifests")}  # not these
    (run_dir / "metrics.json").write_text(json.dumps(kept))
    base = torch.load(source.run_dir / "samples" / source.names[0], weights_only=True)["state_dict"]
    states = {}
    for seed, (name, extra) in enumerate(samples.items()):
        generator = torch.Generator().manual_seed(seed)
        index, cycle, epoch = map(int, re.findall(r"\d+", Path(name).name))  # as the file's name says
        states[name] = {k: v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v
                        for k, v in base.items()}
        path = run_dir / "samples" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": states[name], "index": index, "cycle": cycle, "epoch": epoch, **extra}, path)
        manifest = path.parent / "manifest.json"
        entries = json.loads(manifest.read_text())["samples"] if manifest.exists() else []
        entries.append({"file": path.name, "index": index, "cycle": cycle, "epoch": epoch,
                        "bytes": path.stat().st_size})
        manifest.write_text(json.dumps({"format": 1, "samples": entries}))
    return states


def _average(posterior, states: list[dict], weights: list[float], x):
    total = 0
    for state, weight in zip(states, weights):
        posterior.model.load_state_dict(state)
        with torch.no_grad():
            total = total + weight * torch.softmax(posterior.model(x).double(), 1)
    return total


def test_replica_exchange_keeps_the_lowest_temperatures_samples(trained, tmp_path):
    rungs = {"chain00/sample_0000_cycle00_epoch0000.pt": 0, "chain00/sample_0001_cycle00_epoch0001.pt": 1,
             "chain01/sample_0000_cycle00_epoch0000.pt": 1, "chain01/sample_0001_cycle00_epoch0001.pt": 0}
    states = _fake_run(tmp_path / "re", trained.equal,
                       ["sampler=resghmc", "sampler.chains=2", "sampler.replica.temperatures=[1.0,2.0]",
                        "sampler.replica.step_sizes=[1.0,1.0]"],
                       {name: {"replica_rung": rung} for name, rung in rungs.items()})
    posterior = csg.Posterior.load(tmp_path / "re", device="cpu")
    cold = [name for name, rung in rungs.items() if rung == 0]
    assert posterior.names == cold and posterior.chains == [0, 1] and posterior.weights == [0.5, 0.5]
    x = next(iter(trained.equal.data.test))[0].cpu()
    expected = _average(posterior, [states[name] for name in cold], [0.5, 0.5], x)
    assert torch.allclose(posterior.predict(x).double(), expected, atol=1e-6)


def test_contour_samples_carry_their_importance_weights(trained, tmp_path):
    names = ["sample_0000_cycle00_epoch0000.pt", "sample_0001_cycle01_epoch0001.pt"]
    states = _fake_run(tmp_path / "contour", trained.equal, ["sampler=contour_sghmc"],
                       {names[0]: {"log_weight": 0.0}, names[1]: {"log_weight": math.log(3.0)}})
    posterior = csg.Posterior.load(tmp_path / "contour", device="cpu")
    assert posterior.weighting == "importance" and posterior.weights == pytest.approx([0.25, 0.75])
    x = next(iter(trained.equal.data.test))[0].cpu()
    expected = _average(posterior, [states[n] for n in names], [0.25, 0.75], x)
    assert torch.allclose(posterior.predict(x).double(), expected, atol=1e-6)
    assert [w for _, w in posterior] == posterior.weights


# ----------------------------------------------------------------------------------------------------- refusals
def test_a_run_dir_that_is_not_a_finished_run_is_refused_in_one_line(trained, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    stopped = tmp_path / "stopped"
    shutil.copytree(trained.equal.run_dir, stopped)
    (stopped / "metrics.json").unlink()
    cases = {tmp_path / "nowhere": "it does not exist", tmp_path / "file": "it is a file",
             tmp_path / "empty": "it has no .hydra/config.yaml",
             stopped: "a finished run directory of train.py (with metrics.json): it has none: the run has not "
                      "finished (the same train.py command resumes it from its checkpoint)"}
    for run_dir, why in cases.items():
        with pytest.raises(ConfigError) as refused:
            csg.Posterior.load(run_dir)
        _one_line(refused.value, f"run_dir='{run_dir}' is not allowed: ", why)
    damaged = tmp_path / "damaged"
    shutil.copytree(trained.equal.run_dir, damaged)
    sample = damaged / "samples" / trained.equal.names[0]
    sample.write_bytes(sample.read_bytes()[:1000])
    with pytest.raises(ConfigError) as refused:
        csg.Posterior.load(damaged)
    _one_line(refused.value, f"samples='{sample}' is not allowed", "truncated")
    with pytest.raises(ConfigError) as refused:
        csg.Posterior.load(trained.equal.run_dir, device="tpu:0")
    _one_line(refused.value, "device='tpu:0' is not allowed")


def test_importing_csg_stays_light():
    code = ("import sys, csg; heavy = [m for m in ('hydra', 'torch', 'csg.launch.api', 'csg.posterior') if m in sys.modules]; "
            "assert not heavy, heavy; assert csg.Posterior.__name__ == 'Posterior' and callable(csg.train); "
            "from csg import Posterior, train; print('ok')")
    process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert process.returncode == 0 and process.stdout.strip() == "ok", process.stderr


def test_a_target_in_the_callers_own_module_trains_in_this_process(tmp_path, monkeypatch):
    # a module that only this process can import (train.py in a subprocess would not find it without PYTHONPATH)
    (tmp_path / "user_nets_for_posterior.py").write_text(
        "import math\nfrom torch import nn\n\n\n"
        "def flat_net(num_classes, input_shape, hidden=16):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),\n"
        "                         nn.Linear(hidden, num_classes))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    posterior = csg.train([*SMALL, "model=custom", "model._target_=user_nets_for_posterior.flat_net",
                           f"hydra.run.dir={tmp_path / 'run'}"])
    assert posterior.model[1].out_features == 16 and posterior._data is None  # built from the target, no data read
    saved = _metrics(posterior)["ensemble"]
    assert posterior.evaluate() == pytest.approx(saved, abs=1e-9)


# The block of docs/posterior.md ("Using the posterior in Python") after this marker, run as written.
SNIPPET_MARKER = "<!-- posterior snippet (tests/posterior/test_posterior.py runs this block as written) -->"


def test_the_documented_snippet_runs_as_written(tmp_path, monkeypatch, capsys):
    page = (ROOT / "docs" / "posterior.md").read_text()
    assert SNIPPET_MARKER in page, "docs/posterior.md lost the snippet's marker"
    snippet = page.split(SNIPPET_MARKER, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "csg.train(" in snippet and "csg.Posterior.load(" in snippet
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(snippet, "docs/posterior.md", "exec"), scope)
    posterior, probs, everything = scope["posterior"], scope["probs"], scope["everything"]
    assert isinstance(posterior, csg.Posterior) and len(posterior) == 2
    assert posterior.run_dir.parent.parent == tmp_path / "runs"
    assert probs.shape == (len(scope["x"]), 10) and everything.shape == (200, 10)
    assert torch.allclose(everything.sum(1), torch.ones(200, device=everything.device), atol=1e-5)
    printed = capsys.readouterr().out
    assert str(_metrics(posterior)["ensemble"]) in printed and "accuracy" in printed
