#!/usr/bin/env python
"""Cost of one sampling step on the CIFAR ResNet-18 parameter shapes (11.17M parameters), side by side.

Variants, each on its own copy of the parameters with fixed random gradients:
  sgd_momentum          torch.optim.SGD(momentum=0.9, weight_decay=5e-4, foreach=True)
  least_work            the same plus one standard-normal draw per parameter tensor, added to the parameters
                        (the least work a noisy step needs)
  csg_sghmc, csg_sgld   csg.samplers.SGHMC / SGLD at temperature 1 (noise on)
  authors_noise_loss    the authors' formulation: sum(p * noise) added to the loss and back-propagated,
                        then the SGD-momentum step
  posteriors_sghmc      the posteriors library's SGHMC (optional: pip install posteriors); its update also
                        differentiates the log posterior, here a linear function whose gradient is the
                        fixed gradient
Timings interleave the variants over several rounds and take medians; ratios are what the README reports.

    python scripts/bench_step.py [--rounds 7] [--iterations 10]
"""

import argparse
import platform
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402
import torch  # noqa: E402

from csg.io.atomic import atomic_write_text  # noqa: E402
from csg.models import create_model  # noqa: E402
from csg.samplers import SGHMC, SGLD  # noqa: E402

LR, WD, N, MOMENTUM = 0.01, 5e-4, 50000, 0.9


def resnet18_params(seed: int):
    torch.manual_seed(seed)
    params = [torch.nn.Parameter(p.detach().clone()) for p in create_model("resnet18", num_classes=10).parameters()]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


def variants() -> dict:
    out = {}
    params = resnet18_params(0)
    sgd = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WD, foreach=True)
    out["sgd_momentum"] = sgd.step

    params = resnet18_params(0)
    sgd_ref = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WD, foreach=True)
    generator = torch.Generator().manual_seed(1)
    std = (2 * LR * (1 - MOMENTUM) / N) ** 0.5

    def least_work():
        sgd_ref.step()
        with torch.no_grad():
            noise = [torch.randn(p.shape, generator=generator) for p in params]
            torch._foreach_add_(params, noise, alpha=std)

    out["least_work"] = least_work

    params = resnet18_params(0)
    out["csg_sghmc"] = SGHMC(params, lr=LR, num_data=N, temperature=1.0, momentum=MOMENTUM, weight_decay=WD,
                             generator=torch.Generator().manual_seed(1)).step
    params = resnet18_params(0)
    out["csg_sgld"] = SGLD(params, lr=LR, num_data=N, temperature=1.0, weight_decay=WD,
                           generator=torch.Generator().manual_seed(1)).step

    params = resnet18_params(0)
    sgd_authors = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM, weight_decay=WD, foreach=True)
    noise_scale = (2 * (1 - MOMENTUM) / (LR * N)) ** 0.5  # their noise_loss: grad of sum(p * xi) * scale

    def authors_noise_loss():
        loss = sum((p * torch.randn(p.shape, generator=generator)).sum() for p in params) * noise_scale
        loss.backward()
        sgd_authors.step()

    out["authors_noise_loss"] = authors_noise_loss

    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import posteriors
        params = resnet18_params(0)
        tree = {str(i): p.detach() for i, p in enumerate(params)}
        fixed = {str(i): p.grad.detach() for i, p in enumerate(params)}

        def log_posterior(values, batch):
            return sum((values[k] * fixed[k]).sum() for k in values), torch.tensor(0.0)

        transform = posteriors.sgmcmc.sghmc.build(log_posterior, lr=LR, alpha=1 - MOMENTUM, temperature=1.0 / N)
        state = transform.init(tree)
        out["posteriors_sghmc"] = lambda: transform.update(state, None, inplace=True)
    except ImportError:
        print("posteriors is not installed: pip install posteriors (make bench does)")
    return out


def measure(functions: dict, rounds: int, iterations: int) -> dict:
    for f in functions.values():  # warm-up
        f()
    times = {name: [] for name in functions}
    for _ in range(rounds):
        for name, f in functions.items():
            start = time.perf_counter()
            for _ in range(iterations):
                f()
            times[name].append((time.perf_counter() - start) / iterations)
    return {name: sorted(values)[len(values) // 2] for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    torch.set_grad_enabled(True)
    medians = measure(variants(), args.rounds, args.iterations)
    rows = [{"variant": name, "median_ms": 1000 * value, "ratio_to_least_work": value / medians["least_work"],
             "ratio_to_sgd_momentum": value / medians["sgd_momentum"]} for name, value in medians.items()]
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    out = ROOT / "results" / "bench"
    atomic_write_text(out / "step.csv", table.to_csv(index=False))
    print(f"machine: {platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}, {date.today()}")


if __name__ == "__main__":
    main()
