"""Processes, chains and their groups: one chain over several processes (DDP), several chains at once.

A run has ``chains`` independent chains (``sampler.chains``). Under ``torchrun``
(or a multi-task SLURM job launched by submitit) the W processes split into
``chains`` groups of W / chains consecutive ranks; each group trains one chain
with DistributedDataParallel inside the group: gradients averaged over the
group, the sampler's noise drawn from identically seeded generators in every
process, so that all replicas of a chain stay bit-identical. Without a
launcher the process trains the chains one after another.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from csg.errors import ConfigError

__all__ = ["Layout", "REPORT_GRACE_S", "any_true", "barrier", "check_interacting_layout", "check_one_gpu_per_process",
           "gather_rows", "interacts", "launched_by_slurm_tasks", "setup", "teardown"]


@dataclass
class Layout:
    """This process's place: global rank / world, its chain, and its rank within the chain's group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    chains: int = 1
    chain: int = 0
    chain_rank: int = 0
    chain_size: int = 1
    group: object = None  # the chain's process group (None: the default group or single process)
    groups: list = field(default_factory=list)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_global_zero(self) -> bool:
        return self.rank == 0

    @property
    def is_chain_leader(self) -> bool:
        return self.chain_rank == 0

    def local_chains(self) -> list[int]:
        """The chains this process trains: its own under a launcher, all of them otherwise."""
        return [self.chain] if self.distributed else list(range(self.chains))


def launched_by_slurm_tasks() -> bool:
    """A multi-task SLURM job started by submitit (its processes join one group as under torchrun)."""
    return int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SUBMITIT_FOLDER" in os.environ


def setup(chains: int, device_name: str) -> Layout:
    """Join the process group if launched with several processes, and split it into chain groups."""
    if "WORLD_SIZE" not in os.environ and launched_by_slurm_tasks():
        import submitit

        submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Layout(chains=chains)
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if world_size % chains:
        raise ConfigError("sampler.chains", chains, f"a divisor of the {world_size} processes")
    use_cuda = device_name.startswith("cuda") or (device_name == "auto" and torch.cuda.is_available())
    if use_cuda:
        check_one_gpu_per_process(device_name, local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    if not dist.is_initialized():
        if use_cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if use_cuda else "gloo")
    size = world_size // chains
    groups = [dist.new_group(list(range(c * size, (c + 1) * size))) for c in range(chains)] if chains > 1 else []
    chain = rank // size
    return Layout(rank=rank, world_size=world_size, local_rank=local_rank, chains=chains, chain=chain,
                  chain_rank=rank % size, chain_size=size, group=groups[chain] if groups else None, groups=groups)


REPORT_GRACE_S = 30.0  # how long the other processes leave the first one to report a bad layout


def check_one_gpu_per_process(device_name: str, local_rank: int, local_world_size: int) -> None:
    """Under a launcher every process of a node takes the GPU of its local rank: there must be enough of them.

    NCCL cannot put two processes of one job on the same GPU, so more processes than visible GPUs stop
    here, before any work, with one line from the node's first process (the others wait for it, at most
    ``REPORT_GRACE_S``, and exit quietly with the same status instead of each printing a CUDA traceback). Several chains on one GPU: one process with
    ``sampler.chains=K``.
    """
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_name.startswith("cuda:"):
        problem = ("cuda or auto under torchrun / SLURM tasks: each process takes the GPU of its local rank "
                   "(pick the GPUs with CUDA_VISIBLE_DEVICES)")
    elif visible == 0:
        problem = "cpu or auto: CUDA is not available on this machine"
    elif local_world_size > visible:
        problem = (f"one GPU per process, and --nproc_per_node={local_world_size} started {local_world_size} processes "
                   f"on a node with {visible} visible GPU{'s' if visible > 1 else ''}; start at most {visible} "
                   f"(--nproc_per_node={visible}), or run on the CPU with trainer.device=cpu")
    else:
        return
    if local_rank != 0:
        # the node's first process reports it; leaving at once would let the launcher stop that process
        # (SIGTERM to the others on the first exit) before it has printed its line
        time.sleep(REPORT_GRACE_S)
        raise SystemExit(ConfigError.exit_code)
    raise ConfigError("trainer.device", device_name, problem)


def interaction_kind(chains: int, replica: bool, contour_interacting: bool) -> str | None:
    """"contour" (ICSGHMC: ``chains`` > 1 that share theta), "replica" (reSGHMC: replica exchange), or None: chains
    that must step together."""
    if replica:
        return "replica"
    if contour_interacting and chains > 1:
        return "contour"
    return None


def check_interacting_layout(kind: str | None, chains: int, layout: Layout) -> None:
    """Chains that step together (``kind``: :func:`interaction_kind`) need a process (group) each: refused without
    a launcher."""
    if kind is not None and not layout.distributed:
        what = "share one theta" if kind == "contour" else "exchange replicas"
        raise ConfigError(
            "sampler.chains", chains,
            f"1 without a launcher: {chains} chains that {what} step together, one process (group) each; run "
            f"`torchrun --standalone --nproc_per_node={chains} train.py ...` (or a SLURM job with {chains} tasks)",
        )


def teardown(layout: Layout, wait: bool = True) -> None:
    """Leave the process group; ``wait``: after every process has arrived (a normal end). Unreachable objects (a
    finished run's DDP wrappers, if reference cycles hold them) are collected first, while the group still exists,
    not at interpreter exit after it is gone: a two-process CPU run once aborted at exit under a loaded test suite
    ("terminate called without an active exception"); the cause is not confirmed."""
    if layout.distributed and dist.is_initialized():
        import gc

        gc.collect()
        if wait:
            dist.barrier()
        dist.destroy_process_group()


def barrier(layout: Layout) -> None:
    if layout.distributed:
        dist.barrier()


def any_true(flag: bool, layout: Layout, device: torch.device) -> bool:
    """True on every process if ``flag`` is True on any (a collective: all processes must call it)."""
    if not layout.distributed:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def gather_rows(tensor: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Concatenate every process's rows in rank order (row counts may differ), on the CPU."""
    if not layout.distributed:
        return tensor
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    local = tensor.to(device)
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(layout.world_size)]
    dist.all_gather(sizes, torch.tensor([local.shape[0]], device=device))
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros((longest, *local.shape[1:]), dtype=local.dtype, device=device)
    padded[: local.shape[0]] = local
    parts = [torch.zeros_like(padded) for _ in range(layout.world_size)]
    dist.all_gather(parts, padded)
    return torch.cat([part[: int(size.item())] for part, size in zip(parts, sizes)]).cpu()
