r"""Does the chain sample? What a sampler's own steps say, with no reference: its temperatures and its motion.

A :class:`SamplingMonitor` watches a sampler in any loop (csg's samplers call it once the step's gradients are
known, :meth:`csg.samplers.SGMCMCOptimizer.observe`; any other ``torch.optim.Optimizer`` from a pre-step hook)
in its sampling steps: those where a param group's ``temperature`` T > 0. For the target
:math:`p(\theta) \propto \exp(-U(\theta)/T)` with :math:`U = N\,\overline\ell + \tfrac{N\,\mathrm{wd}}{2}
\lVert\theta\rVert^2` (:class:`csg.samplers.SGLD`), integration by parts gives, for :math:`d` parameters
(Wenzel et al. 2020, "How good is the Bayes posterior in deep neural networks really?", Section 4 and their
Appendix on temperature diagnostics):

- the **configurational temperature**
  :math:`T_C = \mathbb E[\theta \cdot \nabla U(\theta)] / d`, estimated before each step from the mini-batch
  gradient :math:`g` of the mean loss as :math:`N\,\theta \cdot (g + \mathrm{wd}\,\theta) / d` (unbiased for
  the full gradient's). At stationarity it reads T; a chain at a mode of U (where a noise-free exploration
  stage leaves it) reads about 0, and reads T only once the noise has carried it into the posterior's bulk;
- the **kinetic temperature** of SGHMC (:class:`csg.samplers.SGHMC`, velocity form: the step moves
  :math:`\theta` by :math:`v`; its momentum is :math:`p = v / \sqrt{\eta}` with :math:`\eta = \mathrm{lr} / N`):
  :math:`T_K = \mathbb E[p^2] = \overline{v^2}\, N (1 + m) / (2\,\mathrm{lr})`, the factor :math:`(1 + m)/2 =
  1 - \alpha/2` removing the discretisation's excess (the velocity's stationary variance in a flat direction is
  :math:`\eta T / (1 - \alpha/2)`, friction :math:`\alpha = 1 - m`). Mini-batch gradient noise the update does
  not correct for (csg's :math:`\hat\gamma = 0`, the authors') heats it above T.

Both are averaged over every measured sampling step, per param group, beside the mean target T of those steps.

Each **sampling stage** (a run of steps at T > 0) is also measured for how far it moves against how far it must:

- its displacement: the root mean square over the parameters of :math:`\theta_\mathrm{end} - \theta_\mathrm{start}`;
- its diffusion: how far the injected noise alone carries a weight in a flat direction,
  :math:`\sqrt{\sum_k 2\,\mathrm{lr}_k T / (N (1 - m))}` (SGLD: m = 0; SGHMC's long-run diffusion, over-damped);
- the scale the prior and T imply: the tempered prior's standard deviation :math:`\sqrt{T / (N\,\mathrm{wd})}`
  (without weight decay: the weights' root mean square at the stage's start);
- its **relaxation** = (diffusion / scale)\ :sup:`2`: the steps it took against the steps needed to diffuse
  across that scale (below 1: the stage cannot leave the neighbourhood it starts in, whatever its noise).

The estimators need the sampler's ``num_data`` (N) in each group; a group without it is not measured. A step that
is captured as a CUDA graph is not measured either (its replays run no Python): the reading says so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

__all__ = ["GroupTemperatures", "SamplerReading", "SamplingMonitor", "StageMotion"]


@dataclass(frozen=True)
class GroupTemperatures:
    """One param group's temperatures over its measured sampling steps (``None`` where not measured)."""

    group: int
    parameters: int
    steps: int
    target: float | None
    configurational: float | None
    kinetic: float | None
    chain: int = 0


@dataclass(frozen=True)
class StageMotion:
    """One sampling stage's motion (see the module), over all measured groups; lengths are per weight."""

    stage: int
    steps: int
    displacement: float
    diffusion: float | None
    scale: float
    scale_from: str  # "prior" (the tempered prior's sd) or "weights" (their RMS at the stage's start)
    relaxation: float | None  # (diffusion / scale)^2: steps taken / steps needed
    chain: int = 0

    @property
    def steps_needed(self) -> float | None:
        """How many steps the stage's noise needs to cross its scale at its mean step (steps / relaxation)."""
        return self.steps / self.relaxation if self.relaxation else None


@dataclass(frozen=True)
class SamplerReading:
    """What a :class:`SamplingMonitor` measured: per group (``groups``) and per sampling stage (``stages``), and
    over all groups (weighted by their parameters): ``target``, ``configurational``, ``kinetic`` temperatures and
    the stages' median ``relaxation``; ``note`` says why nothing was measured, where nothing was."""

    groups: list[GroupTemperatures] = field(default_factory=list)
    stages: list[StageMotion] = field(default_factory=list)
    note: str = ""

    def _weighted(self, key: str) -> float | None:
        rows = [(g.parameters, getattr(g, key)) for g in self.groups if getattr(g, key) is not None]
        total = sum(n for n, _ in rows)
        return sum(n * v for n, v in rows) / total if total else None

    @property
    def target(self) -> float | None:
        """The mean target T of the measured steps, over all groups."""
        return self._weighted("target")

    @property
    def configurational(self) -> float | None:
        """The configurational temperature, over all groups (weighted by their parameters)."""
        return self._weighted("configurational")

    @property
    def kinetic(self) -> float | None:
        """SGHMC's kinetic temperature, over all groups (None for a sampler without a velocity)."""
        return self._weighted("kinetic")

    @property
    def relaxation(self) -> float | None:
        """The median over the sampling stages of their relaxation (steps taken / steps needed)."""
        values = sorted(s.relaxation for s in self.stages if s.relaxation is not None)
        return values[len(values) // 2] if values else None

    @property
    def steps(self) -> int:
        """The sampling steps seen (the most of any group)."""
        return max((g.steps for g in self.groups), default=0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values (metrics.json's ``sampling``), with the summaries beside the per-group rows."""
        return {"target": self.target, "configurational": self.configurational, "kinetic": self.kinetic,
                "relaxation": self.relaxation, "steps": self.steps, "note": self.note,
                "groups": [asdict(g) for g in self.groups], "stages": [asdict(s) for s in self.stages]}

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "SamplerReading":
        """The reading :meth:`to_dict` wrote."""
        return cls(groups=[GroupTemperatures(**g) for g in values.get("groups", [])],
                   stages=[StageMotion(**s) for s in values.get("stages", [])], note=values.get("note", ""))

    @classmethod
    def combine(cls, readings: "list[SamplerReading | None]") -> "SamplerReading":
        """The readings of a run's chains as one (each row labelled with its chain, 0-based): the summaries are
        then over all chains."""
        from dataclasses import replace

        groups, stages, notes = [], [], []
        for chain, reading in enumerate(readings):
            if reading is None:
                continue
            groups += [replace(g, chain=chain) for g in reading.groups]
            stages += [replace(s, chain=chain) for s in reading.stages]
            notes += [reading.note] if reading.note else []
        return cls(groups=groups, stages=stages, note=notes[0] if notes and not groups else "")

    def __str__(self) -> str:
        if not self.steps:
            return f"temperatures not measured: {self.note or 'no sampling step was taken'}"
        parts = [f"configurational temperature {_number(self.configurational)}"]
        if self.kinetic is not None:
            parts.append(f"kinetic {_number(self.kinetic)}")
        text = ", ".join(parts) + f" against T = {_number(self.target)} ({self.steps} sampling steps)"
        relaxation = self.relaxation
        if relaxation is not None:
            stage = sorted((s for s in self.stages if s.relaxation is not None), key=lambda s: s.relaxation)[
                len([s for s in self.stages if s.relaxation is not None]) // 2]
            owner = "the prior's" if stage.scale_from == "prior" else "the weights'"
            text += (f"; a sampling stage diffuses {stage.diffusion:.3g} per weight against {owner} scale "
                     f"{stage.scale:.3g}: {relaxation:.3g} of the steps needed to relax (median of "
                     f"{len(self.stages)} stage{'s' if len(self.stages) != 1 else ''})")
        return text


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


class SamplingMonitor:
    """Measures ``sampler``'s temperatures and the motion of its sampling stages (see the module) from a pre-step
    hook: attach it once, step as usual, read :meth:`reading`. ``every``: measure every n-th sampling step (the
    stage motion is exact whatever n). :meth:`close` removes the hook. Your loop::

        monitor = SamplingMonitor(sampler)
        ...                                   # loss.backward(); sampler.step() as always
        print(monitor.reading())              # or csg.Chain(...).diagnostics()
    """

    def __init__(self, sampler: torch.optim.Optimizer, *, every: int = 1):
        if not isinstance(sampler, torch.optim.Optimizer):
            raise TypeError(f"sampler: a torch.optim.Optimizer, got {type(sampler).__name__}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every: an integer >= 1 (measure every n-th sampling step), got {every!r}")
        from csg.samplers import PSGLD, SGHMC, SGLD

        self.sampler, self.every = sampler, every
        self.velocity_form = isinstance(sampler, SGHMC)  # csg's SGHMC: the buffer is the step's displacement
        self.diffusion_known = isinstance(sampler, (SGLD, SGHMC)) and not isinstance(sampler, PSGLD)
        groups = len(sampler.param_groups)
        self.counts = [0] * groups  # sampling steps seen, per group
        self.measured = [0] * groups
        self.kinetic_measured = [0] * groups
        self.sums: list[dict[str, Tensor] | None] = [None] * groups
        self.target_sums = [0.0] * groups
        self.sizes = [0] * groups
        self.open: list[dict[str, Any] | None] = [None] * groups  # the current stage of each group
        self.stages: list[list[dict[str, Any]]] = []  # closed stages: one entry per group that sampled
        self.note = ""
        if hasattr(sampler, "observe"):  # csg's samplers: after a closure's backward, before the update
            self._remove = sampler.observe(self._before_step)
        else:  # any optimizer: before its step (a closure's gradients come too late: the previous step's are read)
            self._remove = sampler.register_step_pre_hook(
                lambda optimizer, args, kwargs: self._before_step(optimizer)).remove

    def close(self) -> None:
        """Stop watching the sampler (the reading so far stays)."""
        self._remove()

    @torch.no_grad()
    def _before_step(self, optimizer) -> None:
        if getattr(optimizer, "_csg_capturing", False):
            self.note = "the step is captured as a CUDA graph, whose replays run no Python (trainer.compile=false measures)"
            return
        closing = []
        for index, group in enumerate(optimizer.param_groups):
            if index >= len(self.counts) or "num_data" not in group:
                continue
            temperature = float(group.get("temperature", 0.0) or 0.0)
            if temperature <= 0:
                if self.open[index] is not None:
                    closing.append(index)
                continue
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            if self.open[index] is None:
                self.open[index] = self._start_stage(group, params)
            stage = self.open[index]
            lr, num_data = float(group["lr"]), float(group["num_data"])
            momentum = float(group.get("momentum", 0.0)) if self.velocity_form else 0.0
            stage["steps"] += 1
            stage["diffusion"] += 2.0 * lr * temperature / (num_data * (1.0 - momentum))
            stage["temperature"] += temperature
            self.counts[index] += 1
            if (self.counts[index] - 1) % self.every:
                continue
            self._measure(index, group, params, temperature, lr, num_data, momentum)
        if closing:
            self._close(closing)

    def _measure(self, index: int, group: dict[str, Any], params: list[Tensor], temperature: float, lr: float,
                 num_data: float, momentum: float) -> None:
        decay = float(group.get("weight_decay", 0.0) or 0.0)
        size = sum(p.numel() for p in params)
        virial = torch.stack([torch.vdot(p.reshape(-1), p.grad.reshape(-1).to(p.dtype)) for p in params]).sum()
        if decay:
            virial = virial + decay * _squares(params)
        sums = self.sums[index]
        if sums is None:
            device = params[0].device
            sums = self.sums[index] = {"configurational": torch.zeros((), dtype=torch.float64, device=device),
                                       "kinetic": torch.zeros((), dtype=torch.float64, device=device)}
        sums["configurational"] += virial.double() * (num_data / size)
        self.measured[index] += 1
        self.target_sums[index] += temperature
        self.sizes[index] = size
        if self.velocity_form and lr > 0:
            buffers = [self.sampler.state[p].get("momentum_buffer") for p in params]
            if all(b is not None for b in buffers):
                energy = _squares(buffers)
                sums["kinetic"] += energy * (num_data * (1.0 + momentum) / (2.0 * lr * size))
                self.kinetic_measured[index] += 1

    @staticmethod
    def _start_stage(group: dict[str, Any], params: list[Tensor]) -> dict[str, Any]:
        return {"params": params, "start": [p.detach().clone() for p in params], "steps": 0, "diffusion": 0.0,
                "temperature": 0.0, "num_data": float(group["num_data"]),
                "weight_decay": float(group.get("weight_decay", 0.0) or 0.0)}

    def _close(self, indices: list[int]) -> None:
        """End the open stages of ``indices``: their displacement (a device tensor until read)."""
        closed = []
        for index in indices:
            stage, self.open[index] = self.open[index], None
            if stage is None:
                continue
            squares = sum((p.detach().double() - s.double()).pow(2).sum() for p, s in zip(stage["params"], stage["start"]))
            weights = sum(s.double().pow(2).sum() for s in stage["start"])
            closed.append({**{k: v for k, v in stage.items() if k not in ("params", "start")}, "squares": squares,
                           "weights": weights, "size": sum(p.numel() for p in stage["params"]),
                           "diffusion_known": self.diffusion_known})
        if closed:
            self.stages.append(closed)

    def reading(self) -> SamplerReading:
        """What was measured so far (a stage still open is measured up to now, and stays open)."""
        stages = [*self.stages]
        still_open = [i for i, stage in enumerate(self.open) if stage is not None]
        if still_open:
            saved = list(self.open)
            self._close(still_open)
            stages.append(self.stages.pop())
            self.open = saved
        groups = []
        for index, sums in enumerate(self.sums):
            measured = self.measured[index]
            if sums is None or not measured:
                continue
            kinetic = (float(sums["kinetic"]) / self.kinetic_measured[index]
                       if self.kinetic_measured[index] else None)
            groups.append(GroupTemperatures(group=index, parameters=self.sizes[index], steps=self.counts[index],
                                            target=self.target_sums[index] / measured,
                                            configurational=float(sums["configurational"]) / measured,
                                            kinetic=kinetic))
        note = self.note if not groups else ""
        if not groups and not note:
            note = ("no sampling step was taken (T > 0)" if not any(self.counts) else
                    "no param group gives num_data (N)")
        return SamplerReading(groups=groups, stages=[_motion(i, s) for i, s in enumerate(stages)], note=note)


def _squares(tensors: list[Tensor]) -> Tensor:
    """The sum of the squares of every element of ``tensors``, in float64 (one fused norm per tensor)."""
    return torch.stack(torch._foreach_norm(tensors)).double().pow(2).sum()


def _motion(index: int, groups: list[dict[str, Any]]) -> StageMotion:
    """One stage's :class:`StageMotion` from its groups' sums."""
    size = sum(g["size"] for g in groups)
    steps = max(g["steps"] for g in groups)
    displacement = math.sqrt(sum(float(g["squares"]) for g in groups) / size)
    diffusion = (math.sqrt(sum(g["diffusion"] * g["size"] for g in groups) / size)
                 if all(g["diffusion_known"] for g in groups) else None)
    if all(g["weight_decay"] > 0 for g in groups):
        variance = sum(g["temperature"] / g["steps"] / (g["num_data"] * g["weight_decay"]) * g["size"]
                       for g in groups) / size
        scale, scale_from = math.sqrt(variance), "prior"
    else:
        scale, scale_from = math.sqrt(sum(float(g["weights"]) for g in groups) / size), "weights"
    relaxation = (diffusion / scale) ** 2 if diffusion is not None and scale > 0 else None
    return StageMotion(stage=index, steps=steps, displacement=displacement, diffusion=diffusion, scale=scale,
                       scale_from=scale_from, relaxation=relaxation)
