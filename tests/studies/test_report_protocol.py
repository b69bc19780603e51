"""Reports refuse foreign runs (issue 43): the committed table only from runs of the table's protocol, else --out
with a header that says why; --seeds values used as seeds; reports read run directories as data."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from csg.errors import ConfigError
from studies.experiments import protocol, registry, tables
from studies.experiments.added import record_added
from studies.experiments.sweeps import expand, expected_runs
from studies.experiments.job import Job
from studies.experiments.registry import TARGETS

ROOT = Path(__file__).resolve().parents[2]
REPRODUCE = ROOT / "scripts" / "reproduce.py"
TABLE1 = tables.TABLES["table1"]


def _committed_results() -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ROOT / "results").rglob("*"))
            if p.is_file()}


_COMPOSED: dict[tuple[str, ...], str] = {}  # overrides less the seed -> the composed config's YAML


def _compose_all(overrides: list[list[str]]):
    """train.py's config of each list of overrides, composed once per list less its seed (the seed set after)."""
    from hydra import compose, initialize_config_dir

    import csg  # noqa: F401  (the config resolvers)

    configs = []
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        for words in overrides:
            rest = tuple(w for w in words if not w.startswith("seed="))
            if rest not in _COMPOSED:
                _COMPOSED[rest] = OmegaConf.to_yaml(compose("config", overrides=list(rest)))
            cfg = OmegaConf.create(_COMPOSED[rest])
            for word in words:
                if word.startswith("seed="):
                    cfg.seed = int(word.split("=", 1)[1])
            configs.append(cfg)
    return configs


def _write_runs(root: Path, preset: str, points: list[dict[str, str]], extra: tuple[str, ...] = ()) -> list[Path]:
    """Finished runs as train.py leaves them: the composed config in .hydra/config.yaml, and a metrics.json."""
    configs = _compose_all([[f"experiment={preset}", *(f"{k}={v}" for k, v in p.items()), *extra] for p in points])
    made = []
    for number, cfg in enumerate(configs):
        run = root / f"{number}_{cfg.sampler.name}_seed{cfg.seed}"
        (run / ".hydra").mkdir(parents=True)
        OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
        shake = (number ** 2 * 7 % 13) / 10  # the methods' differences vary from seed to seed
        metrics = {"ensemble": {"test_error_pct": 5.0 + shake, "nll": 0.2 + shake / 10, "top5_error_pct": 1.0},
                   "schedule": str(cfg.sampler.schedule), "chains": int(cfg.sampler.chains),
                   "epochs": int(cfg.trainer.epochs), "cycles": int(cfg.sampler.cycles), "seed": int(cfg.seed)}
        (run / "metrics.json").write_text(json.dumps(metrics))
        made.append(run)
    return made


def _table1_points(seeds: str | None = None) -> list[dict[str, str]]:
    return expected_runs(expand(TABLE1, "smoke", 80, seeds))


@pytest.fixture
def committed(tmp_path, monkeypatch) -> Path:
    """The committed results folder of every target, moved to a temporary one for the test."""
    folder = tmp_path / "committed"
    monkeypatch.setattr(registry, "default_out", lambda target, scale: folder)
    return folder


def _report_only(runs: Path, out: Path, **flags) -> list[str]:
    job = Job(target="table1", out=out, scale="smoke", report_only=True, runs=runs, **flags)
    TARGETS["table1"].check(job)
    return TARGETS["table1"].make(job)


# --- the runs against the protocol ----------------------------------------------------------------------------------


def test_runs_of_the_protocol_write_the_committed_table(tmp_path, committed):
    runs = tmp_path / "runs"
    _write_runs(runs, "table1_smoke", _table1_points(), extra=("logger=none", "trainer.progress=false",
                                                                "trainer.device=cpu", "data.num_workers=2"))
    check = protocol.check_runs(TABLE1, "smoke", 80, "table1_smoke", registry.load_runs(runs), ROOT / "configs")
    assert not check and check.coverage == []  # where and how a run is computed and logged is not the protocol
    lines = _report_only(runs, committed)
    assert lines[0].startswith("table1: wrote") and not any("not the table's protocol" in line for line in lines)
    text = (committed / "table1.md").read_text()
    assert "Not this table's protocol" not in text and "Missing runs" not in text
    assert pd.read_csv(committed / "table1.csv").query("metric == 'test_error_pct'").seeds.eq(3).all()


def test_an_incomplete_sweep_writes_the_committed_table_and_lists_its_missing_runs(tmp_path, committed):
    """Runs missing from the sweep (still running, failed) are no difference: the table lists them, as before."""
    runs = tmp_path / "runs"
    _write_runs(runs, "table1_smoke", _table1_points("0"))
    lines = _report_only(runs, committed)
    assert sum(line.startswith("missing run:") for line in lines) == 20
    text = (committed / "table1.md").read_text()
    assert "Missing runs (20" in text and "Not this table's protocol" not in text


def test_runs_that_differ_are_refused_for_the_committed_table_and_written_with_out(tmp_path, committed):
    """The issue's data loss: runs of another budget replaced the committed table, labelled as the preset."""
    runs = tmp_path / "runs"
    _write_runs(runs, "table1_smoke", [{"sampler": "sgd", "data": "mnist5k", "seed": "0"},
                                       {"sampler": "csgld", "data": "mnist5k", "seed": "0"}],
                extra=("trainer.epochs=2",))
    _write_runs(runs / "more", "table1_smoke", [{"sampler": "sgld", "data": "mnist5k", "seed": "7"}])
    with pytest.raises(ConfigError) as refused:
        _report_only(runs, committed)
    message = str(refused.value)
    assert refused.value.key == "--runs" and "\n" not in message
    assert ("differ: trainer.epochs=2 in 2 of 3 runs (the preset: 80); seed 7 (the table's: 0, 1, 2); methods 3 of 10; "
            "seeds 0 of 0, 1, 2; pass --out DIR to write this table elsewhere") in message
    assert "experiment=table1_smoke" in message and not committed.exists()  # nothing written
    out = tmp_path / "elsewhere"
    lines = _report_only(runs, out, out_given=True)
    assert lines[-1].startswith("table1: not the table's protocol (said so in its header): trainer.epochs=2")
    title, blank, note = (out / "table1.md").read_text().splitlines()[:3]
    assert title.startswith("# cSG-MCMC Table 1") and blank == ""
    assert note.startswith("> **Not this table's protocol**: the runs differ from experiment=table1_smoke")
    assert "trainer.epochs=2 in 2 of 3 runs (the preset: 80)" in note and not committed.exists()


def test_out_naming_the_committed_folder_is_the_committed_folder(tmp_path, committed):
    runs = tmp_path / "runs"
    _write_runs(runs, "table1_smoke", _table1_points("0"), extra=("sampler.lr0=0.01",))
    with pytest.raises(ConfigError, match=r"sampler.lr0=0.01 \(the preset: 0.2, 0.1\)"):
        _report_only(runs, committed, out_given=True)
    assert not committed.exists()


def test_an_added_method_under_the_protocol_is_a_row_not_a_difference(tmp_path, committed):
    runs = tmp_path / "runs"
    _write_runs(runs, "table1_smoke", _table1_points())
    added = ["sampler=csgld", "sampler.name=mine", "sampler.temperature=0.5"]
    record_added(runs, "table1", {"mine": added})
    mine = [{"sampler": "csgld", "sampler.name": "mine", "sampler.temperature": "0.5", "data": "mnist5k", "seed": s}
            for s in "012"]
    _write_runs(runs / "add_mine", "table1_smoke", mine)
    _report_only(runs, committed)
    assert "| mine |" in (committed / "table1.md").read_text()
    _write_runs(runs / "add_mine_again", "table1_smoke", mine[:1], extra=("sampler.temperature=0.4",))
    with pytest.raises(ConfigError, match=r"sampler.temperature=0.4 in 1 of 34 runs \(the preset: 0.5\)"):
        _report_only(runs, committed)


# --- the command against the protocol -------------------------------------------------------------------------------


def _fake_sweeps(made: list):
    """run_sweeps without train.py: each run of each sweep as train.py leaves it (the command's overrides too)."""

    def run_sweeps(preset, sweeps, runs, launcher, overrides, processes=None, folders=None, gpus_per_run=None):
        for index, sweep in enumerate(sweeps):
            points = expected_runs([sweep])
            mine = tuple(o for o in overrides if not o.startswith("hydra."))  # Hydra's own: not in the run's config
            made.extend(_write_runs(Path(runs) / f"sweep{index}", preset, points, extra=mine))

    return run_sweeps


@pytest.mark.parametrize("flags, key, says", [
    ({"overrides": ("logger=none", "trainer.epochs=2")}, "trainer.epochs", "trainer.epochs=2 (the preset: 80)"),
    ({"overrides": ("sampler.cycles=2",)}, "sampler.cycles", "sampler.cycles=2 (the preset: 1, 4)"),
    ({"seeds": "7"}, "--seeds", "--seeds 7 (the table's: 0, 1, 2)"),
    ({"preset": "table2_smoke"}, "--preset", "--preset table2_smoke (the table's: table1_smoke); study=table2 (the "
                                             "preset: table1); trainer.epochs=160 (the preset: 80)"),
])
def test_a_command_that_differs_is_refused_before_anything_runs(tmp_path, committed, monkeypatch, flags, key, says):
    made = []
    monkeypatch.setattr(registry, "run_sweeps", _fake_sweeps(made))
    job = Job(target="table1", out=committed, scale="smoke", runs=tmp_path / "runs", **flags)
    TARGETS["table1"].check(job)
    with pytest.raises(ConfigError) as refused:
        TARGETS["table1"].make(job)
    assert refused.value.key == key and says in str(refused.value) and "\n" not in str(refused.value)
    assert "this command differs" in str(refused.value) and "pass --out DIR" in str(refused.value)
    assert made == [] and not committed.exists() and not (tmp_path / "runs").exists()


def test_a_command_that_differs_runs_with_out_and_its_table_says_how(tmp_path, monkeypatch):
    made = []
    monkeypatch.setattr(registry, "run_sweeps", _fake_sweeps(made))
    out = tmp_path / "out"
    lines = TARGETS["table1"].make(Job(target="table1", out=out, out_given=True, scale="smoke", runs=tmp_path / "runs",
                                       seeds="0", overrides=("trainer.epochs=2",)))
    assert len(made) == 10 and lines[-1] == ("table1: not the table's protocol (said so in its header): --seeds 0 (the "
                                            "table's: 0, 1, 2); trainer.epochs=2 (the preset: 80); methods 10 of 10; "
                                            "seeds 0 of 0, 1, 2")
    assert "> **Not this table's protocol**" in (out / "table1.md").read_text()


def test_a_command_of_the_protocol_runs_and_writes_the_committed_table(tmp_path, committed, monkeypatch):
    made = []
    monkeypatch.setattr(registry, "run_sweeps", _fake_sweeps(made))
    job = Job(target="table1", out=committed, scale="smoke", runs=tmp_path / "runs", seeds="2,1,0",
              overrides=("logger=none", "trainer.progress=false", "data.eval_batch_size=100", "hydra.launcher.timeout_min=5"))
    lines = TARGETS["table1"].make(job)
    assert len(made) == 30 and lines == [f"table1: wrote {committed / 'table1.md'} from {tmp_path / 'runs'}"]
    assert "Not this table's protocol" not in (committed / "table1.md").read_text()
    assert not protocol.is_protocol_key("trainer.checkpoint.every_n_epochs") and protocol.is_protocol_key("trainer.epochs")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_issues_report_only_of_two_epoch_runs_leaves_the_committed_table(tmp_path):
    """Two real table1_smoke runs of 2 epochs: refused in one line naming what differs; the committed table stays."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = tmp_path / "runs"
    train = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "experiment=table1_smoke", "sampler=sgd,sgdm",
                            "trainer.epochs=2", "logger=none", "trainer.progress=false", f"hydra.sweep.dir={runs}"],
                           capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    assert train.returncode == 0, train.stderr[-2000:]
    before = _committed_results()
    report = [sys.executable, str(REPRODUCE), "table1", "--scale", "smoke", "--report-only", "--runs", str(runs)]
    refused = subprocess.run(report, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert refused.returncode == 2 and refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
    assert refused.stderr.startswith(f"error: --runs='{runs}' is not allowed: runs of the protocol of table1 "
                                     "(experiment=table1_smoke, its methods and seeds)")
    assert ("they differ: trainer.epochs=2 (the preset: 80); methods 2 of 10; seeds 0 of 0, 1, 2; pass --out DIR "
            "to write this table elsewhere") in refused.stderr
    assert _committed_results() == before
    written = subprocess.run([*report, "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                             env=env, cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert "trainer.epochs=2 (the preset: 80)" in (tmp_path / "out" / "table1.md").read_text().splitlines()[2]
    assert _committed_results() == before


# --- --seeds are seeds ----------------------------------------------------------------------------------------------


def test_accuracy_multimodal_seeds_1007_runs_and_records_seed_1007(tmp_path):
    job = Job(target="accuracy-multimodal", out=tmp_path, out_given=True, scale="smoke", seeds="1007",
              overrides=("targets=barrier4",))
    TARGETS["accuracy-multimodal"].check(job)
    TARGETS["accuracy-multimodal"].make(job)
    runs = pd.read_csv(tmp_path / "accuracy_multimodal_runs.csv")
    assert set(runs.seed) == {1007} and set(runs.target) == {"barrier4"}
    assert "evaluated on 1 fresh seeds (1007-1007)" in (tmp_path / "accuracy_multimodal.md").read_text()


@pytest.mark.parametrize("target, seeds, says", [
    ("table1", "7,7", "each seed once"), ("accuracy-multimodal", "1,3,1", "each seed once"),
])
def test_repeated_seeds_are_refused(tmp_path, target, seeds, says):
    with pytest.raises(ConfigError, match=says):
        TARGETS[target].check(Job(target=target, out=tmp_path, seeds=seeds))


def test_accuracy_multimodal_refuses_its_tuning_seeds_as_evaluation_seeds(tmp_path):
    job = Job(target="accuracy-multimodal", out=tmp_path, out_given=True, scale="smoke", seeds="1000,3",
              overrides=("targets=barrier4",))
    with pytest.raises(ConfigError, match="fresh evaluation seeds, none of the tuning seeds 0,1,2,3,4"):
        TARGETS["accuracy-multimodal"].make(job)
    assert not any(tmp_path.iterdir())


# --- reports read run directories as data ---------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("planted", ["config_fifo", "metrics_fifo", "alias_bomb"])
def test_a_planted_file_is_one_line_not_a_hang(tmp_path, planted):
    from studies.experiments.aggregate import load_runs

    run = _write_runs(tmp_path / "runs", "table1_smoke", _table1_points("0")[:1])[0]
    if planted == "config_fifo":
        (run / ".hydra" / "config.yaml").unlink()
        os.mkfifo(run / ".hydra" / "config.yaml")
    elif planted == "metrics_fifo":
        (run / "metrics.json").unlink()
        os.mkfifo(run / "metrics.json")
    else:
        bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"] + [f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]"
                                                          for p, c in zip("abcdefg", "bcdefgh")]
        (run / ".hydra" / "config.yaml").write_text("\n".join(bomb) + "\n")
    with pytest.raises(ConfigError) as refused:
        load_runs(tmp_path / "runs")
    assert refused.value.key == "run_dir" and "\n" not in str(refused.value)
    assert ("FIFO" in str(refused.value)) == planted.endswith("fifo")


def _fig3_run(tmp_path: Path) -> Path:
    from csg.engine.samples import SampleStore
    from csg.models import create_model

    run = _write_runs(tmp_path / "runs", "fig3_smoke", [{"sampler": "csgld", "data": "mnist5k", "seed": "0"}])[0]
    store = SampleStore(run / "samples", planned=2)
    for index in range(2):
        torch.manual_seed(index)
        store.save(create_model("mlp", num_classes=10, input_shape=(1, 28, 28)), index=index, cycle=index, epoch=index)
    return run


def test_figure3_takes_the_samples_its_runs_recorded_not_stray_copies(tmp_path):
    from studies.experiments import fig3

    run = _fig3_run(tmp_path)
    first = sorted((run / "samples").glob("sample_*.pt"))[0]
    (run / "samples" / "old").mkdir()
    (run / "samples" / "old" / first.name).write_bytes(first.read_bytes())
    (run / "samples" / f"{first.stem} (copy).pt").write_bytes(first.read_bytes())
    samples = fig3._samples(fig3._posterior(run, "cpu"))
    assert [meta for meta, _ in samples] == [{"index": 0, "cycle": 0}, {"index": 1, "cycle": 1}]  # 2 recorded; 4 files
    for index, (meta, state) in enumerate(samples):  # the sample files' own records
        record = torch.load(run / "samples" / f"sample_{index:04d}_cycle{index:02d}_epoch{index:04d}.pt",
                            weights_only=True)
        assert meta["cycle"] == record["cycle"] and state.keys() == record["state_dict"].keys()
        assert all(torch.equal(state[k], v) for k, v in record["state_dict"].items())


def test_figure3_builds_nothing_a_run_directory_names(tmp_path):
    from studies.experiments import fig3

    run = _fig3_run(tmp_path)
    marker = tmp_path / "marker"
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    cfg.model = {"name": "custom", "_target_": "os.system", "command": f"touch {marker}"}
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    with pytest.raises(ConfigError, match=r"model\._target_='os.system' is not allowed"):
        fig3._posterior(run, "cpu")
    assert not marker.exists()
