"""Loading a run directory is data-only by default (issue 43): csg.Posterior.load, Posterior.evaluate and
scripts/evaluate_run.py build only csg's own components, read the run's data only from outside it and never
unpickle them, read its YAML within limits and open no special file; trust_code=True / --trust-code opts in.
Every refusal is one line and runs nothing (a marker file that must never appear). And the Posterior's input
checks: shape, dtype, device of x, and labels in range, one line each."""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

import csg
from csg.errors import ConfigError
from csg.posterior.evaluate import evaluate_run
from tests.conftest import ROOT

EVALUATE = ROOT / "scripts" / "evaluate_run.py"
SMALL = ["trainer.epochs=2", "sampler.cycles=2", "sampler.samples_per_cycle=1", "data.batch_size=500",
         "data.test_per_class=20", "logger=none", "trainer.progress=false", "trainer.device=cpu"]
OWN = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "data.eval_batch_size=30",
       "model=custom", "model._target_=tests.own_components.tiny_net", "trainer.epochs=6", "sampler.cycles=2",
       "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false", "trainer.device=cpu"]
OPT_IN = "pass trust_code=True / --trust-code if you trust this run directory"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs made in this process: csg's own MLP on the shipped digits, and a user's own data set
    and model (tests/own_components.py) named by _target_ on the user's own command line."""
    base = tmp_path_factory.mktemp("trust")
    plain = csg.train([*SMALL, f"hydra.run.dir={base / 'plain'}"])
    own = csg.train([*OWN, f"hydra.run.dir={base / 'own'}"])
    return SimpleNamespace(plain=plain.run_dir, own=own.run_dir, posterior=plain)


@pytest.fixture
def run(runs, tmp_path) -> Path:
    """A copy of the plain run for one test to plant things in."""
    return Path(shutil.copytree(runs.plain, tmp_path / "run"))


def _plant(run_dir: Path, **sections) -> None:
    """Replace whole sections (``model={...}``) or keys (``data__root=...``) of the run's saved config."""
    path = run_dir / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(path)
    for key, value in sections.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, merge=False)
    OmegaConf.save(cfg, path)


def _state(directory: Path) -> dict:
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes()) if p.is_file() else None
            for p in sorted(directory.rglob("*")) if not p.is_fifo()}


def _one_line(error: BaseException, *fragments: str) -> str:
    message = str(error)
    assert "\n" not in message and "Traceback" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def _refused_load(run_dir: Path, *fragments: str, **options) -> str:
    before = _state(run_dir)
    with pytest.raises(ConfigError) as refused:
        csg.Posterior.load(run_dir, device="cpu", **options)
    assert _state(run_dir) == before
    return _one_line(refused.value, *fragments)


def _script(args: list, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith(("WANDB_", "HYDRA_"))}
    return subprocess.run([sys.executable, str(EVALUATE), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _script_refused(args: list, cwd: Path, *fragments: str) -> str:
    process = _script(args, cwd)
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert process.returncode == 2 and len(lines) == 1, process.stderr
    assert "Traceback" not in process.stderr + process.stdout
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------------ _target_: nothing is called
@pytest.mark.timeout(120)
def test_a_planted_model_target_runs_nothing_in_posterior_load_or_evaluate_run(run, tmp_path):
    marker = tmp_path / "pwned"
    _plant(run, model={"name": "custom", "_target_": "os.system", "command": f"touch {marker}"})
    _refused_load(run, "model._target_='os.system' is not allowed", "read as data", OPT_IN)
    before = _state(run)
    _script_refused([run], tmp_path, "error: model._target_='os.system' is not allowed", OPT_IN)
    assert _state(run) == before and not marker.exists()


@pytest.mark.timeout(60)
def test_a_planted_data_target_or_a_nested_one_anywhere_is_refused_at_load(run, tmp_path):
    marker = tmp_path / "pwned"
    good = (run / ".hydra" / "config.yaml").read_text()
    _plant(run, data={"name": "custom", "_target_": "os.system", "command": f"touch {marker}", "batch_size": 500,
                      "eval_batch_size": 500, "num_workers": 0})
    _refused_load(run, "data._target_='os.system' is not allowed", OPT_IN)  # it used to run at evaluate()
    for key, value in [("ood", {"name": "none", "extra": [{"_target_": "os.system", "command": f"touch {marker}"}]}),
                       ("sampler__optimizer", {"_target_": "builtins.exec", "source": "open('x','w')"}),
                       ("trainer__callbacks", {"cb": {"_target_": "subprocess.call"}})]:
        (run / ".hydra" / "config.yaml").write_text(good)
        _plant(run, **{key: value})
        target = {"ood": "ood.extra.0._target_", "sampler__optimizer": "sampler.optimizer._target_",
                  "trainer__callbacks": "trainer.callbacks.cb._target_"}[key]
        _refused_load(run, f"{target}=", OPT_IN)
        with pytest.raises(ConfigError, match=f"{target}="):
            evaluate_run(run, [])
    assert not marker.exists()


@pytest.mark.timeout(60)
def test_an_interpolation_of_a_resolver_that_runs_code_is_refused(run, tmp_path):
    marker = tmp_path / "pwned"
    OmegaConf.register_new_resolver("test_eval", eval, replace=True)  # as a notebook might have registered `eval`
    try:
        _plant(run, data__name=f"${{test_eval:'open(\"{marker}\", \"w\").close() or \"mnist5k\"'}}")
        _refused_load(run, "data.name=", "resolvers", "not test_eval", OPT_IN)
        assert not marker.exists()
    finally:
        OmegaConf.clear_resolver("test_eval")


@pytest.mark.timeout(120)
def test_a_module_shipped_in_the_run_directory_is_never_imported_from_its_folder(run, tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    (run / "payload.py").write_text(f"open({str(marker)!r}, 'w').close()\nx = object\n")
    _plant(run, sampler={"name": "mine", "optimizer": {"_target_": "payload.x"}, "lr0": 0.1, "cycles": 2,
                         "explore": 0.5, "temperature": 1.0, "samples_per_cycle": 1, "weight_decay": 0.0,
                         "schedule": "cyclical", "chains": 1})
    # evaluated from inside the run directory, as the issue found it: refused, not imported
    _script_refused(["."], run, "sampler.optimizer._target_='payload.x' is not allowed", OPT_IN)
    monkeypatch.chdir(run)
    _refused_load(Path("."), "sampler.optimizer._target_='payload.x' is not allowed", OPT_IN)
    # even with trust_code the current folder is not put on sys.path for a run's targets
    assert str(run) not in sys.path and "" not in sys.path
    with pytest.raises(ConfigError, match="No module named 'payload'"):
        csg.Posterior.load(".", device="cpu", trust_code=True)
    with pytest.raises(ConfigError, match="No module named 'payload'"):
        evaluate_run(".", [], trust_code=True)
    assert str(run) not in sys.path and not marker.exists() and "payload" not in sys.modules


@pytest.mark.timeout(120)
def test_a_users_own_run_loads_with_trust_code_and_is_refused_without(runs, tmp_path, capsys):
    own = Path(shutil.copytree(runs.own, tmp_path / "own"))
    _refused_load(own, "data._target_='tests.own_components.blobs' is not allowed", OPT_IN)
    posterior = csg.Posterior.load(own, device="cpu", trust_code=True)
    saved = json.loads((own / "metrics.json").read_text())["ensemble"]
    assert posterior.evaluate() == pytest.approx(saved, abs=1e-9)
    with pytest.raises(ConfigError, match="--trust-code"):
        evaluate_run(own, [])
    script = _module(EVALUATE)  # the script's own main, in this process
    with pytest.raises(SystemExit) as exited:
        script.main([str(own), "evaluation.cycle_weights=equal"])
    assert exited.value.code == 2 and "--trust-code" in capsys.readouterr().err
    script.main([str(own), "--trust-code", "evaluation.cycle_weights=equal"])
    assert "ensemble of 2" in capsys.readouterr().out
    assert json.loads((own / "evaluation_equal.json").read_text())["ensemble"] == pytest.approx(saved, abs=1e-9)


# ------------------------------------------------------------------------------ data: not from the run, no pickle
class _Payload:
    """Unpickling this creates ``marker``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def _pickled_cifar(root: Path, marker: Path) -> Path:
    from csg.data.cifar import write_stand_in

    folder = write_stand_in(root, "cifar10", train=50, test=10)
    for batch in folder.iterdir():
        batch.write_bytes(pickle.dumps(_Payload(marker)))
    return root


@pytest.mark.timeout(60)
def test_a_cifar_root_in_the_run_or_named_by_it_is_never_unpickled(run, tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    _pickled_cifar(run / "data", marker)
    _plant(run, data__name="cifar10", data__root=str(run / "data"), data__download=False)
    posterior = csg.Posterior.load(run, device="cpu")  # the model is built without the data
    with pytest.raises(ConfigError) as refused:
        posterior.evaluate()
    _one_line(refused.value, "data.root=", "a data root outside the run directory", OPT_IN)
    with pytest.raises(ConfigError, match="inside"):
        evaluate_run(run, [])
    elsewhere = _pickled_cifar(tmp_path / "shared", marker)
    _plant(run, data__root=str(elsewhere))
    with pytest.raises(ConfigError) as refused:
        csg.Posterior.load(run, device="cpu").evaluate()
    _one_line(refused.value, "data.name='cifar10' is not allowed", "unpickles CIFAR-10's python-pickle batches",
              "pickle can run code", "data.root=...", OPT_IN)
    with pytest.raises(ConfigError, match="unpickles"):
        evaluate_run(run, [])
    # a root inside the run directory is refused even when the caller names it
    with pytest.raises(ConfigError, match="inside"):
        evaluate_run(run, [f"data.root={run / 'data'}"])
    with pytest.raises(ConfigError, match="^data.root=.* a data root outside the run directory"):
        csg.Posterior.load(run, device="cpu", data_root=run / "data").data
    assert not marker.exists()
    # the caller's own copy (data_root): CIFAR's batches read from it, the run's config as it was
    from csg.data.cifar import write_stand_in

    write_stand_in(tmp_path / "mine", "cifar10", train=50, test=10)
    cifar = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "data" / "cifar10.yaml"))
    _plant(run, data={**cifar, "root": str(elsewhere), "download": False, "eval_batch_size": 4, "num_workers": 0})
    posterior = csg.Posterior.load(run, device="cpu", data_root=tmp_path / "mine")
    x, _ = next(iter(posterior.data.test))
    assert x.shape == (4, 3, 32, 32) and len(posterior.data.test.dataset) == 10
    assert posterior.data_root == str(tmp_path / "mine") and posterior.cfg.data.root == str(elsewhere)
    # harmonic weights read the training data while loading: from the caller's copy too, never the run's root
    import csg.posterior.inputs as inputs

    class Read(Exception):
        pass

    def spy(cfg, *args, shape=None, **kwargs):  # the data build of the load, stopped once its root is known
        if shape is None:
            raise Read(str(cfg.data.root), kwargs.get("given"))
        return build_run(cfg, *args, shape=shape, **kwargs)

    build_run = inputs.build_run
    monkeypatch.setattr(inputs, "build_run", spy)
    _plant(run, evaluation__cycle_weights="harmonic")
    with pytest.raises(Read) as read:
        csg.Posterior.load(run, device="cpu", data_root=tmp_path / "mine")
    assert read.value.args == (str(tmp_path / "mine"), ("data.root",)) and not marker.exists()


@pytest.mark.timeout(30)
def test_check_run_data_refuses_roots_inside_the_run_and_takes_the_callers_own(tmp_path, monkeypatch):
    from csg.checks.saved import check_run_data

    run_dir = tmp_path / "run"
    (run_dir / "data").mkdir(parents=True)
    mnist = OmegaConf.create({"data": {"name": "mnist", "root": "data"}, "ood": {"name": "svhn", "root": "/x"}})
    monkeypatch.chdir(run_dir)  # a relative root, from inside the run directory
    with pytest.raises(ConfigError, match="data.root='data' is not allowed: a data root outside"):
        check_run_data(mnist, run_dir, trust_code=False)
    check_run_data(mnist, run_dir, trust_code=True)
    monkeypatch.chdir(tmp_path)
    check_run_data(mnist, run_dir, trust_code=False)  # tmp_path/data: not the run's
    ood = OmegaConf.create({"data": {"name": "mnist5k"}, "ood": {"name": "svhn", "root": str(run_dir / "data")}})
    with pytest.raises(ConfigError, match="ood.root="):
        check_run_data(ood, run_dir, trust_code=False, ood=True)
    check_run_data(ood, run_dir, trust_code=False)  # no OOD set read
    link = tmp_path / "link"
    link.symlink_to(run_dir / "data")  # a root that leads into the run directory
    with pytest.raises(ConfigError, match="inside"):
        check_run_data(OmegaConf.create({"data": {"name": "mnist", "root": str(link)}}), run_dir, trust_code=False)
    cifar = OmegaConf.create({"data": {"name": "cifar100", "root": str(tmp_path / "mine")}})
    with pytest.raises(ConfigError, match="CIFAR-100"):
        check_run_data(cifar, run_dir, trust_code=False)
    check_run_data(cifar, run_dir, trust_code=False, given=("data.root",))  # the caller's own copy


# --------------------------------------------------------------------------------- YAML limits, special files
@pytest.mark.timeout(30)
def test_a_yaml_alias_bomb_and_a_huge_config_are_refused_at_once(run):
    levels = "abcdefghi"
    bomb = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{name}: &{name} [{','.join([f'*{previous}'] * 9)}]\n" for previous, name in zip(levels, levels[1:]))
    assert len(bomb) < 1100
    config = run / ".hydra" / "config.yaml"
    good = config.read_text()
    config.write_text(good + bomb)
    started = time.monotonic()
    _refused_load(run, "run_dir=", "refused", "expands to more than 100000 YAML nodes")
    with pytest.raises(ConfigError, match="aliases"):
        evaluate_run(run, [])
    assert time.monotonic() - started < 1.0
    config.write_text(good + "padding: '" + "x" * (1 << 20) + "'\n")
    _refused_load(run, "larger than the 1 MiB")
    config.write_text(good + "a: &a [1, 2]\nb: *a\n")  # a few aliases are YAML, and fine
    assert len(csg.Posterior.load(run, device="cpu")) == 2


def test_expanded_nodes_counts_aliases_as_what_they_stand_for():
    from csg.io.trust import expanded_nodes

    assert expanded_nodes("a: 1\nb: [1, 2]\n") == 7  # the mapping, 2 keys, 1, the list and its 2 items
    assert expanded_nodes("a: &x [1, 2, 3]\nb: *x\nc: *x\n") == 1 + 3 + 3 * 4  # mapping, keys, the list 3 times
    assert expanded_nodes("a: &x [1, 2]\nb: &y [*x, *x]\nc: [*y, *y]\n") == 1 + 3 + 3 + (1 + 2 * 3) + (1 + 2 * 7)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", [".hydra/config.yaml", "metrics.json", "sample"])
def test_a_fifo_in_place_of_a_run_file_is_refused_without_opening_it(run, name):
    path = next((run / "samples").glob("sample_*.pt")) if name == "sample" else run / name
    path.unlink()
    os.mkfifo(path)
    message = _refused_load(run, path.name)
    assert "FIFO" in message or "not a file" in message, message
    if name != "metrics.json":  # evaluate_run does not read metrics.json
        with pytest.raises(ConfigError, match=path.name):
            evaluate_run(run, [])


@pytest.mark.timeout(30)
def test_a_fifo_checkpoint_is_refused_without_blocking(tmp_path):
    from csg.engine.checkpoint import read_checkpoint

    os.mkfifo(tmp_path / "checkpoint.pt")
    with pytest.raises(ConfigError) as refused:
        read_checkpoint(tmp_path / "checkpoint.pt")
    _one_line(refused.value, "trainer.checkpoint.resume=True is not allowed", "FIFO", "resume=false")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_resume_from_a_fifo_checkpoint_ends_in_one_line(runs, tmp_path):
    from tests.conftest import train

    run_dir = Path(shutil.copytree(runs.plain, tmp_path / "run"))
    (run_dir / "metrics.json").unlink()  # a run that has not finished: train.py resumes it
    (run_dir / "checkpoint.pt").unlink()
    os.mkfifo(run_dir / "checkpoint.pt")
    process = train(SMALL, run_dir, tmp_path, timeout=150)
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert process.returncode == 2 and len(lines) == 1 and "FIFO" in lines[0], process.stderr


# ------------------------------------------------------------------------------------ the Posterior's inputs
def test_predict_checks_the_shape_dtype_and_device_of_x(runs):
    posterior = runs.posterior  # (1, 28, 28) digits, 10 classes
    cases = [
        (torch.zeros(2, 3), "x.shape=(2, 3) is not allowed: (batch, 1, 28, 28)"),
        (torch.zeros(1, 28, 28), "one example: x.unsqueeze(0)"),
        (torch.zeros(0, 1, 28, 28), "at least one example"),
        (torch.zeros(2, 1, 28, 28, dtype=torch.uint8), "x.dtype='uint8' is not allowed: a floating dtype"),
        (torch.zeros(2, 1, 28, 28, dtype=torch.int64), "x.dtype='int64'"),
        (torch.zeros(2, 1, 28, 28, device="meta"), "x.device='meta' is not allowed: a tensor that can be moved"),
        ([[0.0] * 28] * 28, "x='list' is not allowed: a tensor of inputs"),
        (torch.zeros(3, 1, 28, 28).index_fill_(0, torch.tensor([1]), math.nan),
         "x='a batch with NaN or inf in example 1' is not allowed: finite inputs"),
    ]
    for x, fragment in cases:
        with pytest.raises(ValueError) as refused:
            posterior.predict(x)
        assert isinstance(refused.value, ConfigError)
        _one_line(refused.value, fragment)
    x = torch.randn(3, 1, 28, 28)
    assert torch.allclose(posterior.predict(x.double()), posterior.predict(x))  # float64: to the model's dtype
    with pytest.raises(ConfigError, match=r"loader\[1\].x.shape=\(3, 5\)"):
        posterior.predict_loader([x, torch.zeros(3, 5)])
    with pytest.raises(ConfigError, match="yields at least one batch"):
        posterior.predict_loader([])


def test_evaluate_checks_labels_and_batches_in_one_line(runs):
    posterior = runs.posterior
    x = torch.randn(4, 1, 28, 28)
    good = torch.tensor([0, 1, 2, 9])
    cases = [
        ([(x, torch.tensor([0, 1, 2, 10]))], "loader[0].y=10 is not allowed: 4 integer labels in [0, 10)"),
        ([(x, good), (x, torch.tensor([0, -1, 2, 3]))], "loader[1].y=-1 is not allowed"),
        ([(x, good.float())], "loader[0].y.dtype='float32' is not allowed"),
        ([(x, good[:3])], "loader[0].y.shape=(3,) is not allowed: 4 integer labels"),
        ([(x, good), (torch.full_like(x, math.inf), good)], "loader[1].x='a batch with NaN or inf in example 0' is not "
                                                             "allowed: finite inputs"),
        ([(x, good), (torch.zeros(4, 2), good)], "loader[1].x.shape=(4, 2)"),
        ([x], "loader[0]='Tensor' is not allowed: an (x, y) pair"),
        ([], "loader='list' is not allowed: a loader that yields at least one (x, y) batch"),
    ]
    for loader, fragment in cases:
        with pytest.raises(ValueError) as refused:
            posterior.evaluate(loader)
        _one_line(refused.value, fragment)
    metrics = posterior.evaluate([(x, good), (x, [3, 4, 5, 6])])  # labels as a list: as the tensor of them
    assert metrics["num_samples"] == 2 and 0 <= metrics["test_error_pct"] <= 100
    assert posterior.evaluate(iter([(x, good)])) == posterior.evaluate([(x, good)])  # a one-pass iterator
