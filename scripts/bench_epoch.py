#!/usr/bin/env python
"""End-to-end epoch time of cSGHMC against SGD with momentum: the same loop, model and data.

The MLP on the 5000 shipped MNIST digits (CPU). Both run through csg.engine.loop.train_chain for
the same epochs; cSGHMC in its sampling stage (noise on every step), SGD-momentum is
torch.optim.SGD(momentum=0.9, foreach=True). Epochs alternate between the two, and the ratio is
of the median epoch times. Also times evaluating a 12-sample ensemble against 12 plain forward
passes over the test set (MLP on mnist5k, and CIFAR ResNet-18 on CIFAR-shaped inputs), profiles both
(torch.profiler, cProfile) to say where the time goes, and the peak memory of the evaluation with
2, 12 and 24 samples (each in a fresh process, after a warm-up: VmHWM).

    python scripts/bench_epoch.py [--epochs 6]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.engine.samples import SampleStore  # noqa: E402
from csg.data import build_data  # noqa: E402
from csg.evaluation import equal_weights, evaluate_samples, predict_probs  # noqa: E402
from csg.models import create_model  # noqa: E402
from csg.samplers import SGHMC  # noqa: E402
from csg.schedules import Constant  # noqa: E402
from csg.engine.loop import train_chain  # noqa: E402


def mlp() -> torch.nn.Module:
    return create_model("mlp", num_classes=10, input_shape=(1, 28, 28))


def sghmc(params) -> SGHMC:
    """cSGHMC's update; the noise is on when the loop passes temperature 1."""
    return SGHMC(params, lr=0.05, num_data=4000, temperature=1.0, momentum=0.9, weight_decay=5e-4,
                 generator=torch.Generator().manual_seed(0))


def sgd(params) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4, foreach=True)


def epoch_seconds(make_sampler, data, temperature: float) -> float:
    torch.manual_seed(0)
    model = mlp()
    sampler = make_sampler(model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        train_chain(model, sampler, Constant(0.05), data.train, epochs=1, temperature=temperature, plan=[],
                    store=SampleStore(tmp), device=torch.device("cpu"), progress=False, log_every_n_steps=10_000)
        return time.perf_counter() - start


def epoch_ratio(epochs: int) -> list[dict]:
    data = build_data("mnist5k", batch_size=64)
    epoch_seconds(sgd, data, 0.0)  # warm-up
    times = {"csghmc_sampling": [], "csghmc_exploration": [], "sgd_momentum": []}
    for _ in range(epochs):
        times["csghmc_sampling"].append(epoch_seconds(sghmc, data, 1.0))
        times["csghmc_exploration"].append(epoch_seconds(sghmc, data, 0.0))
        times["sgd_momentum"].append(epoch_seconds(sgd, data, 0.0))
    medians = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return [{"measure": "epoch seconds, MLP on mnist5k (CPU): cSGHMC sampling stage (noise on)", "value": medians["csghmc_sampling"]},
            {"measure": "epoch seconds, MLP on mnist5k (CPU): cSGHMC exploration stage (T = 0)", "value": medians["csghmc_exploration"]},
            {"measure": "epoch seconds, MLP on mnist5k (CPU): SGD-momentum", "value": medians["sgd_momentum"]},
            {"measure": "ratio cSGHMC sampling-stage epoch / SGD-momentum epoch (goal <= 1.03)",
             "value": medians["csghmc_sampling"] / medians["sgd_momentum"]},
            {"measure": "ratio cSGHMC exploration-stage epoch / SGD-momentum epoch",
             "value": medians["csghmc_exploration"] / medians["sgd_momentum"]},
            {"measure": "ratio cSGHMC epoch averaged over a cycle (beta = 0.8) / SGD-momentum epoch",
             "value": (0.8 * medians["csghmc_exploration"] + 0.2 * medians["csghmc_sampling"]) / medians["sgd_momentum"]}]


def epoch_profile() -> list[dict]:
    """Where a sampling-stage cSGHMC epoch spends its CPU time (torch.profiler), and the cost of one normal draw."""
    data = build_data("mnist5k", batch_size=64)
    epoch_seconds(sghmc, data, 1.0)  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        epoch_seconds(sghmc, data, 1.0)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    normal = sum(e.self_cpu_time_total for e in events if e.key == "aten::normal_")
    buffer, generator = torch.empty(11_173_962), torch.Generator().manual_seed(0)
    buffer.normal_(generator=generator)
    draws = []
    for _ in range(5):
        start = time.perf_counter()
        buffer.normal_(generator=generator)
        draws.append(time.perf_counter() - start)
    return [{"measure": "share of a cSGHMC sampling-stage epoch's CPU time in aten::normal_ (torch.profiler)",
             "value": normal / total},
            {"measure": "ns per standard-normal number, torch CPU generator (11.17M draws)",
             "value": 1e9 * sorted(draws)[2] / buffer.numel()}]


def write_samples(directory: Path, count: int, build=mlp) -> None:
    """``count`` differently initialised models from ``build`` as the samples of a run."""
    store = SampleStore(directory)
    for index in range(count):
        torch.manual_seed(index)
        store.save(build(), index=index, cycle=index, epoch=index)


def ensemble_ratio(samples: int = 12, rounds: int = 5) -> list[dict]:
    data = build_data("mnist5k", batch_size=64)
    model = mlp()
    with tempfile.TemporaryDirectory() as tmp:
        write_samples(Path(tmp), samples)
        store = SampleStore(tmp)
        plain, full = [], []
        evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()), equal_weights(samples),
                         data.test, torch.device("cpu"))  # warm-up
        for _ in range(rounds):
            start = time.perf_counter()
            for path in store.paths():  # 12 separate evaluations: load each sample, run the test set through it
                model.load_state_dict(store.load(path)["state_dict"])
                predict_probs(model, data.test, torch.device("cpu"))
            plain.append(time.perf_counter() - start)
            start = time.perf_counter()
            evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()), equal_weights(samples),
                             data.test, torch.device("cpu"))
            full.append(time.perf_counter() - start)
    plain_s, full_s = sorted(plain)[rounds // 2], sorted(full)[rounds // 2]
    return [{"measure": f"seconds, {samples} separate passes over the mnist5k test set (load + forward, MLP)", "value": plain_s},
            {"measure": f"seconds, evaluating the {samples}-sample ensemble (loading, metrics per sample, average)",
             "value": full_s},
            {"measure": "ratio ensemble evaluation / separate passes (goal <= 1.1)", "value": full_s / plain_s}]


def ensemble_profile(samples: int = 12) -> list[dict]:
    """Shares of the ensemble evaluation's time (cProfile, cumulative): the forward passes, loading, metrics, average."""
    import cProfile
    import pstats

    data = build_data("mnist5k", batch_size=64)
    model = mlp()
    with tempfile.TemporaryDirectory() as tmp:
        write_samples(Path(tmp), samples)
        store = SampleStore(tmp)
        run = lambda: evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()),  # noqa: E731
                                       equal_weights(samples), data.test, torch.device("cpu"))
        run()
        profiler = cProfile.Profile()
        profiler.runcall(run)
    stats = pstats.Stats(profiler).stats
    total = max(entry[3] for entry in stats.values())

    def share(module, name):
        return sum(entry[3] for (path, _, function), entry in stats.items()
                   if function == name and path.endswith(module)) / total

    parts = {"the forward passes (predict_probs)": ("ensemble.py", "predict_probs"),
             "loading the samples (SampleStore.load)": ("samples.py", "load"),
             "the metrics of each sample and of the average (classification_metrics)": ("metrics.py", "classification_metrics"),
             "the running average (_accumulate)": ("ensemble.py", "_accumulate")}
    return [{"measure": f"share of the MLP ensemble evaluation in {label} (cProfile)", "value": share(*where)}
            for label, where in parts.items()]


def resnet_ensemble_ratio(samples: int = 12, images: int = 128) -> list[dict]:
    """The ensemble against separate passes on the paper's model: CIFAR ResNet-18, CIFAR-shaped inputs (seeded)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(images, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (images,), generator=generator)
    loader = list(zip(x.split(64), y.split(64)))
    model = create_model("resnet18", num_classes=10)
    with tempfile.TemporaryDirectory() as tmp:
        write_samples(Path(tmp), samples, build=lambda: create_model("resnet18", num_classes=10))
        store = SampleStore(tmp)
        predict_probs(model, loader[:1], torch.device("cpu"))  # warm-up

        def separate():
            for path in store.paths():
                model.load_state_dict(store.load(path)["state_dict"])
                predict_probs(model, loader, torch.device("cpu"))

        def ensemble():
            evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()), equal_weights(samples),
                             loader, torch.device("cpu"))

        times = {separate: [], ensemble: []}
        for order in ((separate, ensemble), (ensemble, separate)):  # alternated, so drift affects both alike
            for work in order:
                start = time.perf_counter()
                work()
                times[work].append(time.perf_counter() - start)
        plain, full = sum(times[separate]) / 2, sum(times[ensemble]) / 2
    return [{"measure": f"seconds, {samples} separate passes, CIFAR ResNet-18 on {images} CIFAR-shaped images", "value": plain},
            {"measure": f"seconds, the {samples}-sample ResNet-18 ensemble on the same images", "value": full},
            {"measure": "ratio ensemble evaluation / separate passes, ResNet-18 (goal <= 1.1)", "value": full / plain}]


PEAK = """
import sys, tempfile, torch
from pathlib import Path
sys.path[:0] = [{root!r}, {root!r} + "/scripts"]
from bench_epoch import mlp, write_samples
from csg.engine.samples import SampleStore
from csg.data import build_data
from csg.evaluation import equal_weights, evaluate_samples
data = build_data("mnist5k", batch_size=64)
model = mlp()
tmp = tempfile.mkdtemp()
write_samples(Path(tmp), {count})
store = SampleStore(tmp)
def status(key):
    return int([l for l in open("/proc/self/status") if l.startswith(key)][0].split()[1])
evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()[:1]), [1.0], data.test,
                 torch.device("cpu"))  # one-time allocations (allocator pools, library set-up) happen here
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current resident size
baseline = status("VmRSS")
evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()), equal_weights({count}), data.test,
                 torch.device("cpu"))
print(status("VmHWM") - baseline)
"""


def peak_memory() -> list[dict]:
    rows = []
    for count in (2, 12, 24):
        output = subprocess.run([sys.executable, "-c", PEAK.format(root=str(ROOT), count=count)], capture_output=True,
                                text=True, check=True).stdout.strip().splitlines()[-1]
        rows.append({"measure": f"peak memory added by evaluating {count} samples of 0.9 MiB each, after a warm-up, MiB (VmHWM)",
                     "value": int(output) / 1024})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    rows = (epoch_ratio(args.epochs) + epoch_profile() + ensemble_ratio() + ensemble_profile()
            + resnet_ensemble_ratio() + peak_memory())
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    atomic_write_text(ROOT / "results" / "bench" / "epoch.csv", table.to_csv(index=False))


if __name__ == "__main__":
    main()
