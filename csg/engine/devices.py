"""Where a run computes and in what precision: the device of ``trainer.device``, deterministic GPU kernels on
request, and the autocast and loss scaling of ``trainer.precision`` (:class:`Precision`)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from csg.engine import distributed
from csg.errors import ConfigError

__all__ = ["OVERSUBSCRIBED", "Precision", "resolve_device", "set_deterministic", "set_threads", "usable_cores"]


def resolve_device(name: str, layout: distributed.Layout | None = None) -> torch.device:
    """``trainer.device`` as a device: ``auto`` is the GPU of this process's local rank if CUDA is present."""
    local_rank = layout.local_rank if layout is not None else 0
    if name == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device", name, "cpu or auto: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device", name, "cpu or auto: MPS is not available on this machine")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    return device


def set_deterministic(enabled: bool) -> None:
    """``trainer.deterministic``: deterministic cuDNN and cuBLAS kernels, so that a GPU run repeats itself.

    With it, a chain resumed from a checkpoint gives the samples of the uninterrupted chain bit for bit on
    the same GPU (and the same torch and CUDA versions). It sets ``torch.use_deterministic_algorithms``
    (in ``warn_only`` mode: an operation without a deterministic kernel warns instead of stopping the run),
    turns off cuDNN's autotuner, and sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` unless set already (read when
    cuBLAS starts, so before the first GPU matrix product). On the CPU the kernels are deterministic anyway.
    """
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    if enabled or torch.are_deterministic_algorithms_enabled():  # the call imports inductor (1.4 s): only when it acts
        torch.use_deterministic_algorithms(enabled, warn_only=True)


@dataclass
class Precision:
    """Autocast and loss scaling for ``precision`` in {"32", "bf16-mixed", "16-mixed"}."""

    name: str
    device: torch.device

    def __post_init__(self):
        self.dtype = {"32": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[self.name]
        self.scaler = torch.amp.GradScaler(self.device.type) if self.name == "16-mixed" else None

    def autocast(self, cache: bool = True) -> contextlib.AbstractContextManager:
        """The autocast context (none for "32"); ``cache=False`` inside a CUDA graph capture."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype, cache_enabled=cache)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


OVERSUBSCRIBED = 8  # trainer.threads past this many times the usable cores: refused (a typo, not a setting)


def set_threads(threads: int | None) -> None:
    """``trainer.threads`` for the run (None: torch's default): more than :data:`OVERSUBSCRIBED` x the usable
    cores is a one-line ConfigError, more than the cores a warning (the threads share them)."""
    import logging

    if threads is None:
        return
    cores = usable_cores()  # judged where the run runs: a login node's count is not the job's
    if int(threads) > OVERSUBSCRIBED * cores:
        raise ConfigError("trainer.threads", threads, f"at most {OVERSUBSCRIBED} x the {cores} cores this process "
                          "may use (null: torch's default)")
    if int(threads) > cores:
        logging.getLogger(__name__).warning("trainer.threads=%d is more than the %d cores this process may use: its "
                                            "threads share them", int(threads), cores)
    torch.set_num_threads(int(threads))
