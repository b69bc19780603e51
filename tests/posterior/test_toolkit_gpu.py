"""The posterior's toolkit on the CUDA path: members, uncertainty, diagnostics, ArviZ and one file, on a GPU run.

Every test here is marked ``gpu``: it runs where CUDA is visible (``pytest -m gpu``) and is skipped, with the
reason, everywhere else (see conftest.py). The same behaviour on the CPU: tests/posterior/test_toolkit.py.
"""

from __future__ import annotations

import pytest
import torch

import csg
from csg.evaluation import posterior_distance as distance

pytestmark = pytest.mark.gpu

# two chains of four samples of the embedded default, on the GPU (trainer.device=auto)
RUN = ["sampler.chains=2", "trainer.epochs=4", "sampler.cycles=1", "sampler.explore=0", "sampler.samples_per_cycle=4",
       "model.hidden=[32]", "data.batch_size=1000", "data.test_per_class=20", "logger=none", "trainer.progress=false"]


@pytest.fixture(scope="module", params=["32", "bf16-mixed"])
def gpu_posterior(request, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp(f"gpu_{request.param}") / "run"
    return csg.train([*RUN, f"trainer.precision={request.param}", f"hydra.run.dir={run_dir}"])


def test_members_uncertainty_and_diagnostics_on_the_gpu(gpu_posterior):
    posterior = gpu_posterior
    assert posterior.device.type == "cuda" and posterior.metrics["device"].startswith("cuda")
    x, _ = next(iter(posterior.data.test))
    members = posterior.predict_members(x.cpu())  # moved to the GPU, evaluated there
    assert members.device.type == "cuda" and members.dtype == torch.float32 and members.shape == (8, len(x), 10)
    assert not members.requires_grad and bool(torch.isfinite(members).all())
    weights = torch.tensor(posterior.weights, device="cuda", dtype=torch.float64)
    assert torch.allclose((weights[:, None, None] * members.double()).sum(0), posterior.predict(x).double(), atol=1e-5)
    u = posterior.uncertainty(x)
    assert u.mutual_information.device.type == "cuda" and bool((u.mutual_information >= 0).all())
    metrics = posterior.evaluate()
    assert metrics["mutual_information"] == pytest.approx(posterior.metrics["ensemble"]["mutual_information"],
                                                          rel=1e-4, abs=1e-6)
    shown = posterior.diagnostics()
    assert shown.to_dict() == posterior.metrics["diagnostics"] and shown.draws_per_chain == [4, 4]
    draws = posterior.function_draws()
    assert draws.log_likelihood.device.type == "cpu" and draws.log_likelihood.shape == (8, 200)
    assert posterior.to_inference_data().log_likelihood["y"].shape == (2, 4, 200)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_a_gpu_posterior_saved_loads_on_the_cpu_and_on_the_gpu(gpu_posterior, tmp_path, suffix):
    kept = csg.Posterior.load(gpu_posterior.run_dir, device="cuda", keep_on_device=True)  # states held on the GPU
    path = kept.save(tmp_path / f"posterior{suffix}")
    x, _ = next(iter(gpu_posterior.data.test))
    on_cpu = csg.Posterior.load(path, device="cpu")
    assert on_cpu.device.type == "cpu" and on_cpu.names == gpu_posterior.names
    assert torch.allclose(on_cpu.predict(x.cpu()), gpu_posterior.predict(x).cpu(), atol=2e-2 if
                          gpu_posterior.precision.dtype is not None else 1e-4)
    on_gpu = csg.Posterior.load(path, device="cuda")
    assert torch.allclose(on_gpu.predict(x), gpu_posterior.predict(x), atol=1e-6)


def test_posterior_distances_take_gpu_tensors_with_gradients():
    probs = torch.softmax(torch.randn(10, 3, device="cuda"), 1).requires_grad_()
    reference = torch.softmax(torch.randn(10, 3, device="cuda"), 1)
    assert distance.predictive_agreement(probs, reference) == distance.predictive_agreement(
        probs.detach().cpu().numpy(), reference.cpu().numpy())
    assert 0.0 <= distance.predictive_total_variation(probs, reference) <= 1.0
