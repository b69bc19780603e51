r"""Do the chains of a run agree? Diagnostics of function-space draws: split-R-hat, ESS, autocorrelation.

Deep networks' parameters are not comparable across chains (permutations, other modes), their predictions are:
the quantity diagnosed is each member's log-likelihood of every test example,
:math:`\ell_{kd,j} = \log p(y_j \mid x_j, \theta_{kd})` for draw :math:`d` of chain :math:`k`, one scalar
"parameter" per test example :math:`j`, with the members' weights left out (each member a draw of its chain).

- Split-R-hat (Vehtari, Gelman, Simpson, Carpenter and Bürkner 2021, rank-normalised, the larger of the bulk
  and folded values; ArviZ's ``rhat(method="rank")``) of each example, from chains cut to the length of the
  shortest; it needs at least 4 draws per chain. Its median over the examples is compared with
  :func:`exchangeable_rhat`: the 97.5th percentile of one example's split-R-hat when all draws are exchangeable
  (the chains agree and the draws are independent), at the same number of chains and draws. Rank-normalised,
  that reference is (nearly) free of the draws' distribution, so it is simulated once per shape. A median
  above it reads **disagree**: the chains predict differently (other modes, or chains that have not mixed).
  Whatever the dependence between the examples, at most 5 % of agreeing chains of independent draws read so
  (the median is above the 2.5 % tail only where half the examples are: Markov's inequality). A median at most
  1.01 (Vehtari et al.'s threshold) reads **agree**. Between the two: **no disagreement found**, and too few
  draws to show the 1.01 (with a few draws per chain, R-hat of agreeing chains is far above 1.01: 2 chains of
  12 independent draws have a median near 1.03); 2 chains of 4 draws hardly show a disagreement at all (two
  chains whose draws are wholly apart still read no disagreement found), 6 draws each can.
- ESS (bulk, ArviZ's ``ess(method="bulk")``) of each example, all chains together: its median and minimum.
- Within each chain: the lag-1 autocorrelation of each example's log-likelihood along the draws (ArviZ's
  ``autocorr``), its median over the examples, and the share of examples whose predicted class stays the same
  from one draw to the next.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from csg.evaluation import convergence

__all__ = ["AGREE_RHAT", "MIN_DRAWS", "ChainDiagnostics", "chain_diagnostics", "exchangeable_rhat", "sampling_lines"]

AGREE_RHAT = 1.01  # Vehtari et al. 2021's threshold
MIN_DRAWS = 4  # split-R-hat halves each chain, and needs two draws in each half
REFERENCE_QUANTILE = 0.975
QUANTITY = "log-likelihood of each test example"


@dataclass(frozen=True)
class ChainDiagnostics:
    """The diagnostics of a run's function-space draws (see the module); ``reading`` says what they mean in one
    line, ``verdict`` is ``agree``, ``disagree``, ``no disagreement found``, ``too few draws`` or ``one chain``.

    ``rhat_*`` are ``None`` where they cannot be computed (one chain, fewer than :data:`MIN_DRAWS` draws);
    ``lag1_autocorrelation`` and ``consecutive_agreement`` hold one value per chain (``None`` for a chain of
    fewer than 3, resp. 2, draws)."""

    quantity: str
    examples: int
    chains: int
    draws_per_chain: list[int]
    rhat_median: float | None
    rhat_max: float | None
    rhat_share_above: float | None  # the share of examples whose R-hat exceeds AGREE_RHAT
    rhat_reference: float | None  # exchangeable_rhat(chains, shortest chain)
    ess_bulk_median: float | None
    ess_bulk_min: float | None
    lag1_autocorrelation: list[float | None] = field(default_factory=list)
    consecutive_agreement: list[float | None] = field(default_factory=list)
    verdict: str = ""
    reading: str = ""
    temperatures: dict[str, Any] | None = None  # the sampler's (csg.evaluation.monitor.SamplerReading.to_dict())
    spread: dict[str, Any] | None = None  # the members' (csg.evaluation.spread.MemberSpread.to_dict())
    sampling_check: str | None = None  # the end-of-run line (csg.evaluation.sampling_check), None if nothing flagged

    @property
    def configurational_temperature(self) -> float | None:
        """The sampler's configurational temperature over its sampling steps (:mod:`csg.evaluation.monitor`)."""
        return (self.temperatures or {}).get("configurational")

    @property
    def kinetic_temperature(self) -> float | None:
        """SGHMC's kinetic temperature over its sampling steps (:mod:`csg.evaluation.monitor`)."""
        return (self.temperatures or {}).get("kinetic")

    @property
    def effective_members(self) -> float | None:
        """The members' effective number, from their disagreement (:mod:`csg.evaluation.spread`)."""
        return (self.spread or {}).get("effective_members")

    def to_dict(self) -> dict[str, Any]:
        """The diagnostics as JSON-ready values (metrics.json's ``diagnostics``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "ChainDiagnostics":
        """Diagnostics as :meth:`to_dict` wrote them."""
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in values.items() if key in names})

    def __str__(self) -> str:
        lines = sampling_lines(self.temperatures, self.spread, self.sampling_check)
        return "\n".join([f"chains: {self.reading}", *lines]) if lines else self.reading


def chain_diagnostics(log_likelihoods, chains: Sequence[int], predicted=None) -> ChainDiagnostics:
    """The diagnostics of draws ``log_likelihoods`` ``(members, examples)`` (a tensor or an array; member i a draw
    of chain ``chains[i]``, the members of each chain in draw order), with their predicted classes ``predicted``
    ``(members, examples)`` for the agreement from one draw to the next."""
    values = _array(log_likelihoods, np.float64)
    labels = list(int(c) for c in chains)
    if values.ndim != 2 or values.shape[0] != len(labels) or values.shape[0] == 0:
        raise ValueError(f"log_likelihoods: a (members, examples) array with one chain label per member; got shape "
                         f"{values.shape} and {len(labels)} labels")
    classes = _array(predicted, np.int64) if predicted is not None else None
    order = sorted(set(labels))
    rows = [np.flatnonzero(np.asarray(labels) == chain) for chain in order]
    draws = [len(r) for r in rows]
    lag1 = [_lag1(values[r]) for r in rows]
    agreement = [float((classes[r][1:] == classes[r][:-1]).mean()) if classes is not None and len(r) > 1 else None
                 for r in rows]
    shortest = min(draws)
    stacked = np.stack([values[r[:shortest]] for r in rows])  # (chains, draws, examples)
    ess = _finite(convergence.ess(stacked, "bulk")) if shortest >= MIN_DRAWS else np.array([])
    common = dict(quantity=QUANTITY, examples=values.shape[1], chains=len(order), draws_per_chain=draws,
                  ess_bulk_median=_stat(np.median, ess), ess_bulk_min=_stat(np.min, ess),
                  lag1_autocorrelation=lag1, consecutive_agreement=agreement)
    within = _within(lag1, agreement)
    if len(order) == 1:
        ess_text = (f"ESS (bulk) median {common['ess_bulk_median']:.1f} of {shortest} draws"
                    if common["ess_bulk_median"] is not None else f"{shortest} draws")
        return ChainDiagnostics(**common, rhat_median=None, rhat_max=None, rhat_share_above=None, rhat_reference=None,
                                verdict="one chain", reading=f"one chain: no R-hat across chains (train with "
                                f"sampler.chains=K > 1 to compare chains); {ess_text}{within}")
    if shortest < MIN_DRAWS:
        return ChainDiagnostics(**common, rhat_median=None, rhat_max=None, rhat_share_above=None, rhat_reference=None,
                                verdict="too few draws", reading=f"{len(order)} chains, the shortest of {shortest} "
                                f"draws: too few for split-R-hat (at least {MIN_DRAWS} draws per chain){within}")
    rhat = _finite(convergence.rank_rhat(stacked))
    reference = exchangeable_rhat(len(order), shortest)
    if not rhat.size:
        return ChainDiagnostics(**common, rhat_median=None, rhat_max=None, rhat_share_above=None,
                                rhat_reference=reference, verdict="too few draws", reading="no test example's "
                                f"log-likelihood varies across the draws: R-hat is undefined{within}")
    median = float(np.median(rhat))
    where = f"median split-R-hat {median:.3f} over {rhat.size} test log-likelihoods ({len(order)} chains of {shortest} draws)"
    if median > reference:
        verdict, reading = "disagree", (f"chains disagree: {where}, above {reference:.3f}, the 97.5th percentile "
                                        "for chains that agree: they predict differently (other modes, or not mixed)")
    elif median <= AGREE_RHAT:
        verdict, reading = "agree", f"chains agree: {where}, at most {AGREE_RHAT}"
    else:
        verdict, reading = "no disagreement found", (
            f"no disagreement found: {where}, within {reference:.3f}, the 97.5th percentile for chains that agree; "
            f"too few draws to show R-hat <= {AGREE_RHAT}")
    return ChainDiagnostics(**common, rhat_median=median, rhat_max=float(rhat.max()),
                            rhat_share_above=float((rhat > AGREE_RHAT).mean()), rhat_reference=reference,
                            verdict=verdict, reading=reading + within)


def sampling_lines(temperatures: dict[str, Any] | None, spread: dict[str, Any] | None,
                   check: str | None) -> list[str]:
    """Does the chain sample? The lines a run prints under its table and :class:`ChainDiagnostics` under its reading:
    the sampler's temperatures (:mod:`csg.evaluation.monitor`), the members' spread (:mod:`csg.evaluation.spread`)
    and the end-of-run line (:mod:`csg.evaluation.sampling_check`), each where recorded."""
    from csg.evaluation.monitor import SamplerReading
    from csg.evaluation.spread import MemberSpread

    lines = [f"sampler: {SamplerReading.from_dict(temperatures)}"] if temperatures is not None else []
    lines += [f"members: {MemberSpread.from_dict(spread)}"] if spread is not None else []
    return lines + ([check] if check else [])


@functools.lru_cache(maxsize=64)
def exchangeable_rhat(chains: int, draws: int, variables: int = 2000, seed: int = 0) -> float:
    """The 97.5th percentile of one example's rank-normalised split-R-hat when ``chains`` chains of ``draws``
    independent draws come from one distribution: simulated (standard normal draws of ``variables`` examples,
    seeded), as rank normalisation makes it (nearly) the same for any continuous distribution."""
    generator = np.random.default_rng(seed)
    rhat = _finite(convergence.rank_rhat(generator.standard_normal((chains, draws, variables))))
    return float(np.quantile(rhat, REFERENCE_QUANTILE))


def _lag1(series: np.ndarray) -> float | None:
    """The median over examples of the lag-1 autocorrelation of ``series`` ``(draws, examples)``
    (:func:`csg.evaluation.convergence.autocorrelation`); None for fewer than 3 draws or no example that varies."""
    if series.shape[0] < 3:
        return None
    varies = series.std(0) > 0
    if not varies.any():
        return None
    lag1 = convergence.autocorrelation(series[:, varies])[1]
    return _stat(np.median, _finite(lag1))


def _within(lag1: list[float | None], agreement: list[float | None]) -> str:
    known = [(a, g) for a, g in zip(lag1, agreement) if a is not None or g is not None]
    if not known:
        return ""
    parts = []
    lags = [a for a, _ in known if a is not None]
    if lags:
        parts.append(f"lag-1 autocorrelation {min(lags):.2f}..{max(lags):.2f}" if len(lags) > 1 else
                     f"lag-1 autocorrelation {lags[0]:.2f}")
    agrees = [g for _, g in known if g is not None]
    if agrees:
        parts.append(f"consecutive draws predict the same class for {100 * min(agrees):.0f}% of examples or more")
    return "; within a chain: " + ", ".join(parts)


def _array(values, dtype) -> np.ndarray:
    if hasattr(values, "detach"):  # a torch tensor, on any device
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=dtype)


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    return values[np.isfinite(values)]


def _stat(function, values: np.ndarray) -> float | None:
    return float(function(values)) if np.size(values) else None
