"""A toy LightningModule with a csg sampler and its three fixed batches: tests/integrations/test_lightning.py, in its
own process and as the script it starts under Lightning's DDP strategy (``python lightning_toy.py DIR PROCESSES``)."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import csg  # noqa: F401  (csg before lightning: its torchvision guard)
import lightning.pytorch as pl
from csg.samplers import SGLD
from csg.schedules import Cyclical

SCHEDULE = Cyclical(lr0=0.05, total_steps=18, cycles=2, explore=0.5)


class Batches:
    """Three fixed batches (a list would be read by Lightning as a list of loaders; an iterable that is not a
    DataLoader is not sharded under DDP: every process reads them all)."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        x, y = torch.randn(96, 5, generator=generator), torch.randint(0, 3, (96,), generator=generator)
        self.batches = [(x[i:i + 32], y[i:i + 32]) for i in range(0, 96, 32)]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


class Toy(pl.LightningModule):
    """A linear classifier; SGLD as its optimizer (seeded alike in every process: the replicas stay equal), or plain
    SGD (``sampler=False``); the lr and temperature each step saw, in ``seen``."""

    def __init__(self, sampler=True):
        super().__init__()
        torch.manual_seed(0)
        self.net, self.sampler = torch.nn.Linear(5, 3), sampler
        self.seen: list[tuple[float, float]] = []

    def training_step(self, batch, batch_idx):
        group = self.trainer.optimizers[0].param_groups[0]
        self.seen.append((group["lr"], group["temperature"]))
        return F.cross_entropy(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        if self.sampler == "sgd with a temperature key":  # a torch optimizer that would ignore it: no noise
            return torch.optim.SGD([{"params": list(self.parameters()), "temperature": 0.5}], lr=0.1)
        if not self.sampler:
            return torch.optim.SGD(self.parameters(), lr=0.1)
        return SGLD(self.parameters(), lr=0.05, num_data=96, temperature=0.5,
                    generator=torch.Generator().manual_seed(1))


if __name__ == "__main__":  # the samples of a run on PROCESSES processes (DDP when more than one) into DIR
    from csg.integrations.lightning import CyclicalSGMCMC

    torch.set_num_threads(1)
    folder, processes = sys.argv[1], int(sys.argv[2])
    sgmcmc = CyclicalSGMCMC(SCHEDULE, temperature=0.5, samples_per_cycle=2, module="net", store=folder)
    trainer = pl.Trainer(max_epochs=6, callbacks=[sgmcmc], accelerator="cpu", devices=processes,
                         strategy="ddp" if processes > 1 else "auto", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Toy(), train_dataloaders=Batches())
