"""K independent chains in one process, each step on its own CUDA stream (``trainer.stack_chains=streams``).

The K chains of ``sampler.chains=K`` keep their ordinary steps (:func:`csg.engine.step.single.make_step`: captured as a
CUDA graph on a GPU with SGLD / SGHMC, compiled or eager otherwise), one per chain, and go through the
lock-step loop (:func:`csg.engine.loop.train_chains`) together. A :class:`StreamedStep` launches chain i's
step on CUDA stream i, so that the GPU may run the chains' kernels at once where one batch-64 chain leaves
it idle between small kernels (the hope of issue 34; vectorising them with ``vmap`` instead turns their
convolutions into slower grouped ones, :mod:`csg.engine.step.stacked`). Each chain stream first waits on the loop's
(current) stream, where the mini-batches were put and last iteration's losses were summed, and the loop's
stream then waits on every chain stream before it reads the losses: the ordering is on the device, the
host never waits, and the loop synchronises only where it did (NaN check, collection, checkpoint).

Each chain computes exactly what it computes alone, with its own model, sampler, generator, data order,
samples and checkpoint: the same kernels in the same order, only launched on another stream. On the CPU
(no streams) the step is the documented fallback, the chains' steps one after another in each iteration
of the lock-step loop, which is bit for bit each chain run alone.

Not measured on a GPU yet, so ``trainer.stack_chains`` stays ``false`` (the chains one after another,
each trained whole) by default.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from csg.engine.step.single import Step, make_step


def why_not_streamed(count: int, *, interacting: bool, precision: str, processes_per_chain: int) -> str | None:
    """None when the chains can take their steps on streams in lock-step; else the reason, for a one-line error.

    Dropout and bf16-mixed are fine (each chain's step is its ordinary step). Interacting chains keep one
    process per chain, and a DDP chain its collective; 16-mixed has one loss scaler per process, which the
    chains in lock-step would share (each chain's overflows changing the others' scale)."""
    if count < 2:
        return "there is one chain in this process"
    if interacting:
        return "the chains interact (a shared theta or replica exchange): one process per chain"
    if processes_per_chain > 1:
        return "each chain spans several processes (DDP)"
    if precision == "16-mixed":
        return "trainer.precision=16-mixed: the chains would share one loss scaler (use bf16-mixed or 32)"
    return None


class StreamedStep:
    """One iteration of K chains: chain i's own step on CUDA stream i (on the CPU: one after another).

    ``step(xs, ys)`` takes the K mini-batches and returns the K mean losses and the K counts of correct
    predictions as device tensors of shape (K,), as :class:`csg.engine.step.stacked.StackedStep` does, read on the
    caller's stream after it has waited on every chain's stream.

    ``streams=False`` keeps every step on the current stream, one after another, as on the CPU: the
    reference the benchmark (``scripts/bench_gpu.py``) measures the streams against.
    """

    def __init__(self, steps: Sequence[Step], device: torch.device, *, streams: bool = True):
        self.steps, self.device = list(steps), torch.device(device)
        on_streams = streams and self.device.type == "cuda"
        self.streams = [torch.cuda.Stream(self.device) for _ in self.steps] if on_streams else None

    def __call__(self, xs: Sequence[Tensor], ys: Sequence[Tensor], scale: float | None = None) -> tuple[Tensor, Tensor]:
        if scale is not None:
            raise ValueError("streamed chains run one process per chain (no DDP loss scale)")
        if len(xs) != len(self.steps) or len(ys) != len(self.steps):
            raise ValueError(f"{len(self.steps)} chains, {len(xs)} mini-batches")
        if self.streams is None:
            outputs = [step(x, y) for step, x, y in zip(self.steps, xs, ys)]
        else:
            current = torch.cuda.current_stream(self.device)
            outputs = []
            for step, stream, x, y in zip(self.steps, self.streams, xs, ys):
                stream.wait_stream(current)  # the batch is there; last iteration's reads of the outputs are done
                with torch.cuda.stream(stream):
                    outputs.append(step(x, y))
            for stream in self.streams:
                current.wait_stream(stream)
        losses = torch.stack([loss.reshape(()) for loss, _ in outputs])  # copies: a captured step's outputs are reused
        hits = torch.stack([count.reshape(()) for _, count in outputs])
        return losses, hits


def make_streamed_step(setting, models: Sequence[nn.Module], samplers: Sequence[torch.optim.Optimizer], precision,
                       device: torch.device, *, streams: bool = True, likelihood=None, num_data: int = 1) -> StreamedStep:
    """The chains' own steps of ``trainer.compile=setting`` (:func:`csg.engine.step.single.make_step`, with
    ``likelihood`` and ``num_data``), one stream each."""
    return StreamedStep([make_step(setting, model, sampler, precision, device, likelihood=likelihood, num_data=num_data)
                         for model, sampler in zip(models, samplers)], device, streams=streams)
