"""The posterior as a toolkit: members' predictions, uncertainty, diagnostics across chains, one file, ArviZ, and
comparing runs; on built-in runs (the documented snippet's) and on a user's own ``_target_`` run, on the CPU."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import csg
from csg.errors import ConfigError, DamagedFileError
from csg.evaluation.uncertainty import member_uncertainty
from tests.conftest import ROOT, doc_blocks

TOOLKIT_MARKER = "<!-- toolkit snippet (tests/posterior/test_toolkit.py runs this block as written) -->"
TOOLKIT_SECTION = "Uncertainty, diagnostics across chains, one file, comparing runs"
# a user's own data set and model (tests/own_components.py), two chains of four samples, harmonic weights
OWN = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "data.eval_batch_size=30",
       "model=custom", "model._target_=tests.own_components.tiny_net", "sampler.chains=2", "trainer.epochs=4",
       "sampler.cycles=1", "sampler.explore=0", "sampler.samples_per_cycle=4", "evaluation.cycle_weights=harmonic",
       "logger=none", "trainer.progress=false", "trainer.device=cpu"]


@pytest.fixture(scope="module")
def documented(tmp_path_factory):
    """The toolkit snippet of docs/posterior.md run as written, in a fresh working directory: four runs of two
    chains (csghmc and csgld, seeds 0 and 1); returns the folder, the snippet's variables and what it printed."""
    page = (ROOT / "docs" / "posterior.md").read_text()
    assert TOOLKIT_MARKER in page, "docs/posterior.md lost the toolkit snippet's marker"
    snippet = page.split(TOOLKIT_MARKER, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    cwd = tmp_path_factory.mktemp("documented")
    previous, printed, scope = os.getcwd(), io.StringIO(), {}
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(snippet, "docs/posterior.md", "exec"), scope)
    finally:
        os.chdir(previous)
    return SimpleNamespace(cwd=cwd, scope=scope, printed=printed.getvalue(), posterior=scope["posterior"])


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    """A run of the user's own components (``_target_``), trained by csg.train in this process."""
    return csg.train([*OWN, f"hydra.run.dir={tmp_path_factory.mktemp('own') / 'run'}"])


@pytest.fixture(params=["documented", "own"])
def posterior(request):
    return request.getfixturevalue(request.param) if request.param == "own" else request.getfixturevalue(
        "documented").posterior


def _test_batches(posterior) -> list:
    return [(x.cpu(), y.cpu()) for x, y in posterior.data.test]


def test_the_documented_snippet_and_command_run_as_written(documented):
    scope, posterior = documented.scope, documented.posterior
    assert [p.name for p in sorted((documented.cwd / "runs" / "toolkit").iterdir())] == [
        "csghmc_seed0", "csghmc_seed1", "csgld_seed0", "csgld_seed1"]
    assert scope["members"].shape == (8, len(scope["x"]), 10) and posterior.chains == [0] * 4 + [1] * 4
    assert str(posterior.diagnostics()) in documented.printed
    assert isinstance(scope["again"], csg.Posterior) and scope["again"].names == posterior.names
    assert scope["idata"].log_likelihood["y"].dims == ("chain", "draw", "example")
    comparison = scope["comparison"]
    assert len(comparison.runs) == 4 and len(comparison.verdicts) == 4  # csgld vs csghmc on four metrics
    assert "csgld vs csghmc, NLL" in documented.printed
    (block,) = doc_blocks("posterior.md", TOOLKIT_SECTION)
    (words,) = block
    assert words[0] == "csg-compare"  # the command pip installs; the clone's is scripts/compare_runs.py
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_runs.py"), *words[1:]],
                             cwd=documented.cwd, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert "csgld vs csghmc, error %" in process.stdout and "mean ± s.e." in process.stdout
    table = (documented.cwd / "comparison.csv").read_text().splitlines()
    assert table[0] == "data,model,setting,method,seed,error,nll,ece,brier,mi,members,time_s" and len(table) == 1 + 2 * 4
    assert (documented.cwd / "comparison_verdicts.csv").exists()


# ------------------------------------------------------------------------------------- members, uncertainty
def test_predict_members_are_every_members_probabilities_without_gradients(posterior):
    x, _ = _test_batches(posterior)[0]
    with torch.enable_grad():
        members = posterior.predict_members(x)
    assert members.shape == (len(posterior), len(x), posterior.num_classes) and members.dtype == torch.float32
    assert not members.requires_grad and members.grad_fn is None
    with torch.no_grad():
        one_by_one = torch.stack([torch.softmax(model(x), 1) for model, _ in posterior])
    assert torch.allclose(members, one_by_one, atol=1e-6)
    weights = torch.tensor(posterior.weights, dtype=torch.float64)
    assert torch.allclose((weights[:, None, None] * members.double()).sum(0), posterior.predict(x).double(), atol=1e-6)
    with pytest.raises(ConfigError, match="x.shape"):
        posterior.predict_members(x[0])


def test_uncertainty_of_a_batch_and_the_means_evaluate_reports(posterior):
    batches = _test_batches(posterior)
    x, _ = batches[0]
    u = posterior.uncertainty(x)
    expected = member_uncertainty(posterior.predict_members(x), posterior.weights)
    for name in ("predictive_entropy", "expected_entropy", "mutual_information", "disagreement"):
        assert torch.allclose(getattr(u, name), getattr(expected, name)) and getattr(u, name).shape == (len(x),)
    assert bool((u.mutual_information >= 0).all()) and float(u.mutual_information.max()) > 0
    assert torch.allclose(u.predictive_entropy - u.expected_entropy, u.mutual_information, atol=1e-12)
    everything = [posterior.uncertainty(x) for x, _ in batches]
    mean_mi = torch.cat([one.mutual_information for one in everything]).mean().item()
    mean_entropy = torch.cat([one.predictive_entropy for one in everything]).mean().item()
    metrics = posterior.evaluate()
    assert metrics["mutual_information"] == pytest.approx(mean_mi, rel=1e-5, abs=1e-9)
    assert metrics["predictive_entropy"] == pytest.approx(mean_entropy, rel=1e-5)
    saved = posterior.metrics["ensemble"]  # the run's own evaluation wrote them
    assert saved["mutual_information"] == pytest.approx(metrics["mutual_information"], abs=1e-9)
    assert ("top5_error_pct" in metrics) == (posterior.num_classes > 5)  # 10 digits, 3 blobs


def test_evaluate_adds_the_runs_out_of_distribution_set_as_metrics_json_has_it(tmp_path):
    from csg.data.notmnist import render_letters

    render_letters(tmp_path / "letters", per_letter=10)
    posterior = csg.train(["trainer.epochs=2", "sampler.cycles=2", "sampler.samples_per_cycle=1", "model.hidden=[32]",
                           "data.batch_size=1000", "data.test_per_class=20", "logger=none", "trainer.progress=false",
                           "ood=notmnist", f"ood.root={tmp_path / 'letters'}", f"hydra.run.dir={tmp_path / 'run'}"])
    saved = posterior.metrics["ood"]["ensemble"]
    assert saved["mutual_information_in_distribution"] == posterior.metrics["ensemble"]["mutual_information"]
    metrics = posterior.evaluate()
    assert metrics["ood_mutual_information"] == pytest.approx(saved["mutual_information"], abs=1e-9)
    assert metrics["ood_auroc"] == pytest.approx(saved["auroc"]) and metrics["ood_brier"] == pytest.approx(
        saved["brier_ood"])
    assert metrics["ood_entropy_mean"] == pytest.approx(saved["entropy_mean"])
    assert not any(key.startswith("ood_") for key in posterior.evaluate(ood_loader=False))
    letters = [x for x, _ in posterior._run_ood_loader()]
    own = posterior.evaluate(_test_batches(posterior), ood_loader=letters)  # your data and your OOD inputs
    assert own["ood_mutual_information"] == pytest.approx(saved["mutual_information"], abs=1e-9)


# ------------------------------------------------------------------------------------------- diagnostics
def test_the_runs_evaluation_writes_the_diagnostics_that_diagnostics_shows(posterior):
    saved = posterior.metrics["diagnostics"]
    assert saved["chains"] == 2 and saved["draws_per_chain"] == [4, 4] and saved["examples"] == posterior.metrics[
        "num_test"]
    shown = posterior.diagnostics()
    recorded = {"temperatures": posterior.metrics["sampling"], "spread": posterior.metrics["spread"],
                "sampling_check": posterior.metrics["sampling_check"]}
    assert shown.to_dict() == {**saved, **recorded}  # the chains' as saved, the sampler's and members' beside them
    assert str(shown).splitlines()[0] == f"chains: {saved['reading']}" and shown.effective_members > 1
    assert str(shown).splitlines()[1].startswith("sampler: configurational temperature")
    assert shown.verdict in ("agree", "disagree", "no disagreement found") and len(shown.lag1_autocorrelation) == 2
    again = posterior.function_draws().diagnostics()  # computed anew from the members' test predictions
    assert again.verdict == shown.verdict and again.rhat_median == pytest.approx(shown.rhat_median, rel=1e-6)
    on_half = posterior.diagnostics([(x[: len(x) // 2], y[: len(y) // 2]) for x, y in _test_batches(posterior)])
    assert on_half.examples == sum(len(y) // 2 for _, y in _test_batches(posterior))


def test_to_inference_data_has_the_chain_and_draw_dimensions_of_the_run(posterior):
    idata = posterior.to_inference_data()
    draws = posterior.function_draws(probabilities=True)
    n = len(draws.targets)
    log_likelihood = idata.log_likelihood["y"]
    assert log_likelihood.dims == ("chain", "draw", "example") and log_likelihood.shape == (2, 4, n)
    assert idata.posterior_predictive["probs"].shape == (2, 4, n, posterior.num_classes)
    assert log_likelihood.chain.values.tolist() == [0, 1] and log_likelihood.draw.values.tolist() == [0, 1, 2, 3]
    for chain in (0, 1):  # chain k's draws are its members, in order
        rows = [i for i, c in enumerate(posterior.chains) if c == chain]
        assert torch.equal(torch.from_numpy(log_likelihood.sel(chain=chain).values), draws.log_likelihood[rows])
        assert torch.equal(torch.from_numpy(idata.posterior_predictive["label"].sel(chain=chain).values),
                           draws.predicted[rows])
        assert idata.sample_stats["weight"].sel(chain=chain).values.tolist() == [posterior.weights[i] for i in rows]
    assert torch.equal(torch.from_numpy(idata.observed_data["y"].values), draws.targets)
    assert torch.allclose(draws.log_likelihood, draws.probs.gather(2, draws.targets.expand(len(posterior), n)[
        ..., None]).squeeze(2).double().log())
    assert idata.attrs["draws_left_out"] == 0


# ---------------------------------------------------------------------------------------------- one file
@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_save_then_load_without_the_run_directory(documented, tmp_path, suffix):
    original = documented.posterior
    copy = tmp_path / "run"
    shutil.copytree(original.run_dir, copy)
    path = csg.Posterior.load(copy, device="cpu").save(tmp_path / f"posterior{suffix}")
    shutil.rmtree(copy)  # the file alone
    loaded = csg.Posterior.load(path, device="cpu")
    assert loaded.run_dir is None and loaded.source == path and str(path) in repr(loaded)
    assert (loaded.names, loaded.chains, loaded.weights, loaded.weighting) == (
        original.names, original.chains, original.weights, original.weighting)
    assert loaded.metrics == original.metrics and loaded.diagnostics() == original.diagnostics()
    batches = _test_batches(original)
    assert torch.equal(loaded.predict(batches[0][0]), original.predict(batches[0][0]).cpu())
    assert loaded.evaluate(batches) == original.evaluate(batches)
    kept = csg.Posterior.load(path, device="cpu", keep_on_device=True)
    assert torch.equal(kept.predict_members(batches[0][0]), loaded.predict_members(batches[0][0]))
    head = path.read_bytes()[:16]
    if suffix == ".pt":  # tensors and text: loads with weights_only=True, nothing of it runs
        record = torch.load(path, weights_only=True)
        assert json.loads(record["csg"])["names"] == original.names and len(record["states"]) == len(original)
    else:  # safetensors: an 8-byte header length, then the JSON header
        assert head[8:9] == b"{"


def test_a_users_target_model_loads_from_its_file_only_with_trust_code(own, tmp_path):
    path = own.save(tmp_path / "own.safetensors")
    with pytest.raises(ConfigError) as refused:
        csg.Posterior.load(path)
    assert "data._target_='tests.own_components.blobs' is not allowed" in str(refused.value)
    assert "trust_code=True" in str(refused.value) and "\n" not in str(refused.value)
    loaded = csg.Posterior.load(path, device="cpu", trust_code=True)
    x, y = _test_batches(own)[0]
    assert loaded.weighting == "harmonic" and torch.equal(loaded.predict(x), own.predict(x))
    assert loaded.uncertainty(x).mean() == own.uncertainty(x).mean()


def test_a_posterior_file_that_is_not_one_is_refused_in_one_line(documented, tmp_path):
    posterior = documented.posterior
    with pytest.raises(ConfigError, match=r"path='.*posterior.pkl' is not allowed: a file name ending in "
                                          r"\.safetensors"):
        posterior.save(tmp_path / "posterior.pkl")
    good = posterior.save(tmp_path / "good.pt")
    record = torch.load(good, weights_only=True)
    cases = {}
    (tmp_path / "truncated.safetensors").write_bytes(posterior.save(tmp_path / "s.safetensors").read_bytes()[:500])
    cases["truncated.safetensors"] = "neither a torch.save file nor a safetensors file"
    torch.save({"states": record["states"]}, tmp_path / "headless.pt")
    cases["headless.pt"] = "its header is not one of format csg.posterior/1"
    bent = {**record, "states": [dict(state) for state in record["states"]]}
    key = next(iter(bent["states"][0]))
    bent["states"][2][key] = torch.zeros(3)
    torch.save(bent, tmp_path / "bent.pt")
    cases["bent.pt"] = f"member 2 ({posterior.names[2]}) has {key} of shape [3]"
    document = json.loads(record["csg"])
    document["config"] = document["config"].replace("model:\n", "model:\n  _target_: os.system\n", 1)
    torch.save({**record, "csg": json.dumps(document)}, tmp_path / "planted.pt")
    cases["planted.pt"] = "model._target_='os.system' is not allowed"
    for name, weights in (("infinite.pt", [math.inf] + document["weights"][1:]),
                          ("overflowing.pt", [1e308] * len(document["weights"])),
                          ("nan.pt", [math.nan] * len(document["weights"]))):   # json writes NaN and Infinity
        torch.save({**record, "csg": json.dumps({**json.loads(record["csg"]), "weights": weights})}, tmp_path / name)
        cases[name] = "weights are not finite non-negative numbers with a finite positive sum"
    torch.save({**record, "states": [*record["states"], record["states"][0]]}, tmp_path / "extra.pt")
    cases["extra.pt"] = f"it holds more members than the {len(posterior)} its header names"
    from safetensors.torch import load_file, save_file
    from safetensors import safe_open

    with safe_open(str(tmp_path / "s.safetensors"), framework="pt") as handle:
        header = handle.metadata()
    tensors = load_file(tmp_path / "s.safetensors")
    tensors.update({key.replace("member00000/", f"member{len(posterior):05d}/"): value.clone()
                    for key, value in tensors.items() if key.startswith("member00000/")})
    save_file(tensors, tmp_path / "extra.safetensors", metadata=header)
    cases["extra.safetensors"] = f"it holds more members than the {len(posterior)} its header names"
    # issue 74: a header that names a member whose tensors are not in the file was a RuntimeError traceback
    save_file({k: v for k, v in load_file(tmp_path / "s.safetensors").items() if not k.startswith("member00001/")},
              tmp_path / "lacking.safetensors", metadata=header)
    cases["lacking.safetensors"] = f"member 1 ({posterior.names[1]}) holds other tensors than the keys it records"
    torch.save({**record, "states": record["states"][:1]}, tmp_path / "lacking.pt")
    cases["lacking.pt"] = f"member 1 ({posterior.names[1]}) holds other tensors than the keys it records"
    floating = next(k for k, t in record["states"][0].items() if t.is_floating_point())
    poisoned = {**record, "states": [dict(state) for state in record["states"]]}
    poisoned["states"][1][floating] = torch.full_like(poisoned["states"][1][floating], math.nan)
    torch.save(poisoned, tmp_path / "poisoned.pt")
    cases["poisoned.pt"] = f"member 1 ({posterior.names[1]}) holds NaN or inf in {floating}"
    for name, fragment in cases.items():
        with pytest.raises(ConfigError) as refused:
            csg.Posterior.load(tmp_path / name, device="cpu")
        message = str(refused.value)
        assert fragment in message and "\n" not in message, message
        assert name == "planted.pt" or isinstance(refused.value, DamagedFileError)
    with pytest.raises(ConfigError, match="does not exist"):
        csg.Posterior.load(tmp_path / "nowhere.pt")
    from csg.posterior.export import write_posterior

    with pytest.raises(ConfigError, match="finite non-negative numbers") as refused:   # never written
        write_posterior(tmp_path / "never.pt", config="", metrics={}, names=["a", "b"], chains=[0, 0],
                        weights=[math.inf, 1.0], weighting="equal", states=[{}, {}], source="x")
    assert "\n" not in str(refused.value) and not (tmp_path / "never.pt").exists()
    with pytest.raises(ConfigError, match=r"states='member 1' is not allowed: members of finite weights \(its w "
                                          r"holds NaN or inf\)") as refused:
        write_posterior(tmp_path / "never.pt", config="", metrics={}, names=["a", "b"], chains=[0, 0],
                        weights=[1.0, 1.0], weighting="equal", states=[{"w": torch.ones(2)},
                                                                       {"w": torch.tensor([1.0, math.inf])}],
                        source="x")
    assert not (tmp_path / "never.pt").exists()


# ---------------------------------------------------------------------------------------- comparing runs
def _run(root: Path, name: str, method: str, seed: int, error: float, nll: float, *, finished: bool = True,
         data: str = "mnist5k") -> Path:
    """A run directory that holds only what csg.compare reads: its .hydra/config.yaml and metrics.json."""
    run_dir = root / name
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    if finished:
        ensemble = {"test_error_pct": error, "nll": nll, "ece": nll / 10, "brier": nll / 2, "num_samples": 4,
                    "mutual_information": 0.1 * seed}
        (run_dir / "metrics.json").write_text(json.dumps({"method": method, "data": data, "model": "mlp",
                                                          "seed": seed, "ensemble": ensemble,
                                                          "wall_time_s": {"total": 10.0 + seed}}))
    return run_dir


def test_compare_tabulates_runs_by_method_and_gives_paired_verdicts(tmp_path):
    from csg.evaluation.comparison import Paired, compare_paired

    sweep = tmp_path / "multirun"
    nll = {"csghmc": [0.50, 0.52, 0.55], "mine": [0.40, 0.43, 0.44]}
    error = {"csghmc": [10.0, 10.2, 9.9], "mine": [10.1, 10.0, 10.0]}
    for method, values in nll.items():
        for seed, value in enumerate(values):
            _run(sweep / "0", f"{method}{seed}", method, seed, error[method][seed], value)
    _run(sweep / "1", "stopped", "mine", 7, 0, 0, finished=False)
    _run(sweep / "2" / "earlier" / "x", "old", "mine", 0, 0, 0)  # moved aside by a restart: not taken
    comparison = csg.compare(sweep, margins={"error": 5.0})
    assert comparison.runs.method.tolist() == ["csghmc"] * 3 + ["mine"] * 3 and comparison.runs.seed.tolist() == [
        0, 1, 2] * 2
    assert comparison.skipped == [f"{sweep / '1' / 'stopped'}: not finished (no metrics.json)"]
    table = comparison.table()
    mean = table[(table.method == "mine") & (table.seed == "mean")].iloc[0]
    se = table[(table.method == "mine") & (table.seed == "s.e.")].iloc[0]
    assert mean.nll == pytest.approx(sum(nll["mine"]) / 3) and mean.time_s == pytest.approx(11.0)
    assert se.nll == pytest.approx(torch.tensor(nll["mine"]).std().item() / math.sqrt(3))
    expected = compare_paired([Paired(error["mine"], error["csghmc"], margin=5.0),
                               Paired(nll["mine"], nll["csghmc"]),
                               Paired([v / 10 for v in nll["mine"]], [v / 10 for v in nll["csghmc"]]),
                               Paired([v / 2 for v in nll["mine"]], [v / 2 for v in nll["csghmc"]])])
    verdicts = comparison.verdicts
    assert verdicts.metric.tolist() == ["error", "nll", "ece", "brier"] and set(verdicts.baseline) == {"csghmc"}
    assert verdicts.verdict.tolist() == [v.verdict for v in expected]
    assert verdicts.high.tolist() == pytest.approx([v.high for v in expected])
    assert verdicts.verdict.tolist()[1] == "helps" and verdicts.verdict.tolist()[0] == "equivalent"
    text = comparison.format()
    assert "mine vs csghmc, NLL" in text and "mean ± s.e." in text and "margin (error % ±5)" in text
    written = comparison.write(tmp_path / "out" / "table.csv")
    assert [p.name for p in written] == ["table.csv", "table_verdicts.csv"] and all(p.exists() for p in written)
    other = csg.compare([sweep / "0" / "mine0", sweep / "0" / "csghmc0"], baseline="csghmc")
    assert other.runs.method.tolist() == ["mine", "csghmc"] and other.verdicts.n.tolist() == [1] * 4
    assert set(other.verdicts.verdict) == {"inconclusive"}


def test_compare_of_regression_runs_shows_rmse_and_test_ll_and_judges_rmse_and_nll(tmp_path):
    """issue 74: csg-compare of regression runs showed no RMSE or test LL, and nan verdicts on error, ECE, Brier."""
    from csg.evaluation.comparison import Paired, compare_paired

    rmse = {"sgd": [3.1, 3.3, 3.0, 3.2], "csghmc": [2.6, 2.9, 2.7, 2.8]}
    nll = {"sgd": [2.5, 2.6, 2.4, 2.55], "csghmc": [2.3, 2.35, 2.2, 2.3]}
    for method in rmse:
        for seed in range(4):
            run_dir = tmp_path / f"{method}{seed}"
            (run_dir / ".hydra").mkdir(parents=True)
            (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
            ensemble = {"rmse": rmse[method][seed], "nll": nll[method][seed], "log_likelihood": -nll[method][seed],
                        "coverage_95": 0.93, "num_samples": 12}
            (run_dir / "metrics.json").write_text(json.dumps({"method": method, "data": "boston", "model": "mlp",
                                                              "seed": seed, "task": "regression",
                                                              "ensemble": ensemble, "wall_time_s": {"total": 5.0}}))
    comparison = csg.compare(tmp_path, baseline="sgd")
    assert list(comparison.table().columns[5:9]) == ["rmse", "test_ll", "nll", "coverage"]
    assert "error" not in comparison.table().columns
    text = comparison.format()
    assert "RMSE" in text and "test LL" in text and "ECE" not in text and "nan" not in text
    expected = compare_paired([Paired(rmse["csghmc"], rmse["sgd"]), Paired(nll["csghmc"], nll["sgd"])])
    assert comparison.verdicts.metric.tolist() == ["rmse", "nll"]
    assert comparison.verdicts.verdict.tolist() == [v.verdict for v in expected] == ["helps", "helps"]


def test_compare_refuses_in_one_line_what_it_cannot_compare(tmp_path):
    _run(tmp_path / "a", "one", "csghmc", 0, 1.0, 0.5)
    _run(tmp_path / "a", "two", "csghmc", 0, 2.0, 0.6)  # the same method and seed again
    stopped = _run(tmp_path / "b", "stopped", "csghmc", 1, 0, 0, finished=False)
    cases = [((tmp_path / "a",), {}, "one run per method, setting and seed: these are all csghmc on mnist5k with "
                                     "seed 0"),
             ((stopped,), {}, "a finished run directory of train.py: not finished (no metrics.json)"),
             ((tmp_path / "b",), {}, "none has finished (1 have not)"),
             ((tmp_path / "nowhere",), {}, "it does not exist"),
             (([tmp_path / "a" / "one"],), {"margins": {"accuracy": 1.0}}, "margins='accuracy' is not allowed"),
             (([tmp_path / "a" / "one", _run(tmp_path, "c", "mine", 0, 1, 1)],), {"baseline": "nuts"},
              "baseline='nuts' is not allowed: a method of the runs on mnist5k (mlp): csghmc, mine")]
    for args, options, fragment in cases:
        with pytest.raises(ConfigError) as refused:
            csg.compare(*args, **options)
        assert fragment in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    broken = _run(tmp_path / "d", "broken", "csghmc", 0, 1.0, 0.5)
    metrics = json.loads((broken / "metrics.json").read_text())
    for value, said in (("abc", '"abc"'), (True, "true"), ([1], "[1]")):
        metrics["ensemble"]["nll"] = value
        (broken / "metrics.json").write_text(json.dumps(metrics))
        with pytest.raises(ConfigError) as refused:
            csg.compare(broken)
        assert str(refused.value) == (f"run_dir='{broken}' is not allowed: a run directory of train.py: its "
                                      f"metrics.json's ensemble.nll is {said}, not a number")


def _setting(run_dir: Path, hidden: int, epochs: int) -> Path:
    """``run_dir`` as a run of an MLP [hidden] for ``epochs`` epochs: its saved config and metrics.json's cost."""
    config = f"seed: 0\ndata:\n  name: mnist5k\n  num_workers: {hidden}\nmodel:\n  name: mlp\n  hidden: [{hidden}]\n"
    (run_dir / ".hydra" / "config.yaml").write_text(config)  # num_workers differs too: not a setting
    metrics = json.loads((run_dir / "metrics.json").read_text())
    (run_dir / "metrics.json").write_text(json.dumps({**metrics, "cost": {"epochs_all_chains": epochs}}))
    return run_dir


def test_compare_pairs_only_runs_of_one_setting_unless_told_they_differ(tmp_path):
    small = [_setting(_run(tmp_path, f"small_{m}{s}", m, s, 10.0 + s, 0.5), 16, 4)
             for m in ("csghmc", "mine") for s in (0, 1)]
    wide = [_setting(_run(tmp_path, f"wide_{m}{s}", m, s, 9.0 + s, 0.4), 32, 6)
            for m in ("csghmc", "mine") for s in (0, 1)]
    same = csg.compare(small)
    assert set(same.runs.setting) == {""} and len(same.verdicts) == 4
    with pytest.raises(ConfigError) as refused:
        csg.compare([small[0], wide[2]])
    assert str(refused.value) == (
        f"runs='{small[0]}, {wide[2]}' is not allowed: runs of one setting to pair (data, model, part sampled, "
        "evaluation and budget alike): model.hidden is [16] in the first, [32] in the second; pass "
        "different_settings=True (--different-settings) to compare each setting apart")
    apart = csg.compare(tmp_path, different_settings=True)
    settings = ["model.hidden=[16], budget (epochs, all chains)=4", "model.hidden=[32], budget (epochs, all chains)=6"]
    assert apart.runs.setting.tolist() == [settings[0]] * 4 + [settings[1]] * 4
    assert apart.verdicts.setting.tolist() == [settings[0]] * 4 + [settings[1]] * 4  # each setting its own pairs
    assert f"mine vs csghmc [{settings[1]}], NLL" in apart.format()


def test_the_script_prints_and_writes_the_table(tmp_path, monkeypatch, capsys):
    for method in ("csghmc", "mine"):
        for seed in (0, 1):
            _run(tmp_path / "runs", f"{method}{seed}", method, seed, 10.0 + seed, 0.5 - 0.1 * (method == "mine"))
    monkeypatch.chdir(tmp_path)
    script = str(ROOT / "scripts" / "compare_runs.py")
    monkeypatch.setattr(sys, "argv", [script, "runs", "--out", "t.csv", "--margin", "nll=0.01"])
    runpy.run_path(script, run_name="__main__")
    out = capsys.readouterr().out
    assert "mine vs csghmc, NLL" in out and "written: t.csv, t_verdicts.csv" in out
    assert (tmp_path / "t.csv").read_text().count("\n") == 1 + 2 * 4
    for argv, fragment in [(["runs", "--margin", "nll"], "--margin='nll' is not allowed"),
                           ([], "runs=None is not allowed"), (["runs", "--bogus"], "--bogus=True is not allowed")]:
        monkeypatch.setattr(sys, "argv", [script, *argv])
        with pytest.raises(SystemExit) as ended:
            runpy.run_path(script, run_name="__main__")
        assert ended.value.code == 2 and fragment in capsys.readouterr().err
