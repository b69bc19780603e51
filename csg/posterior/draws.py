r"""A posterior's function-space draws: what every member predicts on a labelled data set, chain by chain.

:func:`function_draws` evaluates each member :math:`\theta_i` on every example :math:`(x_j, y_j)` once and keeps
its log-likelihood :math:`\log p(y_j \mid x_j, \theta_i)`, its predicted class and (asked for) its class
probabilities: :class:`FunctionDraws`. They give the diagnostics across chains
(:func:`csg.evaluation.diagnostics.chain_diagnostics`) and ArviZ's ``InferenceData``
(:meth:`FunctionDraws.to_inference_data`), where the parameters of a network are no use: members of two chains
are comparable by what they predict, not by their weights.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from csg.evaluation.diagnostics import ChainDiagnostics, chain_diagnostics

__all__ = ["FunctionDraws", "arviz_major", "function_draws", "run_diagnostics"]


def arviz_major() -> int:
    """The installed ArviZ's major version: 0 (``InferenceData``, ``from_dict(**groups)``) or 1 (xarray's
    ``DataTree``, ``from_dict(groups)``)."""
    import arviz as az

    return int(az.__version__.split(".")[0])


@dataclass
class FunctionDraws:
    """Every member's predictions of ``examples`` labelled inputs, members in the posterior's order (each chain's
    in draw order), on the CPU.

    ``log_likelihood``: float64 ``(members, examples)``, :math:`\\log p(y_j \\mid x_j, \\theta_i)`;
    ``predicted``: int64 ``(members, examples)``, the arg-max class; ``targets``: int64 ``(examples,)``;
    ``chains``, ``weights``, ``names``: each member's chain, weight and name; ``probs``: float32
    ``(members, examples, classes)`` where kept, else None."""

    log_likelihood: Tensor
    predicted: Tensor
    targets: Tensor
    chains: list[int]
    weights: list[float]
    names: list[str]
    probs: Tensor | None = None

    def diagnostics(self) -> ChainDiagnostics:
        """Split-R-hat, ESS and autocorrelation of the log-likelihoods (:mod:`csg.evaluation.diagnostics`)."""
        return chain_diagnostics(self.log_likelihood, self.chains, self.predicted)

    def by_chain(self) -> tuple[list[int], list[list[int]], int]:
        """(the chains in order, each chain's member indices in draw order, the draws of the shortest chain)."""
        order = sorted(set(self.chains))
        rows = [[i for i, chain in enumerate(self.chains) if chain == c] for c in order]
        return order, rows, min(len(r) for r in rows)

    def to_inference_data(self, attrs: dict[str, Any] | None = None):
        """ArviZ's data of the draws (ArviZ 0.x: an ``InferenceData``; ArviZ 1.x: an ``xarray.DataTree``, which
        ArviZ 1.x uses in its place; the groups and variables are the same), with dimensions ``chain`` (the run's
        chain numbers) and ``draw``
        (each chain's members in order; chains are cut to the shortest one's length, the number left out is the
        attribute ``draws_left_out``), and ``example`` (and ``class``):

        - ``log_likelihood["y"]``: (chain, draw, example), for ``az.loo(data, reff=1.0)`` (and ArviZ 0.x's
          ``az.waic``);
        - ``posterior_predictive["label"]``: (chain, draw, example), each member's predicted class, and, where
          kept, ``posterior_predictive["probs"]``: (chain, draw, example, class), its probabilities;
        - ``observed_data["y"]``: (example,), the labels;
        - ``sample_stats["weight"]``: (chain, draw), each member's weight w_i in the model average;
        - the attributes ``draws_left_out``, ``members`` and those of ``attrs``.
        """
        import arviz as az

        order, rows, draws = self.by_chain()
        kept = [r[:draws] for r in rows]

        def arranged(values: Tensor):
            return torch.stack([values[r] for r in kept]).numpy()

        predictive = {"label": arranged(self.predicted)}
        if self.probs is not None:
            predictive["probs"] = arranged(self.probs)
        weights = torch.tensor(self.weights, dtype=torch.float64)
        left_out = len(self.chains) - draws * len(order)
        groups = {"log_likelihood": {"y": arranged(self.log_likelihood)}, "posterior_predictive": predictive,
                  "observed_data": {"y": self.targets.numpy()}, "sample_stats": {"weight": arranged(weights)}}
        attrs = {**(attrs or {}), "draws_left_out": left_out, "members": len(self.chains)}
        options = {"coords": {"chain": order, "draw": list(range(draws)), "example": list(range(self.targets.numel())),
                              **({"class": list(range(self.probs.shape[-1]))} if self.probs is not None else {})},
                   "dims": {"y": ["example"], "label": ["example"], "probs": ["example", "class"]}}
        if arviz_major() >= 1:  # one dict of groups in, a DataTree out; attrs set on the tree
            data = az.from_dict(groups, **options)
            data.attrs.update(attrs)
            return data
        return az.from_dict(**groups, **options, attrs=attrs)


@torch.no_grad()
def function_draws(members: Iterable[tuple[nn.Module, float]], probs_of: Callable[[nn.Module, Tensor], Tensor],
                   batches: Iterable[tuple[Tensor, Tensor]], *, chains: list[int], names: list[str],
                   keep_probs: bool = False) -> FunctionDraws:
    """The draws of ``members`` (``(model, weight)`` pairs, as iterating a :class:`~csg.Posterior` yields them) on
    ``batches`` of ``(x, y)`` (read once per member, the same batches each time): ``probs_of(model, x)`` gives a
    member's probabilities of a batch. ``keep_probs`` keeps every member's probabilities too (memory: members x
    examples x classes floats)."""
    log_likelihood, predicted, probs, weights = [], [], [], []
    targets: Tensor | None = None
    for model, weight in members:
        rows, labels = [], []
        for x, y in batches:
            rows.append(probs_of(model, x).float().cpu())
            labels.append(y.cpu().long())
        member, targets = torch.cat(rows), torch.cat(labels)
        log_likelihood.append(member.gather(1, targets[:, None]).squeeze(1).double().clamp_min(1e-300).log())
        predicted.append(member.argmax(1))
        weights.append(float(weight))
        if keep_probs:
            probs.append(member)
    if targets is None:
        raise ValueError("no members to evaluate")
    return FunctionDraws(log_likelihood=torch.stack(log_likelihood), predicted=torch.stack(predicted),
                         targets=targets, chains=list(chains), weights=weights, names=list(names),
                         probs=torch.stack(probs) if keep_probs else None)


def run_diagnostics(posterior, loader=None) -> ChainDiagnostics:
    """:meth:`csg.Posterior.diagnostics`: the chains' diagnostics (metrics.json's where recorded and ``loader`` is
    None, else computed on ``loader``, or on the run's test set), with the run's recorded sampler ``temperatures``
    and ``sampling_check``, and the members' ``spread`` (recorded, or computed from the draws' probabilities)."""
    from csg.evaluation.spread import member_spread

    metrics = posterior.metrics
    spread = metrics.get("spread")
    if loader is None and isinstance(metrics.get("diagnostics"), dict):
        diagnostics = ChainDiagnostics.from_dict(metrics["diagnostics"])
    else:
        wanted = loader is not None or not isinstance(spread, dict)
        draws = posterior.function_draws(loader, probabilities=wanted)
        diagnostics = draws.diagnostics()
        spread = member_spread(draws.probs, draws.weights).to_dict() if wanted else spread
    return with_run_readings(diagnostics, metrics, spread)


def with_run_readings(diagnostics: ChainDiagnostics, metrics: dict, spread: dict | None = None) -> ChainDiagnostics:
    """``diagnostics`` with the sampler's temperatures and the end-of-run line ``metrics`` records, and ``spread``."""
    from dataclasses import replace

    sampling, check = metrics.get("sampling"), metrics.get("sampling_check")
    return replace(diagnostics, temperatures=sampling if isinstance(sampling, dict) else None,
                   spread=spread if isinstance(spread, dict) else None,
                   sampling_check=check if isinstance(check, str) else None)
