r"""The peers' samplers in the posterior benchmark's harness, run through their own public APIs as their users run
them (an optional, pinned extra: ``pip install csg[bench]``).

``posteriors cSGLD``: the `posteriors <https://github.com/normal-computing/posteriors>`_ library's SGLD
(``posteriors.sgmcmc.sgld.build``; its update :math:`\theta \leftarrow \theta + \epsilon \nabla \log p(\theta)
+ \sqrt{2 \epsilon T_p}\,\xi`) in a plain PyTorch loop over the benchmark's data, on the same network, prior and
batches, with csg's cyclical schedule (:class:`csg.schedules.Cyclical`, the preset's cSGLD settings) and collection
rule (:func:`csg.schedules.collection_points`): the library's documented convention, a log posterior
averaged over the batch, :math:`\log p = -\overline{\ell} + \log \mathcal N(\theta; 0, (N\,\mathrm{wd})^{-1}) / N
= -U / N`, with its temperature :math:`T_p = T / N` in the sampling stages and 0 in the exploration stages (the
library's own reading of temperature 0: optimisation), so that the chain targets csg's :math:`\exp(-U/T)` with
csg's step on the mean loss. ``inplace=False``: the state classes of posteriors 0.1.3 share their tensor defaults
(tensordict 0.15), so an in-place update would leak a chain's step count into the next chain's fresh state.

``laplace-torch LL-KFAC``: `laplace-torch <https://github.com/aleximmer/Laplace>`_'s last-layer Laplace with a
Kronecker-factored GGN (``Laplace(model, "classification", subset_of_weights="last_layer",
hessian_structure="kron")``, ``fit``, the ``glm`` predictive with the probit link) around a MAP trained by the user's
own loop (SGD with momentum 0.9 and csg's weight decay on the mean loss, a cosine decay of the step over the
budget); the library sums the likelihood over the data and its posterior precision is H / temperature + prior
precision, so ``temperature=T`` and ``prior_precision = N wd / T`` give csg's exp(-U / T) restricted to the last
layer. Its predictive is a Gaussian's, not a finite ensemble: ``members`` is NaN (no floor beside it). The budget
counts the MAP's gradients; the fit's one pass over the data (its curvature) is not counted (1/200 of the 1x budget).

``torch-uncertainty cSGLD``: `torch-uncertainty <https://github.com/ENSTA-U2IS-AI/torch-uncertainty>`_'s SGLD
optimizer (``torch_uncertainty.optim.SGLD``: :math:`\theta \leftarrow \theta - \epsilon (g + \mathrm{wd}\,
\theta) + \sqrt{2 \epsilon}\,\nu\,\xi` on the mean loss's gradient g) in a plain loop with csg's cyclical
schedule set on its param group each step, its ``noise_factor`` :math:`\nu = \sqrt{T / N}` in the sampling stages and 0
in the exploration stages (the library has no temperature or data-set size: both enter through it), the samples
collected by its ``CheckpointCollector`` at csg's collection epochs (``save_schedule``) and averaged from the
collector's stacked logits.

A peer's row has the keys of :func:`.contenders.run_contender`'s; its predictive is scored by the same functions.
"""

from __future__ import annotations

import math
import time
import warnings
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["PEERS", "peer_recipe_lr0", "run_peer", "peer_validation_nll"]

# peer -> the csg sampler whose settings (recipe step, schedule) it takes
PEERS = {"posteriors cSGLD": "sampler=csgld", "torch-uncertainty cSGLD": "sampler=csgld",
         "laplace-torch LL-KFAC": "sampler=sgdm"}
BATCH = 100


@cache
def _setting(name: str, temperature: float, overrides: tuple[str, ...]):
    from studies.benchmark.task import compose, load_task

    cfg = compose(temperature, (PEERS[name], *overrides))
    task, model = load_task(temperature, overrides)
    return cfg, task, model


def peer_recipe_lr0(name: str, temperature: float) -> float:
    return float(_setting(name, temperature, ())[0].sampler.lr0)


def _posteriors():
    with warnings.catch_warnings():      # tensordict 0.15 warns at import about the shared defaults (above)
        warnings.simplefilter("ignore", FutureWarning)
        import posteriors
    return posteriors


def _members(name: str, budget_epochs: int, seed: int, temperature: float, lr0: float, overrides: tuple[str, ...]):
    """Train peer ``name``: its members (parameter dicts of the network after the pooling, or one
    :class:`_Predictive`: the library's own), the head module, the task, and the training seconds."""
    import torch

    if name == "laplace-torch LL-KFAC":
        return _laplace(budget_epochs, seed, temperature, lr0, overrides)
    if name == "torch-uncertainty cSGLD":
        return _torch_uncertainty(budget_epochs, seed, temperature, lr0, overrides)
    posteriors = _posteriors()
    _, task, model = _setting(name, temperature, overrides)
    schedule, epochs, batches, points = _schedule(name, budget_epochs, temperature, lr0, overrides)
    wanted = {point.iteration for point in points}
    head = _init(model, seed)
    x, y = torch.from_numpy(task.train_x), torch.from_numpy(task.train_y)
    n, sd = task.num_data, (task.num_data * task.weight_decay) ** -0.5

    def log_posterior(params, batch):
        inputs, labels = batch
        out = torch.func.functional_call(head, params, (inputs,))
        mean_ll = -torch.nn.functional.cross_entropy(out, labels)
        prior = posteriors.diag_normal_log_prob(params, sd_diag=sd, normalize=False)
        return mean_ll + prior / n, torch.tensor([])

    def step_of(state_step) -> int:
        return int(state_step)

    transform = posteriors.sgmcmc.sgld.build(
        log_posterior, lr=lambda k: schedule.lr(step_of(k)),
        temperature=lambda k: temperature / n if schedule.sampling(step_of(k)) else 0.0)
    state = transform.init({k: v.detach().clone() for k, v in head.named_parameters()})
    shuffle, members, k = _shuffled(n, batches, seed), [], 0
    started = time.perf_counter()
    for _ in range(epochs):
        for index in shuffle():
            state, _ = transform.update(state, (x[index], y[index]), inplace=False)
            if not all(torch.isfinite(v).all() for v in state.params.values()):
                from csg.errors import DivergenceError

                raise DivergenceError(f"{name}: non-finite weights at iteration {k}")
            if k in wanted:
                members.append({key: v.detach().clone() for key, v in state.params.items()})
            k += 1
    return members, head, task, time.perf_counter() - started


def _init(model, seed: int):
    """The network after its parameter-free layers, freshly initialised from ``seed``."""
    import copy

    import torch

    from studies.benchmark.task import split

    torch.manual_seed(seed)
    head = copy.deepcopy(split(model)[1])
    for layer in head:
        if hasattr(layer, "reset_parameters"):
            layer.reset_parameters()
    return head


class _Predictive:
    """A peer's own predictive as one "member": ``probs(inputs)`` and how many members it averages (NaN: none)."""

    def __init__(self, probs, count: float, source=None):
        self.probs, self.count, self.source = probs, count, source   # source: the library's own object


def _schedule(name: str, budget_epochs: int, temperature: float, lr0: float, overrides: tuple[str, ...]):
    """csg's cyclical schedule and collection epochs of the peer's csg sampler (cSGLD's cycles at this budget)."""
    from csg.schedules import collection_points
    from csg.schedules import Cyclical
    from studies.benchmark.contenders import CONTENDERS, fitted

    cfg, task, _ = _setting(name, temperature, overrides)
    epochs, cycles, samples = fitted(CONTENDERS["cSGLD"], budget_epochs)
    batches = math.ceil(task.num_data / BATCH)
    schedule = Cyclical(lr0, epochs * batches, cycles, float(cfg.sampler.explore),
                        hold_sampling_lr=bool(cfg.sampler.get("hold_sampling_lr", False)))
    return schedule, epochs, batches, collection_points(schedule, epochs, batches, samples)


def _torch_uncertainty(budget_epochs: int, seed: int, temperature: float, lr0: float, overrides: tuple[str, ...]):
    """torch-uncertainty's SGLD and CheckpointCollector in a plain loop (module docstring)."""
    import torch

    name = "torch-uncertainty cSGLD"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch_uncertainty.methods import CheckpointCollector
        from torch_uncertainty.optim import SGLD
    _, task, model = _setting(name, temperature, overrides)
    schedule, epochs, batches, points = _schedule(name, budget_epochs, temperature, lr0, overrides)
    head = _init(model, seed)
    collector = CheckpointCollector(head, save_schedule=[p.epoch for p in points], use_final_model=False)
    optimizer = SGLD(head.parameters(), lr=lr0, noise_factor=0.0, weight_decay=task.weight_decay)
    x, y = torch.from_numpy(task.train_x), torch.from_numpy(task.train_y)
    n, noise = task.num_data, (temperature / task.num_data) ** 0.5
    shuffle = _shuffled(n, batches, seed)

    def scheduled(k: int) -> None:      # csg's cyclical step and the stage's noise, set on the param groups
        for group in optimizer.param_groups:
            group["lr"], group["noise_factor"] = schedule.lr(k), noise if schedule.sampling(k) else 0.0

    started = time.perf_counter()
    _train(head, x, y, optimizer, epochs, shuffle, name + ": the loss became {loss} at iteration {k}",
           before_step=scheduled, after_epoch=collector.update_wrapper)
    collector.eval()
    count = int(collector.num_estimators)

    def probs(inputs):
        with torch.no_grad():
            return collector(inputs).reshape(count, len(inputs), -1).softmax(-1).mean(0)

    return [_Predictive(probs, float(count), collector)], head, task, time.perf_counter() - started


def _shuffled(n: int, batches: int, seed: int):
    """One epoch's batches of a run, as a plain loop draws them: each call a fresh shuffle of the ``n`` training
    examples (one generator per run, seeded by ``seed``) cut into ``batches`` index tensors of :data:`BATCH`."""
    import torch

    generator = torch.Generator().manual_seed(seed)

    def epoch() -> list:
        order = torch.randperm(n, generator=generator)
        return [order[b * BATCH:(b + 1) * BATCH] for b in range(batches)]

    return epoch


def _train(head, x, y, optimizer, epochs: int, shuffle, diverged: str, *, before_step=None, after_step=None,
           after_epoch=None) -> None:
    """The peer's user's own plain loop: ``epochs`` passes over ``shuffle``'s batches, each an ``optimizer`` step on
    the mean cross-entropy, with ``before_step(k)`` before it (k: the iteration), ``after_step()`` after it and
    ``after_epoch(epoch)`` after each pass. A non-finite loss raises DivergenceError: ``diverged`` formatted with the
    ``loss`` and the iteration ``k``."""
    import torch

    from csg.errors import DivergenceError

    k = 0
    for epoch in range(epochs):
        for index in shuffle():
            if before_step is not None:
                before_step(k)
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(head(x[index]), y[index])
            if not torch.isfinite(loss):
                raise DivergenceError(diverged.format(loss=loss.item(), k=k))
            loss.backward()
            optimizer.step()
            if after_step is not None:
                after_step()
            k += 1
        if after_epoch is not None:
            after_epoch(epoch)


def _laplace(budget_epochs: int, seed: int, temperature: float, lr0: float, overrides: tuple[str, ...]):
    """A MAP by the user's own SGD loop, then laplace-torch's last-layer KFAC Laplace (module docstring): the fitted
    ``Laplace`` object as the one "member", the head, the task and the training seconds (the MAP's and the fit's)."""
    import torch

    _, task, model = _setting("laplace-torch LL-KFAC", temperature, overrides)
    head = _init(model, seed)
    x, y = torch.from_numpy(task.train_x), torch.from_numpy(task.train_y)
    n, batches = task.num_data, math.ceil(task.num_data / BATCH)
    optimizer = torch.optim.SGD(head.parameters(), lr=lr0, momentum=0.9, weight_decay=task.weight_decay)
    decay = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, budget_epochs * batches)
    shuffle = _shuffled(n, batches, seed)
    started = time.perf_counter()
    _train(head, x, y, optimizer, budget_epochs, shuffle, "laplace-torch LL-KFAC: the MAP's loss became {loss}",
           after_step=decay.step)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)    # the library's unconditional note on link_approx
        from laplace import Laplace

        fitted = Laplace(head, "classification", subset_of_weights="last_layer", hessian_structure="kron",
                         prior_precision=n * task.weight_decay / temperature, temperature=temperature)
        fitted.fit(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH))

    def probs(inputs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fitted(inputs, pred_type="glm", link_approx="probit").detach()

    return [_Predictive(probs, math.nan, fitted)], head, task, time.perf_counter() - started


def _predictive(head, members: list, features) -> "torch.Tensor":
    import torch

    inputs = torch.as_tensor(features)
    if members and isinstance(members[0], _Predictive):      # a peer's own predictive
        return torch.cat([members[0].probs(inputs[i:i + 1000]) for i in range(0, len(inputs), 1000)])
    with torch.no_grad():
        return torch.stack([torch.func.functional_call(head, m, (inputs,)).softmax(-1) for m in members]).mean(0)


def peer_validation_nll(name: str, budget_epochs: int, temperature: float, lr0: float, seeds, batches: list,
                        overrides: tuple[str, ...] = ()) -> float:
    """:func:`.tuning.validation_nll` for a peer: its ensemble's mean NLL on the held-out digits over ``seeds``."""
    import torch

    from csg.errors import DivergenceError
    from studies.benchmark.task import split

    values = []
    for seed in seeds:
        try:
            members, head, _, _ = _members(name, budget_epochs, seed, temperature, lr0, overrides)
        except DivergenceError:
            return math.inf
        pool = split(_setting(name, temperature, overrides)[2])[0]
        nll = [torch.nn.functional.nll_loss(_predictive(head, members, pool(bx)).clamp_min(1e-300).log(), by,
                                            reduction="sum").item() for bx, by in batches]
        values.append(sum(nll) / sum(len(by) for _, by in batches))
    return float(np.mean(values))


def run_peer(name: str, budget_epochs: int, seed: int, temperature: float, lr0: float, *,
             reference: str | Path | None = None, overrides: tuple[str, ...] = ()) -> dict:
    """Train peer ``name`` and score its predictive: the row of :func:`.contenders.run_contender`."""
    import torch

    from csg.evaluation.metrics import classification_metrics
    from csg.evaluation.ood import ood_metrics
    from csg.evaluation.reference_predictive import load_reference, score_predictive

    members, head, task, seconds = _members(name, budget_epochs, seed, temperature, lr0, overrides)
    test = _predictive(head, members, task.test_x)
    metrics = classification_metrics(test, torch.from_numpy(task.test_y))
    ood = _predictive(head, members, task.ood_x) if len(task.ood_x) else None
    row = {"method": name, "budget_epochs": budget_epochs, "seed": seed, "temperature": temperature, "lr0": lr0,
           "members": members[0].count if isinstance(members[0], _Predictive) else len(members), "gradient_evaluations": budget_epochs * math.ceil(task.num_data / BATCH),
           "train_seconds": seconds, "error_pct": metrics["test_error_pct"], "nll": metrics["nll"],
           "ece": metrics["ece"], "ood_auroc": float(ood_metrics(test, ood)["auroc"]) if ood is not None else math.nan}
    if reference is not None:
        scores = score_predictive(test.numpy(), load_reference(reference), None if ood is None else ood.numpy())
        row.update(agreement=scores["test"]["agreement"], tv=scores["test"]["total_variation"])
        if "ood" in scores:
            row.update(ood_agreement=scores["ood"]["agreement"], ood_tv=scores["ood"]["total_variation"])
    return row
