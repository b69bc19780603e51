"""Issue 55: a run's start costs what it must. torch.optim's Optimizer imports torch._dynamo (seconds on a CPU
machine) at its first add_param_group / zero_grad / state_dict; csg's samplers skip that import while nothing has
loaded dynamo, and use torch's wrapped methods once something has (a compiled step)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from csg.samplers import SGHMC, SGLD
from csg.samplers.base import SGMCMCOptimizer

CHAIN = textwrap.dedent("""
    import sys, torch
    from csg.samplers import SGHMC
    model = torch.nn.Linear(3, 2)
    sampler = SGHMC(model.parameters(), lr=0.1, num_data=10, temperature=1.0)
    for _ in range(3):
        sampler.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        sampler.step()
    sampler.load_state_dict(sampler.state_dict())
    sampler.add_param_group({"params": [torch.zeros(2, requires_grad=True)]})
    print("torch._dynamo" in sys.modules)
""")


def test_a_chain_on_the_cpu_never_imports_dynamo():
    done = subprocess.run([sys.executable, "-c", CHAIN], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    # the control: torch's own optimizer imports it at its first add_param_group
    plain = CHAIN.replace("from csg.samplers import SGHMC", "").replace(
        "SGHMC(model.parameters(), lr=0.1, num_data=10, temperature=1.0)", "torch.optim.SGD(model.parameters(), lr=0.1)")
    done = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"


def test_the_methods_are_torchs_and_its_wrapped_forms_once_dynamo_is_loaded():
    import torch._dynamo  # noqa: F401  (as a compiled step loads it)

    for name in ("add_param_group", "zero_grad"):  # state_dict and load_state_dict are csg's (the generator)
        assert getattr(SGMCMCOptimizer, name).__doc__ == getattr(torch.optim.Optimizer, name).__doc__
    model = torch.nn.Linear(3, 2)
    sampler = SGLD(model.parameters(), lr=0.1, num_data=10, temperature=0.0)
    model(torch.ones(1, 3)).sum().backward()
    sampler.zero_grad()
    assert all(p.grad is None for p in model.parameters())  # torch's default: set_to_none
    sampler.zero_grad(set_to_none=False)
    state = SGHMC(model.parameters(), lr=0.2, num_data=10).state_dict()
    assert state["param_groups"][0]["lr"] == 0.2 and "generator_state" not in state
