#!/usr/bin/env python
"""GPU speed of a CIFAR ResNet-18 chain, measured side by side in one run: ``make bench-gpu``.

On CIFAR-10-sized stand-in data that it writes itself (random images in the real pickle format, read by
the project's loader, held on the GPU as ``train.py`` holds them), batch 64 (782 iterations an epoch):

- seconds per epoch through ``csg.engine.loop.train_chain`` with the step ``train.py`` uses
  (``trainer.compile``: compiled and captured as CUDA graphs on a GPU, :mod:`csg.engine.step.single`; channels-last on
  CUDA): SGD-momentum (``sampler=sgdm``: SGHMC's heavy-ball update at T = 0), cSGHMC in its exploration
  stage (T = 0) and in its sampling stage (noise on), in fp32 and bf16-mixed; the sampling stage and
  SGD-momentum also eager (``trainer.compile=false``);
- the same sampling-stage epoch as a plain eager PyTorch loop (model, cross-entropy, backward, the SGHMC
  update), the reference for what the loop around the sampler costs;
- K = 1, 2, 4, 8 chains on one GPU in one process (``sampler.chains=K``) with each method: their own
  captured steps one after another (``sequential``), stepped together over stacked parameters (``vmap``,
  :mod:`csg.engine.step.stacked`, fp32 only) and each step on its own CUDA stream (``streams``, :mod:`csg.engine.step.streamed`),
  in fp32 and bf16-mixed: seconds per epoch of the K chains over one chain's sampling epoch, and the
  GPU's peak memory per K; ``chainsK_wall_over_chain1`` is the fastest method's at the largest K (fp32),
  named in the ``chains_method`` row; and, for comparison, K processes of one chain each started
  together (``--processes``), their wall time over one such process alone;
- the 12-sample ensemble evaluation over the 10,000 test images;
- the projected wall time of a 200-epoch cSGHMC chain (beta = 0.8: 80% exploration epochs).

Each epoch measure is the median of ``--epochs`` epochs after a warm-up epoch, the accelerator
synchronised before each clock reading. Writes ``<out>/gpu.csv`` (``measure,value``) and ``<out>/gpu.md``
naming the device, torch and CUDA. It runs with the GPU machine's ``python3`` (no ``make install``
there); ``--device cpu --smoke`` is the quick check the test suite runs.

    python3 scripts/bench_gpu.py [--epochs 3] [--out results/bench]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.reporting import markdown_table  # noqa: E402
from csg.engine.samples import SampleStore  # noqa: E402
from csg.data import build_data  # noqa: E402
from csg.data.cifar import write_stand_in  # noqa: E402
from csg.evaluation import equal_weights, evaluate_samples  # noqa: E402
from csg.models import create_model  # noqa: E402
from csg.samplers import SGHMC  # noqa: E402
from csg.samplers import functional as rules  # noqa: E402
from csg.schedules import Constant  # noqa: E402
from csg.engine.step.stacked import make_stacked_step  # noqa: E402
from csg.engine.step.single import make_step, prepare_model  # noqa: E402
from csg.engine.step.streamed import make_streamed_step  # noqa: E402
from csg.engine.devices import Precision  # noqa: E402
from csg.engine.loop import Lane, train_chain, train_chains  # noqa: E402

LR, TEMPERATURE, WEIGHT_DECAY = 0.05, 2e-5, 5e-4  # a sampling-stage step of the CIFAR recipe
SIZES = {"full": (50_000, 10_000), "smoke": (256, 100)}
CHAIN_TIMEOUT_S = 300


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def load(root: Path, device: torch.device, seed: int = 0):
    return build_data("cifar10", root=str(root), download=False, batch_size=64, eval_batch_size=1000, device=device,
                      seed=seed)


def model_on(name: str, device: torch.device, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return prepare_model(create_model(name, num_classes=10, input_shape=(3, 32, 32)).to(device), device)


def sghmc(model: torch.nn.Module, data, device: torch.device, seed: int = 0) -> SGHMC:
    """The recipe's SGHMC (momentum 0.1) for ``model``, its noise from generator ``seed``."""
    return SGHMC(model.parameters(), lr=LR, num_data=data.num_train, temperature=TEMPERATURE, momentum=0.1,
                 weight_decay=WEIGHT_DECAY, generator=torch.Generator(device=device).manual_seed(seed))


def make_chain(model_name: str, data, precision: str, compile_setting, device: torch.device):
    """A model, its SGHMC sampler and the step ``train.py`` would build for them."""
    model = model_on(model_name, device)
    sampler = sghmc(model, data, device)
    precision = Precision(precision, device)
    return model, sampler, precision, make_step(compile_setting, model, sampler, precision, device)


def one_epoch(chain, data, temperature: float, device: torch.device) -> None:
    """One epoch of ``train_chain`` at a constant step size, the accelerator synchronised at its end."""
    model, sampler, precision, step = chain
    train_chain(model, sampler, Constant(LR), data.train, epochs=1, temperature=temperature, plan=[], store=None,
                device=device, precision=precision, progress=False, step=step)
    synchronize(device)


def loop_epochs(data, model_name: str, temperature: float, precision: str, compile_setting, epochs: int,
                device: torch.device) -> list[float]:
    """Seconds of each of ``epochs`` epochs of ``train_chain``, after one warm-up epoch (which compiles)."""
    chain = make_chain(model_name, data, precision, compile_setting, device)
    times = []
    for epoch in range(epochs + 1):
        synchronize(device)
        start = time.perf_counter()
        one_epoch(chain, data, temperature, device)
        times.append(time.perf_counter() - start)
    return times[1:]


METHODS = ("sequential", "vmap", "streams")  # the chains' steps one after another, vectorised, on a stream each


def chains_epochs(root: Path, model_name: str, count: int, method: str, precision: str, compile_setting, epochs: int,
                  device: torch.device) -> tuple[list[float], float]:
    """Seconds of each of ``epochs`` sampling-stage epochs of ``count`` chains in one process, after a warm-up
    epoch, and the device's peak memory (GiB; 0 off CUDA) over them. ``method``: ``sequential`` (each chain's
    own step, captured on a GPU, one after another in the lock-step loop), ``vmap`` (stepped together over
    stacked parameters, ``trainer.stack_chains=vmap``, :mod:`csg.engine.step.stacked`) or ``streams`` (each chain's own
    step on its own CUDA stream, ``trainer.stack_chains=streams``, :mod:`csg.engine.step.streamed`). Each chain has its
    own initialisation, noise and data (order and augmentation), as ``sampler.chains=K`` gives them."""
    datas = [load(root, device, seed=k) for k in range(count)]
    models = [model_on(model_name, device, seed=k) for k in range(count)]
    samplers = [sghmc(model, data, device, seed=k) for k, (model, data) in enumerate(zip(models, datas))]
    loaders = [data.train for data in datas]
    mixed = Precision(precision, device)
    if method == "vmap":
        step = make_stacked_step(compile_setting, models, samplers, mixed, device)
    else:
        step = make_streamed_step(compile_setting, models, samplers, mixed, device, streams=method == "streams")
    times = []
    for epoch in range(epochs + 1):
        lanes = [Lane(m, s, loader, chain=k) for k, (m, s, loader) in enumerate(zip(models, samplers, loaders))]
        synchronize(device)
        if epoch == 1 and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        train_chains(lanes, Constant(LR), epochs=1, temperature=TEMPERATURE, plan=[], device=device, step=step,
                     precision=mixed, progress=False)
        synchronize(device)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return times[1:], peak


def chain_rows(root: Path, model_name: str, chains: list[int], compile_setting, epochs: int, device: torch.device,
               one: dict[str, float]) -> tuple[dict[str, float], str]:
    """Every method's K-chain epochs (K > 1) in fp32 and bf16-mixed (vmap: fp32 only, as ``trainer.stack_chains``
    allows it), over ``one`` chain's epoch of that precision, and the GPU's peak memory per K; then
    ``chainsK_epoch_s`` and ``chainsK_wall_over_chain1`` of the best method in fp32 (the fastest at the largest K),
    whose name it returns."""
    rows: dict[str, float] = {}
    for k in chains:
        if k == 1:
            continue
        for method in METHODS:
            for precision, suffix in (("32", ""), ("bf16-mixed", "_bf16")):
                if method == "vmap" and precision != "32":
                    continue
                try:
                    times, peak = chains_epochs(root, model_name, k, method, precision, compile_setting, epochs, device)
                except Exception as error:  # noqa: BLE001 - one method failing leaves the others' measures
                    print(f"chains{k}_{method}{suffix}: failed ({type(error).__name__}: {error}); left out", flush=True)
                    continue
                name = f"chains{k}_{method}{suffix}"
                rows[f"{name}_epoch_s"] = median(times)
                rows[f"{name}_wall_over_chain1"] = median(times) / one[precision]
                if device.type == "cuda":
                    rows[f"{name}_peak_gib"] = peak
                print(f"{name}_epoch_s {median(times):.3f}" + (f" (peak {peak:.2f} GiB)" if device.type == "cuda" else ""),
                      flush=True)
    largest = max(chains)
    measured = [m for m in METHODS if f"chains{largest}_{m}_epoch_s" in rows]
    best = min(measured, key=lambda m: rows[f"chains{largest}_{m}_epoch_s"]) if measured else "sequential"
    for k in chains:
        seconds = one["32"] if k == 1 else rows.get(f"chains{k}_{best}_epoch_s", float("nan"))
        rows[f"chains{k}_epoch_s"] = seconds
        rows[f"chains{k}_wall_over_chain1"] = seconds / one["32"]
    return rows, best


def plain_epochs(data, model_name: str, epochs: int, device: torch.device) -> list[float]:
    """The sampling-stage epoch as a bare eager loop: no schedule, logging, NaN checks or sample bookkeeping."""
    model = model_on(model_name, device)
    params = list(model.parameters())
    velocities = [torch.zeros_like(p) for p in params]
    generator = torch.Generator(device=device).manual_seed(0)
    noise = rules.sghmc_noise_std(LR, 0.1, TEMPERATURE, data.num_train)
    times = []
    for epoch in range(epochs + 1):
        data.train.set_epoch(epoch)
        synchronize(device)
        start = time.perf_counter()
        for x, y in data.train:
            loss = F.cross_entropy(model(x), y)
            for p in params:
                p.grad = None
            loss.backward()
            with torch.no_grad():
                rules.sghmc(params, [p.grad for p in params], velocities, lr=LR, momentum=0.1,
                            weight_decay=WEIGHT_DECAY, noise_std=noise, noise=rules.standard_normal(params, generator))
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times[1:]


def evaluation_seconds(data, model_name: str, samples: int, device: torch.device) -> float:
    """Wall time of evaluating a ``samples``-sample ensemble (each loaded from disk) over the test set."""
    model = model_on(model_name, device)
    with tempfile.TemporaryDirectory() as tmp:
        store = SampleStore(tmp)
        for index in range(samples):
            torch.manual_seed(index)
            store.save(create_model(model_name, num_classes=10, input_shape=(3, 32, 32)), index=index, cycle=0,
                       epoch=index)

        def evaluate():
            evaluate_samples(model, (store.load(p)["state_dict"] for p in store.paths()), equal_weights(samples),
                             data.test, device)

        evaluate()  # warm-up
        synchronize(device)
        start = time.perf_counter()
        evaluate()
        synchronize(device)
        return time.perf_counter() - start


def worker(args) -> None:
    """One chain among K started together: a warm-up epoch, wait for the others, then the measured epochs."""
    device = torch.device(args.device)
    data = load(Path(args.root), device)
    chain = make_chain(args.model, data, "32", "auto", device)
    one_epoch(chain, data, TEMPERATURE, device)  # warm-up (compiles)
    ready = Path(args.ready)
    (ready / f"{os.getpid()}").touch()
    while len(list(ready.iterdir())) < args.group:
        time.sleep(0.01)
    start = time.time()
    for _ in range(args.epochs):
        one_epoch(chain, data, TEMPERATURE, device)
    print(json.dumps({"start": start, "end": time.time()}))


def processes_wall(root: Path, model_name: str, count: int, epochs: int, device: torch.device) -> float:
    """Wall time from the first to the last of ``count`` chain processes running ``epochs`` epochs at once."""
    with tempfile.TemporaryDirectory() as ready:
        command = [sys.executable, __file__, "--worker", "--root", str(root), "--model", model_name, "--device",
                   str(device), "--epochs", str(epochs), "--ready", ready, "--group", str(count)]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        processes = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(count)]
        spans = []
        for process in processes:
            try:
                out, _ = process.communicate(timeout=CHAIN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                for other in processes:
                    other.kill()
                print(f"K = {count}: the chains did not finish in {CHAIN_TIMEOUT_S} s; measure left out", flush=True)
                return float("nan")
            if process.returncode != 0:
                raise SystemExit(f"error: a chain process of the K = {count} measurement failed (exit {process.returncode})")
            spans.append(json.loads(out.strip().splitlines()[-1]))
    return max(s["end"] for s in spans) - min(s["start"] for s in spans)


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def measure(args) -> list[dict]:
    device = torch.device(args.device)
    train, test = SIZES["smoke" if args.smoke else "full"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_stand_in(root, train=train, test=test)
        data = load(root, device)
        e = args.epochs
        m, c = args.model, args.compile
        settings = {
            "sgdm_epoch_s": (0.0, "32", c),
            "csghmc_exploration_epoch_s": (0.0, "32", c),
            "csghmc_sampling_epoch_s": (TEMPERATURE, "32", c),
            "csghmc_sampling_epoch_s_bf16": (TEMPERATURE, "bf16-mixed", c),
            "sgdm_bf16_epoch_s": (0.0, "bf16-mixed", c),
            "eager_sgdm_epoch_s": (0.0, "32", False),
            "eager_csghmc_sampling_epoch_s": (TEMPERATURE, "32", False),
        }
        rows = {}
        for name, (temperature, precision, compile_setting) in settings.items():
            rows[name] = median(loop_epochs(data, m, temperature, precision, compile_setting, e, device))
            print(f"{name} {rows[name]:.3f}", flush=True)  # a killed run still shows what it measured
        rows["plain_loop_sampling_epoch_s"] = median(plain_epochs(data, m, e, device))
        rows["eval12_s"] = evaluation_seconds(data, args.model, 12, device)
        print(f"eval12_s {rows['eval12_s']:.3f}", flush=True)
        one = {"32": rows["csghmc_sampling_epoch_s"], "bf16-mixed": rows["csghmc_sampling_epoch_s_bf16"]}
        chains, method = chain_rows(root, m, args.chains, c, e, device, one)
        rows.update(chains)
        walls = {}
        for k in args.processes:
            walls[k] = processes_wall(root, args.model, k, e, device)
            print(f"processes{k}_wall_s {walls[k]:.3f}", flush=True)
    for k, wall in walls.items():
        rows[f"processes{k}_wall_s"] = wall
        rows[f"processes{k}_wall_over_process1"] = wall / walls[1]
    rows["csghmc_sampling_over_sgdm"] = rows["csghmc_sampling_epoch_s"] / rows["sgdm_epoch_s"]
    rows["bf16_csghmc_sampling_over_sgdm"] = rows["csghmc_sampling_epoch_s_bf16"] / rows["sgdm_bf16_epoch_s"]
    rows["compiled_over_eager_sampling"] = rows["csghmc_sampling_epoch_s"] / rows["eager_csghmc_sampling_epoch_s"]
    rows["loop_over_plain_loop"] = rows["csghmc_sampling_epoch_s"] / rows["plain_loop_sampling_epoch_s"]
    rows["bf16_over_fp32_sampling"] = rows["csghmc_sampling_epoch_s_bf16"] / rows["csghmc_sampling_epoch_s"]
    per_epoch = 0.8 * rows["csghmc_exploration_epoch_s"] + 0.2 * rows["csghmc_sampling_epoch_s"]
    rows["projected_200_epoch_chain_min"] = (200 * per_epoch + rows["eval12_s"]) / 60
    return [{"measure": key, "value": value} for key, value in rows.items()], method


def describe(device: torch.device) -> dict[str, str]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({platform.processor() or 'x86_64'}, {os.cpu_count()} cores)"
    return {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda or "none"}


# the goals of the GPU-speed issue, for a full-scale run on one H100
GOALS = {"csghmc_sampling_epoch_s": "<= 3.0", "csghmc_sampling_over_sgdm": "<= 1.03",
         "chains4_wall_over_chain1": "<= 1.6", "chains8_wall_over_chain1": "<= 3.0", "eval12_s": "<= 10"}


def write(rows: list[dict], facts: dict[str, str], args, out: Path) -> None:
    scale = "smoke (256 training and 100 test images)" if args.smoke else "full (50,000 training and 10,000 test images)"
    table = [{"measure": key, "value": value} for key, value in facts.items()]
    table += [{"measure": r["measure"], "value": f"{r['value']:.6g}"} for r in rows]
    csv = pd.DataFrame(table).to_csv(index=False)  # quotes the device name's commas
    lines = [f"# GPU benchmark: CIFAR {args.model}, batch 64", "",
             f"{date.today()}, {facts['device']}, torch {facts['torch']}, CUDA {facts['cuda']}; scale: {scale}; "
             f"median of {args.epochs} epoch(s) after a warm-up epoch (which compiles); `python3 scripts/bench_gpu.py`; "
             f"`trainer.compile={args.compile}` unless a row says eager. `sgdm` is `sampler=sgdm` (SGHMC's heavy-ball "
             "update at T = 0); `chainsK_<method>` are K chains in one process (`sampler.chains=K`): `sequential` their "
             "own (captured) steps one after another, `vmap` stepped together over stacked parameters "
             "(`trainer.stack_chains=vmap`), `streams` each step on its own CUDA stream (`trainer.stack_chains=streams`); "
             "their epoch over one chain's sampling epoch of the same precision, `_peak_gib` the GPU's peak memory; "
             f"`chainsK_epoch_s` and `chainsK_wall_over_chain1` are the fastest method at the largest K in fp32, "
             f"`{facts['chains_method']}`; `processesK` are K one-chain processes started together.", "",
             *markdown_table(["measure", "value", "goal"],
                             [[r["measure"], f"{r['value']:.3f}", GOALS.get(r["measure"], "")] for r in rows],
                             align="lrl")]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "gpu.csv", csv)
    atomic_write_text(out / "gpu.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--epochs", type=int, default=3, help="measured epochs per setting (after a warm-up)")
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 2, 4, 8],
                        help="K chains in one process, with each method")
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 4],
                        help="K one-chain processes started together (for comparison; none: skipped)")
    parser.add_argument("--compile", default="auto", type=lambda v: {"true": True, "false": False}.get(v, v),
                        choices=["auto", True, False], help="trainer.compile of the compiled rows (auto: on for CUDA)")
    parser.add_argument("--smoke", action="store_true", help="256 training images: a check that it runs, not a measure")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    parser.add_argument("--group", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return
    if 1 not in args.chains or (args.processes and 1 not in args.processes):
        parser.error("--chains and --processes must include 1 (the ratios are over one chain alone)")
    device = torch.device(args.device)
    rows, method = measure(args)
    facts = {**describe(device), "chains_method": method}
    write(rows, facts, args, Path(args.out))
    width = max(len(r["measure"]) for r in rows)
    print(f"{facts['device']}, torch {facts['torch']}, CUDA {facts['cuda']}")
    for r in rows:
        print(f"{r['measure']:<{width}}  {r['value']:.3f}")
    print(f"wrote {Path(args.out) / 'gpu.csv'} and gpu.md")


if __name__ == "__main__":
    main()
