"""Whether a run's chains fit in memory: an estimate made before any model is allocated.

:func:`meta_model` builds the run's model on PyTorch's ``meta`` device (shapes and dtypes, no storage, no random
number drawn), so a model of billions of parameters is counted in milliseconds.
:func:`csg.engine.limits.check_memory` compares
what the chains of one process need at least with what the device has free, and refuses in one line (key
``sampler.chains`` or the model's key) where it cannot fit: a run that would otherwise be accepted and then
killed by the kernel's out-of-memory killer, or stop in CUDA's out-of-memory error after its data were built.

The estimate is a lower bound: per chain, its parameters, their gradients and the sampler's state (SGHMC's
momentum: one more copy), on the run's device; on the host, the parameter trace (``trace.samples`` draws of the
trainable parameters in float64) when one is kept. Activations, the data and the framework's own overhead come
on top, so a run refused here cannot fit; a run accepted may still not.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn


def meta_model(build: Callable[[], nn.Module]) -> nn.Module | None:
    """``build()`` on the meta device (no storage), or None when the factory cannot be built there.

    The random number generators of torch (CPU), numpy and Python are as they were before the call: the
    real model built next is initialised as it would have been without the estimate."""
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        with torch.device("meta"):
            model = build()
        return model if isinstance(model, nn.Module) else None
    except Exception:  # noqa: BLE001 - a factory that needs real tensors: the real build will say what is wrong
        return None
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def available_bytes(device: torch.device) -> int | None:
    """Memory free for a new allocation on ``device``: CUDA's free memory of that GPU; for the CPU, the
    kernel's MemAvailable (``/proc/meminfo``), else the free pages (``os.sysconf``). None where unknown (MPS)."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except Exception:  # noqa: BLE001 - no driver: the device check says so elsewhere
            return None
    if device.type != "cpu":
        return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _size(nbytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1e3:.1f} kB"


def chain_bytes(model: nn.Module, *, sampler_copies: int, trace_draws: int = 0) -> tuple[int, int]:
    """(device bytes, host bytes) one chain needs at least: parameters, gradients and ``sampler_copies`` more
    copies of them on the device; ``trace_draws`` float64 draws of the trainable parameters on the host."""
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    trainable_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    device = parameters + buffers + trainable * (1 + sampler_copies)
    return device, trace_draws * trainable_count * 8


def memory_problem(model: nn.Module, device: torch.device, *, chains: int, sampler_copies: int,
                   trace_draws: int = 0, available: Callable[[torch.device], int | None] = available_bytes
                   ) -> str | None:
    """Why ``chains`` chains of ``model`` cannot fit in ``device``'s free memory (one clause), else None."""
    on_device, on_host = chain_bytes(model, sampler_copies=sampler_copies, trace_draws=trace_draws)
    kept = ["parameters", "gradients", *(["sampler state"] if sampler_copies else [])]
    trace = [f"a trace of {trace_draws} draws"] if on_host else []
    needs = {device.type: (on_device, kept)}
    if on_host:
        held, parts = needs.get("cpu", (0, []))
        needs["cpu"] = (held + on_host, parts + trace)
    count = sum(p.numel() for p in model.parameters())
    for kind, (nbytes, parts) in needs.items():
        free = available(device if kind == device.type else torch.device("cpu"))
        if free is not None and nbytes * chains > free:
            return (f"{chains} chain{'s' if chains > 1 else ''} of a model of {count:,} parameters "
                    f"need{'' if chains > 1 else 's'} at least "
                    f"{_size(nbytes * chains)} on {kind} ({', '.join(parts)}), which has {_size(free)} free")
    return None
