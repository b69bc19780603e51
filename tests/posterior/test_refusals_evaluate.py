"""Bad input to scripts/evaluate_run.py and to the report-only driver: one `error:` line, a non-zero exit, no file
changed (issue 31). One tiny finished run serves the whole module; most refusals are checked in-process, and the
command line once per script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from csg.engine.samples import SampleStore
from csg.errors import ConfigError
from csg.posterior.evaluate import evaluate_run
from tests.conftest import ROOT, train

EVALUATE = ROOT / "scripts" / "evaluate_run.py"
REPRODUCE = ROOT / "scripts" / "reproduce.py"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished train.py run: MLP 784-16-10 on the shipped digits, 4 epochs, 2 cycles, one sample each."""
    root = tmp_path_factory.mktemp("finished")
    process = train(["trainer.epochs=4", "sampler.cycles=2", "sampler.explore=0.5", "sampler.samples_per_cycle=1",
                     "model.hidden=[16]", "logger=none", "trainer.device=cpu"], root / "run", root)
    assert process.returncode == 0, process.stderr
    assert len(SampleStore(root / "run" / "samples")) == 2
    return root / "run"


@pytest.fixture
def run(finished_run, tmp_path) -> Path:
    """A copy of the finished run for one test to damage."""
    return Path(shutil.copytree(finished_run, tmp_path / "run"))


def _state(directory: Path) -> dict[str, tuple[int, bytes] | None]:
    """Every path below ``directory`` with (mtime, bytes) of its files: what a refusal must leave as it was."""
    if not directory.exists():
        return {}
    return {str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes()) if p.is_file() else None
            for p in sorted(directory.rglob("*"))}


def _refused(run_dir: Path, overrides: list[str], *fragments: str) -> ConfigError:
    """evaluate_run refuses with a one-line ConfigError holding ``fragments``, and changes nothing."""
    before = _state(run_dir)
    with pytest.raises(ConfigError) as refused:
        evaluate_run(run_dir, overrides)
    message = str(refused.value)
    assert "\n" not in message and "Traceback" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert _state(run_dir) == before
    return refused.value


def _one_line(script: Path, args: list, *fragments: str, watch: Path | None = None, capsys=None,
              monkeypatch=None) -> None:
    """``script args`` fails with exit status 2 and exactly one line on stderr, `error: ...` holding ``fragments``,
    and leaves ``watch`` as it was. In-process (the script's own main, its output captured) when ``capsys`` is
    given; else as a child process, exactly as typed."""
    before = _state(watch) if watch is not None else None
    if capsys is None:
        process = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                                 timeout=120, cwd=ROOT)
        code, stderr = process.returncode, process.stderr
    else:
        capsys.readouterr()
        module = _script(script)
        with pytest.raises(SystemExit) as exited:
            if script == EVALUATE:
                module.main([str(a) for a in args])
            else:  # the driver reads sys.argv and works from the repository
                monkeypatch.setattr(sys, "argv", [str(script), *map(str, args)])
                monkeypatch.chdir(ROOT)
                module.run_or_exit(module.main)
        code, stderr = exited.value.code, capsys.readouterr().err
    lines = stderr.strip().splitlines()
    assert code == 2 and "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    if watch is not None:
        assert _state(watch) == before


def _script(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_overrides_that_are_no_key_of_the_saved_config_are_refused(run, capsys):
    error = _refused(run, ["evaluation.cycle_weight=harmonic"], "evaluation.cycle_weight=",
                     "did you mean evaluation.cycle_weights?", "may be overridden: ")
    assert error.key == "evaluation.cycle_weight"
    _refused(run, ["data.root=/elsewhere"], "data.root=", "which has no data.root")  # mnist5k ships in a package
    _refused(run, ["+evaluation.extra=1"], "+evaluation.extra=")
    _refused(run, ["evaluation=equal"], "evaluation=", "not a section")
    _refused(run, ["evaluation.cycle_weights"], "override=", "key=value")  # not key=value
    _refused(run, ["=harmonic"], "override=", "key=value")
    _one_line(EVALUATE, [run, "evaluation.cycle_weight=harmonic"], "evaluation.cycle_weight=", watch=run, capsys=capsys)


def test_overrides_that_would_evaluate_the_samples_as_something_else_are_refused(run):
    for override, saved in (("data=cifar10", "data=mnist5k"), ("data.name=cifar10", "data.name=mnist5k"),
                            ("model.hidden=[200]", "model.hidden=[16]"), ("sampler=sgld", "sampler=csghmc"),
                            ("sampler.temperature=0.5", "sampler.temperature="), ("seed=3", "seed=0"),
                            ("trainer.epochs=200", "trainer.epochs=4"), ("data.batch_size=32", "data.batch_size=")):
        error = _refused(run, [override], f"{override.split('=')[0]}=", "fixed by the run", saved,
                         "evaluation.cycle_weights, evaluation.ece_bins", "ood=<")
        assert error.key == override.split("=")[0]
    _refused(run, ["ood.name=notmnist"], "ood.name=", "ood=<name>")  # the OOD set is a group choice
    _refused(run, ["evaluation.cycle_weights=harmonic", "seed=1"], "seed=")  # a good key does not let a bad one by
    # as typed: a child process
    _one_line(EVALUATE, [run, "data=cifar10"], "data='cifar10' is not allowed: fixed by the run", watch=run)


def test_bad_values_of_the_keys_that_may_be_overridden_are_refused(run):
    _refused(run, ["evaluation.cycle_weights=harmonc"], "evaluation.cycle_weights=", "equal, harmonic")
    _refused(run, ["evaluation.cycle_weights="], "evaluation.cycle_weights=", "a value")
    _refused(run, ["evaluation.ece_bins=0"], "evaluation.ece_bins=", "positive integer")
    _refused(run, ["trainer.device=tpu"], "trainer.device=", "cpu")
    _refused(run, ["trainer.device=${seed}"], "trainer.device=", "not an interpolation")
    _refused(run, ["data.eval_batch_size=many"], "data.eval_batch_size=", "positive integer")
    _refused(run, ["ood=nowhere"], "ood='nowhere'", "notmnist")
    _refused(run, ["ood=notmnist", "ood.root=/nonexistent", "ood.download=false"], "ood.root=", "/nonexistent")


def test_the_overrides_that_are_allowed_re_evaluate_the_same_samples(run, tmp_path):
    from csg.data.notmnist import render_letters

    render_letters(tmp_path / "letters", per_letter=5)
    equal = json.loads((run / "metrics.json").read_text())
    # ood.root before ood=<name> on the command line: the group is chosen first
    metrics = evaluate_run(run, [f"ood.root={tmp_path / 'letters'}", "ood=notmnist", "evaluation.cycle_weights=harmonic",
                                 "evaluation.ece_bins=10", "trainer.device=cpu", "trainer.precision=32",
                                 "data.eval_batch_size=250", "data.num_workers=0", "data.device_resident=false"])
    assert metrics["cycle_weights"] == "harmonic" and metrics["ood"]["name"] == "notmnist"
    assert [s["file"] for s in metrics["per_sample"]] == [s["file"] for s in equal["per_sample"]]
    for ours, theirs in zip(metrics["per_sample"], equal["per_sample"]):  # same samples, same test set
        assert ours["test_error_pct"] == pytest.approx(theirs["test_error_pct"])
    assert json.loads((run / "evaluation_harmonic.json").read_text())["cycle_weights"] == "harmonic"


def test_a_path_that_is_no_run_directory_is_refused(run, tmp_path, capsys):
    _refused(tmp_path / "nowhere", [], "run_dir=", "does not exist")
    (tmp_path / "file.txt").write_text("not a run")
    _refused(tmp_path / "file.txt", [], "run_dir=", "a file, not a directory")
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", [], "run_dir=", "no .hydra/config.yaml")
    _refused(run / "samples", [], "run_dir=", "no .hydra/config.yaml")  # a folder inside a run
    _one_line(EVALUATE, [tmp_path / "file.txt"], "run_dir=", "a file", watch=tmp_path, capsys=capsys)
    _one_line(EVALUATE, [], "run_dir=None", "RUN_DIR", capsys=capsys)  # no argument at all
    _one_line(EVALUATE, [run, "--cycle-weights=harmonic"], "--cycle-weights=", "KEY=VALUE", capsys=capsys)


def test_a_broken_saved_config_is_refused_naming_it(run, capsys):
    config = run / ".hydra" / "config.yaml"
    good = config.read_text()
    broken = {
        "data: [mnist5k\n": "is not YAML",                                  # not YAML
        "- data\n- model\n": "not a train.py config (a ListConfig",         # YAML, not a mapping
        "data:\n  name: mnist5k\n": "not a train.py config (no model, sampler",  # keys missing
        good.replace("seed: 0", "seed: -1"): "fails train.py's checks (seed=-1",   # a value train.py refuses
        good.replace("lr0: ${data.recipe.lr0}", "lr0: ${data.recipe.nothing}"): "InterpolationKeyError",
    }
    for text, fragment in broken.items():
        config.write_text(text)
        _refused(run, [], "run_dir=", ".hydra/config.yaml", fragment)
    config.write_bytes(bytes(range(256)) * 4)
    _refused(run, [], ".hydra/config.yaml", "is not text")
    _one_line(EVALUATE, [run], "run_dir=", ".hydra/config.yaml is not text", watch=run, capsys=capsys)


def test_damaged_sample_files_are_refused_naming_the_file(run, tmp_path, capsys):
    store = SampleStore(run / "samples")
    first = store.paths()[0]
    intact = first.read_bytes()
    torch.save(torch.zeros(3), tmp_path / "tensor.pt")
    torch.save({"state_dict": {}, "cycle": 0}, tmp_path / "record.pt")
    torch.save({"state_dict": {"w": torch.zeros(2)}, "index": 0, "cycle": 0, "epoch": 0, "extra": object},
               tmp_path / "pickled.pt")  # a class in the record: not unpickled with weights_only=True
    damaged = {
        intact[:1000]: "it is truncated",
        b"": "it is empty",
        b"hello, not a sample\n": "not a file of torch.save",
        (tmp_path / "tensor.pt").read_bytes(): "it holds a Tensor",
        (tmp_path / "record.pt").read_bytes(): "without index, epoch",
        (tmp_path / "pickled.pt").read_bytes(): "not unpickled",
    }
    for content, fragment in damaged.items():
        first.write_bytes(content)
        error = _refused(run, [], f"samples='{first}'", fragment)
        assert error.key == "samples"
        with pytest.raises(ConfigError, match=fragment):  # the check train.py's resume calls
            store.verify()
    _one_line(EVALUATE, [run], f"samples='{first}'", "not unpickled", watch=run, capsys=capsys)
    first.write_bytes(intact)
    store.verify()
    store.verify(expected=[p.name for p in store.paths()])
    with pytest.raises(ConfigError) as missing:
        store.verify(expected=["sample_0009_cycle03_epoch0099.pt"])
    assert missing.value.key == "samples" and "sample_0009_cycle03_epoch0099.pt" in str(missing.value)
    assert "missing" in str(missing.value)
    first.unlink()
    first.mkdir()  # a folder where the manifest records a sample (a stray folder elsewhere joins nothing)
    _refused(run, [], first.name, "not a file")


def _replace_first_sample(run: Path, model) -> Path:
    """Save ``model`` as the run's first sample, its manifest and metrics.json's record of it agreeing."""
    store = SampleStore(run / "samples")
    path = store.save(model, index=0, cycle=0, epoch=0)
    metrics = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**metrics, "manifests": {"samples/manifest.json":
                                                                           store.manifest_sha256()}}))
    return path


def test_a_sample_of_another_model_is_refused(run):
    from csg.models import create_model

    other = _replace_first_sample(run, create_model("mlp", num_classes=10, hidden=[8]))
    _refused(run, [], f"samples='{other}'", "does not fit", "shape [8, 784], the model's [16, 784]")
    other = _replace_first_sample(run, create_model("mlp", num_classes=10, hidden=[16, 16]))
    _refused(run, [], f"samples='{other}'", "does not fit", "unexpected keys")


def test_a_run_without_samples_is_refused(run):
    for path in SampleStore(run / "samples").paths():
        path.unlink()
    _refused(run, [], "sample_0000_cycle00_epoch0001.pt", "a sample file this run wrote: it is missing")
    (run / "samples" / "manifest.json").write_text('{"format": 1, "chain": 0, "planned": null, "samples": []}')
    _refused(run, [], f"samples='{run / 'samples'}'", "its manifest records none")
    shutil.rmtree(run / "samples")
    _refused(run, [], "samples=", "it does not exist")


def test_a_run_directory_where_the_result_cannot_be_written_is_refused(run, monkeypatch):
    (run / "evaluation_harmonic.json").mkdir()
    _refused(run, ["evaluation.cycle_weights=harmonic"], "run_dir=", "evaluation_harmonic.json is a directory")
    os.chmod(run, 0o555)
    try:
        if os.geteuid() == 0:  # root writes anywhere: say what a read-only directory says to anyone else
            real = os.access
            monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: (
                False if Path(path) == run and mode & os.W_OK else real(path, mode, *a, **k)))
        _refused(run, [], "run_dir=", "evaluation_equal.json can be written", "read-only")
    finally:
        os.chmod(run, 0o755)


def _results_state() -> dict:
    return _state(ROOT / "results")


def test_report_only_without_finished_runs_exits_non_zero_and_writes_nothing(tmp_path, finished_run, capsys,
                                                                            monkeypatch):
    """The driver's check, as typed (a child process), and every report's own, in-process."""
    from studies.experiments import fig3, fig4, table5, table_report, tables

    results = _results_state()
    out = tmp_path / "out"
    _one_line(REPRODUCE, ["table1", "--scale", "smoke", "--report-only", "--runs", "/does/not/exist", "--out", out],
              "--runs='/does/not/exist'", "does not exist")
    unfinished = tmp_path / "unfinished" / "run"
    shutil.copytree(finished_run / ".hydra", unfinished / ".hydra")  # a run that never wrote metrics.json
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    reports = {
        **{name: (lambda runs, name=name: table_report.report(name, runs, out, "smoke", epochs=4)) for name in tables.TABLES},
        "fig3": lambda runs: fig3.report(runs, out, "smoke", epochs=4),
        "fig4": lambda runs: fig4.report(runs, out),
        "table5": lambda runs: table5.report(runs, out),
    }
    for name, report in reports.items():
        for runs, fragment in ((tmp_path / "nowhere", "does not exist"), (tmp_path / "file", "a file"),
                               (tmp_path / "empty", "no run directory"), (unfinished.parent, "has finished")):
            with pytest.raises(ConfigError) as refused:
                report(runs)
            assert refused.value.key == "--runs" and fragment in str(refused.value), (name, str(refused.value))
    # finished runs, but none of the report's own: the MLP run with no OOD set is no run of Table 5 or Figure 4
    for name in ("fig4", "table5"):
        with pytest.raises(ConfigError, match="none of its 1 finished runs"):
            reports[name](finished_run.parent)
    # the driver's own input, refused before it reads the runs: seeds, preset, overrides of the preset
    for args, fragment in ((["--seeds", "0,one"], "--seeds='0,one'"), (["--preset", "table9"], "--preset='table9'"),
                           (["trainer.epoch=4"], "overrides='trainer.epoch=4'")):
        _one_line(REPRODUCE, ["table1", "--scale", "smoke", "--report-only", "--runs", finished_run.parent, "--out",
                              out, *args], fragment, capsys=capsys, monkeypatch=monkeypatch)
    assert not out.exists() and _results_state() == results


def test_damaged_run_files_in_a_report_folder_are_refused_naming_them(tmp_path, finished_run, capsys, monkeypatch):
    from studies.experiments import table_report

    runs = tmp_path / "runs"
    run = Path(shutil.copytree(finished_run, runs / "run", ignore=shutil.ignore_patterns("*.pt")))
    out = tmp_path / "out"
    for name, content, fragment in (("metrics.json", "{not json", "metrics.json cannot be read as JSON"),
                                    ("metrics.json", "[1, 2]", "metrics.json is not a JSON object"),
                                    (".hydra/config.yaml", "data: [", ".hydra/config.yaml cannot be read as YAML")):
        saved = (run / name).read_text()
        (run / name).write_text(content)
        with pytest.raises(ConfigError) as refused:
            table_report.report("table1", runs, out, "smoke", epochs=4)
        assert refused.value.key == "run_dir" and str(run) in str(refused.value) and fragment in str(refused.value)
        (run / name).write_text(saved)
    (run / "metrics.json").write_text("{not json")
    _one_line(REPRODUCE, ["fig3", "--scale", "smoke", "--report-only", "--runs", runs, "--out", out],
              "metrics.json cannot be read as JSON", capsys=capsys, monkeypatch=monkeypatch)
    assert not out.exists()


def test_a_manifest_of_another_format_version_is_refused_naming_it(run):
    """A manifest another csg wrote (format 2) is refused in one line, not read as this version's (issue 74); one
    without a format (a run from before formats) is read as format 1."""
    manifest = run / "samples" / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "format": 2}))
    _refused(run, [], "manifest.json", "its format is 2, and this csg reads format 1")
    manifest.write_text(json.dumps({key: value for key, value in data.items() if key != "format"}))
    assert SampleStore(run / "samples").manifest()["samples"] == data["samples"]
