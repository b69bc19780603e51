r"""The end-of-run line: does the chain sample? What the sampler's temperatures, its stages' motion, the members'
spread and the training loss say, with the setting that would change each.

It reads what a run measured without a reference (:mod:`csg.evaluation.monitor`, :mod:`csg.evaluation.spread`) and
flags, each with its threshold:

- a **configurational temperature** outside [T / 2, 2 T]: below, the chain sits nearer a mode of U than the
  tempered posterior's bulk (a noise-free exploration stage leaves it at a mode, where it reads about 0; the
  sampling stage has not carried it out); above, it is hotter than T (too large a step, or not relaxed from a hot
  start);
- a **kinetic temperature** (SGHMC) outside [T / 2, 2 T]: above, the mini-batch gradient noise, which the update
  does not correct for, heats the momentum;
- a median sampling stage whose **relaxation** is below 1: its injected noise cannot carry a weight across the
  scale the prior and T imply in the steps it takes (:mod:`csg.evaluation.monitor`);
- members that are **near copies**: fewer than half as many effective members as members (at least 3 members);
- a **training loss still falling**: the last cycle's exploration ends 20 % (and 0.005 nats) below the previous
  one's, or each of the last two cycles' ends 10 % below the one before (and 0.005 nats over the two: a slow,
  steady descent, as a step 10 times too small gives); without cycles, the last tenth of the epochs against the
  tenth before: the network is undertrained.

The temperatures are not judged for the contour samplers, whose target is flattened, not exp(-U / T).
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import Any

__all__ = ["BAND", "NEAR_COPIES", "OUTLIER", "falling_loss", "sampling_check"]

BAND = (0.5, 2.0)  # a temperature within [BAND[0] T, BAND[1] T] reads as T
NEAR_COPIES = 0.5  # effective members below this share of the members: near copies
FALL, FALL_NATS = 0.8, 0.005  # the loss still falling: below 0.8 x the earlier value, by more than 0.005 nats
STEADY = 0.9  # or twice in a row below 0.9 x the cycle before


def sampling_check(temperatures: dict[str, Any] | None, spread: dict[str, Any] | None, *,
                   epochs: Sequence[dict[str, Any]] = (), judge_temperatures: bool = True,
                   regression: dict[str, Any] | None = None) -> str | None:
    """The line that says why the run's members may not be posterior draws, or None when nothing is flagged.

    ``temperatures``: a :class:`~csg.evaluation.monitor.SamplerReading`'s ``to_dict()`` (or the chains' mean);
    ``spread``: a :class:`~csg.evaluation.spread.MemberSpread`'s ``to_dict()``; ``epochs``: the epochs'
    ``{"cycle", "stage", "train_loss"}`` rows of one chain; ``regression``: a regression run's metrics
    (``ensemble`` and ``per_sample``), whose ensemble RMSE past :data:`OUTLIER` x its best member's, or whose
    non-finite test log-likelihood, says that a member is far off."""
    reasons = [] if regression is None else _regression_outlier(regression)
    low, high = BAND
    if temperatures and judge_temperatures and temperatures.get("target"):
        target = temperatures["target"]
        configurational, kinetic = temperatures.get("configurational"), temperatures.get("kinetic")
        if configurational is not None and configurational < low * target:
            where = ("still descending (theta . grad U < 0)" if configurational < 0 else
                     "near the mode its exploration found")
            reasons.append(f"configurational temperature {configurational:.3g} against T = {target:.3g}: the chain "
                           f"is {where}, not in the tempered posterior's bulk (lengthen the sampling stage: "
                           "sampler.explore lower or trainer.epochs higher; or a larger sampling step: sampler.lr0)")
        elif configurational is not None and configurational > high * target:
            reasons.append(f"configurational temperature {configurational:.3g} against T = {target:.3g}: hotter "
                           "than the target (a smaller step: sampler.lr0)")
        if kinetic is not None and kinetic > high * target:
            reasons.append(f"kinetic temperature {kinetic:.3g} against T = {target:.3g}: mini-batch gradient noise "
                           "heats the momentum (a smaller step, sampler.lr0, or larger batches, data.batch_size)")
        elif kinetic is not None and kinetic < low * target:
            reasons.append(f"kinetic temperature {kinetic:.3g} against T = {target:.3g}: the momentum is colder "
                           "than the target (a longer sampling stage: sampler.explore lower)")
    relaxation = (temperatures or {}).get("relaxation")
    if relaxation is not None and relaxation < 1.0:
        reasons.append(f"a sampling stage takes {relaxation:.2g} of the steps its noise needs to cross the "
                       "prior's scale (more sampling steps: sampler.explore lower or trainer.epochs higher)")
    if spread and spread.get("members", 0) >= 3 and spread["effective_members"] < NEAR_COPIES * spread["members"]:
        reasons.append(f"the {spread['members']} members are worth {spread['effective_members']:.1f}: near copies "
                       "(fewer samples per cycle, sampler.samples_per_cycle, or more cycles: sampler.cycles)")
    fall = falling_loss(epochs)
    if fall is not None:
        reasons.append(f"the training loss is still falling ({fall[0]:.4g} -> {fall[1]:.4g}): the network is "
                       "undertrained (a larger step, sampler.lr0, or trainer.epochs higher)")
    if not reasons:
        return None
    return "does the chain sample? not as run: " + "; ".join(reasons)


def falling_loss(epochs: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """(earlier, later) training losses when the loss is still falling (see the module), else None."""
    rows = [e for e in epochs if e.get("train_loss") is not None]
    if len(rows) < 10:
        return None
    ends: dict[int, float] = {}
    for row in rows:  # the loss of each cycle's last exploration epoch
        if row.get("stage") == "exploration" and row.get("cycle") is not None:
            ends[int(row["cycle"])] = float(row["train_loss"])
    if len(ends) >= 2:
        cycles = sorted(ends)
        earlier, later = ends[cycles[-2]], ends[cycles[-1]]
        if len(ends) >= 3 and not (later < FALL * earlier and earlier - later > FALL_NATS):
            first = ends[cycles[-3]]
            if later < STEADY * earlier and earlier < STEADY * first and first - later > FALL_NATS:
                return first, later
    else:
        tenth = max(len(rows) // 10, 1)
        earlier = sum(float(r["train_loss"]) for r in rows[-2 * tenth:-tenth]) / tenth
        later = sum(float(r["train_loss"]) for r in rows[-tenth:]) / tenth
    if later < FALL * earlier and earlier - later > FALL_NATS:
        return earlier, later
    return None


OUTLIER = 1.5  # an ensemble RMSE past this many times its best member's: a member far from the others


def _regression_outlier(metrics: dict[str, Any]) -> list[str]:
    ensemble, members = metrics.get("ensemble") or {}, metrics.get("per_sample") or []
    rmse = [(m.get("rmse"), m.get("file", "?")) for m in members if isinstance(m.get("rmse"), (int, float))]
    if not rmse or not isinstance(ensemble.get("rmse"), (int, float)):
        return []
    (best, _), (worst, name) = min(rmse), max(rmse)
    ll = ensemble.get("log_likelihood")
    if ensemble["rmse"] <= OUTLIER * best and (ll is None or math.isfinite(ll)):
        return []
    return [f"the ensemble's RMSE {ensemble['rmse']:.4g} is {ensemble['rmse'] / best:.3g} x its best member's "
            f"({best:.4g}; test log-likelihood {ll:.4g}): a member far off ({name}, RMSE {worst:.4g}) spoils the "
            "average (a chain that diverged and came back: a smaller step, sampler.lr0; per_sample in metrics.json "
            "names every member)"]
