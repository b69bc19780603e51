"""A user's own data set, model and sampler through ``_target_`` (data=custom, model=custom, sampler=custom)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir

from csg.errors import ConfigError
from csg.checks import check_command
from tests.conftest import ROOT
from tests.own_components import RecordingSGD

CONFIGS = ROOT / "configs"
DATA = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "data.eval_batch_size=30"]
MODEL = ["model=custom", "model._target_=tests.own_components.tiny_net"]
SHORT = ["trainer.epochs=6", "sampler.cycles=2", "sampler.samples_per_cycle=1", "logger=none", "trainer.progress=false",
         "trainer.device=cpu"]


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _run(tmp_path, *overrides: str, name: str = "run"):
    from csg.launch.run import run

    run_dir = tmp_path / name
    return run(_cfg(*overrides), run_dir), run_dir


def _samples(run_dir):
    return [torch.load(p, weights_only=True)["state_dict"] for p in sorted((run_dir / "samples").glob("*.pt"))]


def test_own_data_and_model_train_like_the_built_in_ones(tmp_path):
    metrics, run_dir = _run(tmp_path, *DATA, *MODEL, "+model.hidden=16", *SHORT)
    # labelled by the user's names (data=custom and model=custom name their _target_'s last part)
    assert (metrics["data"], metrics["model"]) == ("blobs", "tiny_net")
    assert metrics["num_data"] == 120 and metrics["num_test"] == 60
    assert metrics["ensemble"]["num_samples"] == 2 and metrics["ensemble"]["test_error_pct"] < 20  # separable blobs
    assert _samples(run_dir)[0]["0.weight"].shape == (16, 4)  # +model.hidden reached the factory
    again, again_dir = _run(tmp_path, *DATA, *MODEL, "+model.hidden=16", *SHORT, name="again")
    for first, second in zip(_samples(run_dir), _samples(again_dir)):  # batches are a function of the seed
        assert all(torch.equal(first[k], second[k]) for k in first)
    assert again["ensemble"] == metrics["ensemble"]


@pytest.mark.parametrize("in_memory", ["true", "false"])
def test_item_by_item_and_in_memory_serve_the_same_batches(tmp_path, in_memory):
    _, reference = _run(tmp_path, *DATA, *MODEL, *SHORT, name="auto")  # TensorDatasets: served from their tensors
    _, other = _run(tmp_path, *DATA, *MODEL, *SHORT, f"data.in_memory={in_memory}", name=in_memory)
    for first, second in zip(_samples(reference), _samples(other)):
        assert all(torch.allclose(first[k], second[k], atol=1e-6) for k in first)


def test_the_loop_sets_lr_and_temperature_of_a_users_sampler_from_the_schedule(tmp_path):
    from csg.engine.build import build_schedule
    from csg.engine.settings import schedule_settings

    RecordingSGD.seen.clear()
    sampler = ["sampler=custom", "sampler.optimizer._target_=tests.own_components.RecordingSGD",
               "+sampler.optimizer.scale=0.5", "sampler.temperature=0.7"]
    metrics, _ = _run(tmp_path, *DATA, *MODEL, *sampler, *SHORT)
    cfg = _cfg(*DATA, *MODEL, *sampler, *SHORT)
    schedule = build_schedule(schedule_settings(cfg), total_steps=6 * 6)  # 120 examples in batches of 20
    expected = [(schedule.lr(k), 0.7 if schedule.sampling(k) else 0.0) for k in range(36)]
    assert RecordingSGD.seen == expected
    assert metrics["method"] == "RecordingSGD" and metrics["ensemble"]["num_samples"] == 2


def test_num_classes_comes_from_the_labels_or_is_checked_against_them(tmp_path):
    from csg.data import build_data

    built = build_data("custom", batch_size=10, _target_="tests.own_components.blobs", classes=4)
    assert built.num_classes == 4 and built.input_shape == (4,)
    with pytest.raises(ConfigError, match=r"data.num_classes=3 .*labels in \[1, 4\]"):
        build_data("custom", batch_size=10, _target_="tests.own_components.blobs", classes=4, offset=1, num_classes=3)


@pytest.mark.parametrize("flaw, fragment", [
    ("int64", "inputs are finite floating-point tensors; the train set's input tensor holds int64 (convert it, e.g. "
              "x.float(), scaled as you intend)"),
    ("nan", "inputs are finite floating-point tensors; the train set's input tensor holds NaN or inf"),
    ("inf_items", "inputs are finite floating-point tensors; test[3]'s input holds NaN or inf"),
    ("unseen", "a test set whose labels are classes of the training set (train's are in [0, 2]); test[4] has label 7 "
               "(give data.num_classes if the model should have classes that no training item has)"),
])
def test_inputs_and_labels_a_model_cannot_use_are_refused_in_one_line(flaw, fragment):
    from csg.data import build_data

    with pytest.raises(ConfigError) as refused:
        build_data("custom", batch_size=10, _target_="tests.own_components.flawed", flaw=flaw)
    message = str(refused.value)
    assert message.startswith("data._target_='tests.own_components.flawed' is not allowed: ") and "\n" not in message
    assert message.endswith(fragment), message
    if flaw == "unseen":  # a model with room for the class is the user's to ask for
        built = build_data("custom", batch_size=10, _target_="tests.own_components.flawed", flaw=flaw, num_classes=8)
        assert built.num_classes == 8


@pytest.mark.parametrize("overrides, fragment", [
    (["data=custom", "data._target_=no_such_module.load"], "data._target_='no_such_module.load' is not allowed: a "
     "dotted path that imports"),
    (["data=custom", "data._target_=tests.own_components"], "a callable (a class or function); it is a module"),
    (["model=custom", "model._target_=tests.own_components.tiny_nett"], "a dotted path that imports (from the "
     "installed packages or the directory you run in): tests.own_components has no attribute 'tiny_nett' (did you "
     "mean tiny_net?)"),
    (["model=custom", "model._target_=tests.own_componentz.tiny_net"], "tests has no module or attribute "
     "'own_componentz' (did you mean own_components?)"),
    (["data=custom"], "data._target_=None is not allowed: the dotted path of a callable"),
    ([*MODEL[:1], "model._target_=tests.own_components.nope"], "model._target_='tests.own_components.nope'"),
    (["sampler=custom", "sampler.optimizer._target_=torch.optim.nope"], "sampler.optimizer._target_="),
    (["sampler=custom", "+sampler.optimizer.beta=2", "+sampler.foo=1"], "+sampler.foo=1 is not allowed"),
    (["sampler=custom", "sampler.optimizer._target_=torch.optim.Adam"], "torch.optim.Adam takes no num_data and no "
     "temperature; a plain torch optimizer: csg's own are sampler=sgd (SGD), sampler=sgdm"),
    (["+data.foo=1"], "`+` adds keys only under model., hydra., callbacks. and, for data=custom / sampler=custom / likelihood=custom"),
    (["data=custom", "data._target_=tests.own_components.blobs", "data.in_memory=maybe"], "data.in_memory='maybe'"),
])
def test_a_component_that_cannot_be_named_is_refused_in_one_line_before_hydra(overrides, fragment):
    message = check_command([*overrides, *SHORT], CONFIGS)
    assert message is not None and "\n" not in message and fragment in message, message


@pytest.mark.parametrize("overrides, fragment", [
    (["data._target_=tests.own_components.one_dataset"], "returns (train, test), two Datasets; it returned a "
     "TensorDataset"),
    (["data._target_=tests.own_components.float_labels"], "items are (input tensor, integer label); train[0] is "
     "(Tensor, float)"),
    (["model._target_=tests.own_components.not_a_module"], "returns a torch.nn.Module; it returned a dict"),
    (["model._target_=torch.nn.Linear", "+model.in_features=4", "+model.out_features=5"],
     "model._target_='torch.nn.Linear' is not allowed: a model with 3 outputs"),
    (["model._target_=torch.nn.Linear", "+model.in_features=7", "+model.out_features=3"],
     "a model that takes data=custom's inputs of shape (4,)"),
    (["sampler=custom", "sampler.optimizer._target_=torch.optim.SGD"], "a torch.optim.Optimizer that samples: it "
     "takes params, lr, num_data, temperature and weight_decay; torch.optim.SGD takes no num_data and no temperature; "
     "a plain torch optimizer: csg's own are sampler=sgd (SGD), sampler=sgdm (SGD with momentum)"),
    (["sampler=custom", "sampler.optimizer._target_=tests.own_components.NoTemperature"],
     "param groups hold lr and temperature (the loop sets them every iteration); group 0 has no temperature"),
])
def test_a_component_that_does_not_fit_is_refused_in_one_line_before_training(tmp_path, overrides, fragment):
    from csg.launch.run import run

    cfg = _cfg(*DATA, *MODEL, *overrides, *SHORT)
    with pytest.raises(ConfigError) as refused:
        run(cfg, tmp_path / "run")
    assert "\n" not in str(refused.value) and fragment in str(refused.value), str(refused.value)
    assert not (tmp_path / "run").exists()  # refused before the run directory was made


def test_metrics_of_a_users_run_name_its_components(tmp_path):
    metrics, run_dir = _run(tmp_path, *DATA, "data.name=blobs", *MODEL, "model.name=tiny", *SHORT)
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert (saved["data"], saved["model"]) == ("blobs", "tiny") and saved["data_source"] == \
        "custom: tests.own_components.blobs"


def test_a_run_directorys_target_in_the_folder_you_run_in_says_how_to_trust_it(tmp_path, monkeypatch):
    # a run directory's code comes from the Python path only, never the current folder: the error says so
    from csg.components import locate, run_directory_targets

    (tmp_path / "mine_xyz").mkdir()
    (tmp_path / "mine_xyz" / "__init__.py").write_text("def load():\n    return None\n")
    monkeypatch.chdir(tmp_path)
    with run_directory_targets(), pytest.raises(ConfigError) as refused:
        locate("mine_xyz.load", "data._target_")
    assert str(refused.value).endswith("No module named 'mine_xyz' (the folder you run in holds mine_xyz, but a run "
                                       "directory's code is imported from the Python path only: PYTHONPATH=. puts "
                                       "this folder on it)")
    assert "mine_xyz" not in sys.modules


def test_a_user_s_data_at_the_default_step_is_told_its_network_is_still_training(tmp_path):
    # data=custom's recipe step (lr0 0.1) on the blobs: the loss at each cycle's exploration end still falls
    # (0.52, 0.21, 0.14, 0.12), and the end-of-run line says so and names the step
    metrics, _ = _run(tmp_path, *DATA, *MODEL, "trainer.epochs=24", "sampler.cycles=4", "sampler.samples_per_cycle=1",
                      "logger=none", "trainer.progress=false", "trainer.device=cpu")
    assert metrics["sampling_check"] and "the training loss is still falling" in metrics["sampling_check"]
    assert "sampler.lr0" in metrics["sampling_check"].split("still falling")[1]
