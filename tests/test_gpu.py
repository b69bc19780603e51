"""The CUDA path: train.py, evaluate_run.py and torchrun as users run them on a GPU machine.

Every test here is marked ``gpu``: it runs where CUDA is visible (``pytest -m gpu``) and is skipped, with
the reason, everywhere else (see conftest.py). The CPU semantics (gloo DDP, bit-exact CPU resume) are
tested elsewhere with ``trainer.device=cpu``, so that they mean the same on both kinds of machine.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT, read_samples
from tests.formats import write_cifar
from tests.engine.test_distributed import _torchrun, assert_same_four_samples, interrupt_then_resume

pytestmark = pytest.mark.gpu

# the command, on CIFAR-format files: 200 training images, batch 64 (4 iterations an epoch)
CIFAR = ["data=cifar10", "model=resnet18", "sampler=csghmc", "trainer.epochs=2", "sampler.cycles=1",
         "sampler.explore=0.5", "sampler.samples_per_cycle=1", "data.download=false", "logger=none"]
MLP = ["trainer.epochs=8", "sampler.cycles=2", "sampler.samples_per_cycle=1", "logger=none"]


@pytest.fixture
def cifar_root(tmp_path):
    write_cifar(tmp_path / "data", train_per_batch=40, test=50)
    return tmp_path / "data"


def _metrics(process, run_dir):
    assert process.returncode == 0, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    return json.loads((run_dir / "metrics.json").read_text())


def _finite(values):
    return all(math.isfinite(values[key]) for key in ("test_error_pct", "nll", "ece", "brier"))


@pytest.mark.parametrize("resident, precision", [("true", "32"), ("true", "bf16-mixed"), ("true", "16-mixed"),
                                                 ("false", "32"), ("false", "bf16-mixed")])
def test_cifar_resnet18_on_the_gpu_trains_evaluates_and_writes_metrics(run_train, cifar_root, resident, precision):
    # data held on the GPU (augmented there) or served by the CPU loader with workers; every precision
    process, run_dir = run_train(*CIFAR, f"data.root={cifar_root}", f"data.device_resident={resident}",
                                 f"trainer.precision={precision}", "data.num_workers=2")
    metrics = _metrics(process, run_dir)
    assert metrics["device"] == "cuda:0" and metrics["num_data"] == 200 and metrics["gradient_evaluations"] == 8
    assert metrics["ensemble"]["num_samples"] == 1 and _finite(metrics["ensemble"])
    (sample,) = read_samples(run_dir).values()
    assert all(t.device.type == "cpu" for t in sample["state_dict"].values())  # samples load anywhere
    assert sample["state_dict"]["conv1.weight"].dtype == torch.float32  # mixed precision keeps fp32 parameters


def test_out_of_distribution_metrics_on_the_gpu(run_train, tmp_path):
    from csg.data.notmnist import render_letters

    render_letters(tmp_path / "letters", per_letter=20)
    process, run_dir = run_train(*MLP, "ood=notmnist", f"ood.root={tmp_path / 'letters'}")
    metrics = _metrics(process, run_dir)
    ood = metrics["ood"]
    assert metrics["device"] == "cuda:0" and len(ood["per_sample"]) == 2
    assert 0.5 < ood["ensemble"]["auroc"] <= 1.0
    assert ood["ensemble"]["entropy_mean"] > ood["ensemble"]["entropy_mean_in_distribution"]


def test_sigterm_then_resume_on_the_gpu_gives_the_same_samples(run_train, tmp_path):
    # the same GPU, deterministic kernels (trainer.deterministic): the resumed chain is the uninterrupted one
    args = ["trainer.epochs=40", "sampler.cycles=4", "sampler.samples_per_cycle=1", "logger=none",
            "trainer.progress=false", "trainer.deterministic=true"]
    full_dir, cut_dir = interrupt_then_resume(run_train, tmp_path, args)
    assert json.loads((cut_dir / "metrics.json").read_text())["device"] == "cuda:0"
    assert_same_four_samples(full_dir, cut_dir)


def test_evaluate_run_script_on_a_gpu_run(run_train, tmp_path):
    process, run_dir = run_train("trainer.epochs=8", "sampler.cycles=2", "sampler.explore=0.5",
                                 "sampler.samples_per_cycle=2", "logger=none")
    metrics = _metrics(process, run_dir)
    script = [sys.executable, str(ROOT / "scripts" / "evaluate_run.py"), str(run_dir)]
    for weights in ("harmonic", "equal"):
        again = subprocess.run([*script, f"evaluation.cycle_weights={weights}"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=300)
        assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    harmonic = json.loads((run_dir / "evaluation_harmonic.json").read_text())
    equal = json.loads((run_dir / "evaluation_equal.json").read_text())
    assert sum(s["weight"] for s in harmonic["per_sample"]) == pytest.approx(1.0)
    assert equal["ensemble"]["nll"] == pytest.approx(metrics["ensemble"]["nll"], rel=1e-5)


def test_cyclical_swag_with_parallel_chains_on_the_gpu(run_train):
    process, run_dir = run_train("sampler=cycswag", "trainer.epochs=8", "sampler.cycles=2", "sampler.explore=0.5",
                                 "sampler.samples_per_cycle=2", "sampler.swag.draws_per_cycle=2", "sampler.chains=2",
                                 "logger=none")
    metrics = _metrics(process, run_dir)
    assert metrics["ensemble"]["num_samples"] == 8 and metrics["swag"]["snapshots"] == 8
    assert [c["num_samples"] for c in metrics["per_chain"]] == [4, 4] and _finite(metrics["ensemble"])


def test_parameter_trace_and_ess_on_the_gpu(run_train):
    process, run_dir = run_train(*MLP, "model.hidden=[16]", "trace.enabled=true", "trace.burnin=0",
                                 "trace.samples=50")
    metrics = _metrics(process, run_dir)
    assert metrics["ess"]["draws"] == 50 and metrics["ess"]["median"] > 0
    assert torch.load(run_dir / "trace.pt").shape[0] == 50


@pytest.mark.parametrize("precision", ["32", "16-mixed"])
def test_contour_sghmc_on_the_gpu(run_train, precision):
    process, run_dir = run_train("sampler=contour_sghmc", *MLP, "sampler.explore=0.5", "sampler.samples_per_cycle=2",
                                 f"trainer.precision={precision}")
    metrics = _metrics(process, run_dir)
    assert metrics["cycle_weights"] == "importance" and metrics["contour"]["updates"] > 0
    assert sum(metrics["contour"]["theta"]) == pytest.approx(1.0)


def test_energy_partition_on_the_gpu_takes_indices_gathered_on_the_cpu():
    from csg.samplers.contour import EnergyPartition

    partition = EnergyPartition(0.0, 1.0, 4, zeta=1.0, device="cuda")
    on_gpu = EnergyPartition(0.0, 1.0, 4, zeta=1.0, device="cuda")
    indices = torch.tensor([2, 2, 0])  # what an all-gather across processes hands back
    partition.update(indices)
    on_gpu.update(indices.cuda())
    assert torch.equal(partition.theta, on_gpu.theta) and partition.theta.device.type == "cuda"
    assert partition.theta[0, 2] > partition.theta[0, 1]
    assert partition.multiplier(indices, 1.0).device.type == "cuda"


def test_more_processes_than_gpus_stop_before_any_work_with_one_line(tmp_path):
    nproc = torch.cuda.device_count() + 1
    process = _torchrun(tmp_path, tmp_path / "run", *MLP, nproc=nproc, device=None)
    assert process.returncode != 0
    output = process.stdout + process.stderr
    assert "invalid device ordinal" not in output and "AcceleratorError" not in output and "CUDA error" not in output
    ours = [line for line in process.stderr.splitlines() if line.startswith("error: trainer.device=")]
    assert len(ours) == 1, process.stderr[-3000:]  # one line, from the first process, not one per rank
    assert f"--nproc_per_node={nproc}" in ours[0] and "trainer.device=cpu" in ours[0]
    assert not (tmp_path / "run" / "samples").exists()


two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs: NCCL puts one process on each")


@two_gpus
def test_icsghmc_collectives_over_nccl(tmp_path):
    args = ["sampler=icsghmc", "trainer.epochs=4", "sampler.samples_per_cycle=2", "sampler.chains=2",
            "trainer.progress=false", "sampler.energy.variance_reduction=false", "sampler.explore=0.5"]
    process = _torchrun(tmp_path, tmp_path / "run", *args, device=None)
    metrics = _metrics(process, tmp_path / "run")
    assert metrics["processes"] == 2 and metrics["device"] == "cuda:0" and metrics["contour"]["updates"] > 0


@two_gpus
def test_resghmc_collectives_over_nccl(tmp_path):
    args = ["sampler=resghmc", "trainer.epochs=4", "sampler.samples_per_cycle=2", "sampler.chains=2",
            "trainer.progress=false", "sampler.explore=0.5", "sampler.replica.temperatures=[1.0,3.0]",
            "sampler.replica.step_sizes=[1.0,1.0]"]
    process = _torchrun(tmp_path, tmp_path / "run", *args, device=None)
    metrics = _metrics(process, tmp_path / "run")
    assert metrics["processes"] == 2 and metrics["replica"]["proposals"] == [63]


def test_the_captured_step_takes_the_eager_steps_path_on_the_gpu():
    # trainer.compile on CUDA: the whole step as CUDA graphs (per batch shape, noise on / off) gives the eager
    # step's parameters and leaves the chain's generator where the eager step leaves it
    import copy

    from csg.samplers import SGHMC
    from csg.engine.step.single import CapturedStep, Step, prepare_model
    from csg.engine.devices import Precision

    device = torch.device("cuda")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3))
    models = [prepare_model(copy.deepcopy(net).to(device), device) for _ in range(2)]
    x, y = torch.randn(80, 3, 8, 8, device=device), torch.randint(0, 3, (80,), device=device)
    samplers, steps = [], []
    for model, step_type in zip(models, (Step, CapturedStep)):
        sampler = SGHMC(model.parameters(), lr=0.05, num_data=80, temperature=1.0, momentum=0.1, weight_decay=5e-4,
                        generator=torch.Generator(device=device).manual_seed(3))
        samplers.append(sampler)
        steps.append(step_type(model, sampler, Precision("32", device), channels_last=True))
    for k in range(30):
        start = 32 * (k % 3)  # batches of 32, 32 and 16
        for sampler, step in zip(samplers, steps):
            for group in sampler.param_groups:
                group["lr"], group["temperature"] = 0.05 / (1 + k), float(k % 10 >= 4)
            step(x[start:start + 32], y[start:start + 32])
    assert len(steps[1].graphs) == 4
    assert torch.equal(samplers[0].generator.get_state(), samplers[1].generator.get_state())
    for p, q in zip(*(m.parameters() for m in models)):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)
    for p, q in zip(*(m.buffers() for m in models)):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_stacked_chains_on_the_gpu_are_each_the_chain_run_alone(compiled, monkeypatch):
    # trainer.stack_chains on CUDA: 3 chains of a channels-last convolutional model with batch norm (a 1x1
    # convolution too), stepped together (vmap over stacked parameters), against each chain's eager step alone.
    # TF32 off: cuDNN's TF32 convolutions round differently in the stacked (grouped) and the single kernels
    # (5e-4 apart after 30 steps); in float32 the two must agree to float tolerance
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    from csg.samplers import SGHMC
    from csg.engine.step.stacked import CompiledStackedStep, StackedStep
    from csg.engine.step.single import Step, prepare_model
    from csg.engine.devices import Precision

    device, precision = torch.device("cuda"), Precision("32", torch.device("cuda"))

    def chains():
        built = []
        for k in range(3):
            torch.manual_seed(k)
            net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                      torch.nn.Conv2d(8, 8, 1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                      torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 3))
            model = prepare_model(net.to(device), device)
            built.append((model, SGHMC(model.parameters(), lr=0.05, num_data=80, temperature=1.0, weight_decay=5e-4,
                                       generator=torch.Generator(device=device).manual_seed(10 + k))))
        return built

    alone, stacked = chains(), chains()
    steps = [Step(m, s, precision, channels_last=True) for m, s in alone]
    together = (CompiledStackedStep if compiled else StackedStep)([m for m, _ in stacked], [s for _, s in stacked], precision)
    x, y = torch.randn(3, 80, 3, 8, 8, device=device), torch.randint(0, 3, (3, 80), device=device)
    for k in range(30):
        start = 32 * (k % 3)  # batches of 32, 32 and 16
        for _, sampler in alone + stacked:
            for group in sampler.param_groups:
                group["lr"], group["temperature"] = 0.05 / (1 + k), float(k % 10 >= 4)
        losses = [step(x[c, start:start + 32], y[c, start:start + 32])[0] for c, step in enumerate(steps)]
        stacked_losses, _ = together([x[c, start:start + 32] for c in range(3)], [y[c, start:start + 32] for c in range(3)])
        torch.testing.assert_close(stacked_losses, torch.stack(losses), rtol=1e-3, atol=1e-4)
    for (a, sa), (b, sb) in zip(alone, stacked):
        assert torch.equal(sa.generator.get_state(), sb.generator.get_state())
        for p, q in zip(a.state_dict().values(), b.state_dict().values()):
            torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("compiled", ["false", "auto"])
def test_train_py_stacks_parallel_chains_on_the_gpu(run_train, cifar_root, tmp_path, monkeypatch, compiled):
    # sampler.chains=2 in one process with trainer.stack_chains=true on CUDA steps the chains together, each
    # chain giving the samples it gives when the chains run one after another. TF32 off in cuDNN and cuBLAS
    # (NVIDIA's switch, read by the libraries in the train.py processes): the stacked (grouped) and the
    # single convolutions round differently in TF32. A small step size: at the CIFAR recipe's lr0 0.5 the first
    # steps of a ResNet-18 are chaotic, and two runs of the same sequential command already end 0.25 apart (cuDNN's
    # nondeterministic backward, amplified; H100, 2026-11-23)
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    runs = {}
    for setting in ("true", "false"):
        process, run_dir = run_train(*CIFAR, f"data.root={cifar_root}", "sampler.chains=2", "sampler.lr0=0.001", f"trainer.compile={compiled}",
                                     f"trainer.stack_chains={setting}", run_dir=tmp_path / setting)
        runs[setting] = _metrics(process, run_dir)
        assert ("stepped together" in process.stdout) == (setting == "true")
    assert [c["num_samples"] for c in runs["true"]["per_chain"]] == [1, 1] and _finite(runs["true"]["ensemble"])
    for k in range(2):
        [a], [b] = (sorted((tmp_path / s / "samples" / f"chain{k:02d}").glob("*.pt")) for s in ("true", "false"))
        mine, twin = torch.load(a)["state_dict"], torch.load(b)["state_dict"]
        for name in mine:
            torch.testing.assert_close(mine[name], twin[name], rtol=1e-2, atol=1e-3, msg=lambda m: f"{name}: {m}")


# a user's own components (data=custom, model=custom, sampler=custom) on the GPU: the TensorDataset held there
OWN = ["data=custom", "data._target_=tests.own_components.blobs", "data.batch_size=20", "model=custom",
       "model._target_=tests.own_components.tiny_net", "sampler=custom",
       "sampler.optimizer._target_=examples.own_project.own_project.sampler.LangevinSampler",
       "trainer.epochs=6", "sampler.cycles=2", "sampler.samples_per_cycle=1", "logger=none"]


@pytest.mark.parametrize("compile_setting", ["false", "auto"])
def test_own_components_on_the_gpu_and_their_posterior_there(run_train, compile_setting):
    import csg

    process, run_dir = run_train(*OWN, f"trainer.compile={compile_setting}")
    metrics = _metrics(process, run_dir)
    assert metrics["device"].startswith("cuda") and metrics["ensemble"]["num_samples"] == 2
    posterior = csg.Posterior.load(run_dir, device="cuda", trust_code=True)  # the user's own components
    got = posterior.evaluate()
    assert all(got[key] == pytest.approx(value, abs=1e-6) for key, value in metrics["ensemble"].items())
    x, _ = next(iter(posterior.data.test))
    probs = posterior.predict(x)
    assert probs.device.type == "cuda" and torch.allclose(probs.sum(1), torch.ones(len(x), device="cuda"))


def test_own_components_resume_on_the_gpu_gives_the_same_samples(run_train, tmp_path):
    args = [*OWN[:-4], "+data.n=3000", "trainer.epochs=12", "sampler.cycles=4", "sampler.samples_per_cycle=1",
            "logger=none", "trainer.deterministic=true"]  # 150 batches an epoch: a stop between two samples
    full_dir, cut_dir = interrupt_then_resume(run_train, tmp_path, args)
    assert_same_four_samples(full_dir, cut_dir)


@pytest.mark.parametrize("compile_setting", ["false", "auto"])
def test_the_samplers_temperatures_on_the_gpu_measured_eagerly_and_said_unmeasured_when_captured(run_train,
                                                                                                  compile_setting):
    # the monitor's sums live on the parameters' device (no host sync per step); a captured step's replays run no
    # Python, so the reading says it was not measured and names trainer.compile=false
    process, run_dir = run_train(*MLP, "trainer.device=cuda", f"trainer.compile={compile_setting}")
    sampling = _metrics(process, run_dir)["sampling"]
    if compile_setting == "false":
        assert sampling["steps"] > 0 and sampling["kinetic"] is not None and math.isfinite(sampling["configurational"])
    else:
        assert sampling["steps"] == 0 and "trainer.compile=false" in sampling["note"]
